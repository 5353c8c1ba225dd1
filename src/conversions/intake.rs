//! Stores conversions as they arrive: each a copy with its arrival, and an entry in the due
//! list for when its attribution may be decided. Durable before the answer; a copy this
//! process stored lately is not stored again (a retry changes nothing either way: the first
//! copy is the conversion), which bounds what a caller re-sending one id can make it write.

use crate::domain::conversion::{Conversion, ConversionId, ReceivedConversion};
use crate::domain::ids::AdvertiserId;
use crate::erased::ErasedSubjects;
use crate::remembered::Remembered;
use crate::store::{ConversionStore, DueConversion, StoreError};
use chrono::{DateTime, TimeDelta, Utc};
use std::sync::Arc;

/// Conversions remembered as stored; past this, the memory starts over.
const STORED_REMEMBERED: usize = 200_000;
/// How close to its due time a write may end and its entries still be sure to be read.
const LATE_MARGIN: TimeDelta = TimeDelta::seconds(1);
/// How many times late entries are listed again at most.
const LISTINGS_AGAIN: usize = 3;

pub(crate) struct ConversionIntake {
    store: Arc<dyn ConversionStore>,
    /// `--attribution-delay`: how long after its arrival a conversion is decided.
    delay: TimeDelta,
    stored: Remembered<(AdvertiserId, ConversionId)>,
    /// Drops conversions of erased users timed before their erasures (a re-sent old batch).
    erased: Option<Arc<ErasedSubjects>>,
}

impl ConversionIntake {
    fn is_erased(&self, conversion: &Conversion) -> bool {
        let dropped = match (&self.erased, conversion.user_id) {
            (Some(erased), Some(user)) => erased.drops(
                user,
                conversion.advertiser_id,
                conversion.timestamp.instant(),
            ),
            _ => false,
        };
        if dropped {
            metrics::counter!("adevents_erased_events_dropped_total").increment(1);
        }
        dropped
    }

    pub(crate) fn new(store: Arc<dyn ConversionStore>, delay: TimeDelta) -> Self {
        Self {
            store,
            delay,
            stored: Remembered::new(STORED_REMEMBERED),
            erased: None,
        }
    }

    pub(crate) fn with_erased(mut self, erased: Arc<ErasedSubjects>) -> Self {
        self.erased = Some(erased);
        self
    }

    /// Lists the entries again, due a delay (at least [`LATE_MARGIN`]) from now, when their
    /// write ended about when they fell due (a stalled write, a paused process, a delay of 0):
    /// a decider may have read their list through a later entry meanwhile, and would never go
    /// back for them. Whichever entry is decided first is the decision: the first, unless it
    /// was passed over (then the later one credits the events stored until its own due
    /// time). A listing that is itself late is listed again, a few times at most.
    async fn list_again_if_late(
        &self,
        received: DateTime<Utc>,
        due: &[DueConversion],
    ) -> Result<(), StoreError> {
        let margin = (self.delay / 2).min(LATE_MARGIN);
        let mut due_at = received + self.delay;
        for _ in 0..LISTINGS_AGAIN {
            if Utc::now() + margin < due_at {
                return Ok(());
            }
            due_at = Utc::now() + self.delay.max(LATE_MARGIN);
            let listed_again: Vec<DueConversion> = due
                .iter()
                .map(|entry| DueConversion {
                    due: due_at,
                    ..entry.clone()
                })
                .collect();
            metrics::counter!("adevents_conversions_listed_again_total")
                .increment(listed_again.len() as u64);
            self.store
                .write_conversion_copies(&[], &listed_again)
                .await?;
        }
        Ok(())
    }

    /// Stores the conversions (validated, one per id) that this process has not stored lately.
    pub(crate) async fn accept(&self, conversions: Vec<Conversion>) -> Result<(), StoreError> {
        let received = Utc::now();
        let copies: Vec<ReceivedConversion> = conversions
            .into_iter()
            .filter(|conversion| !self.is_erased(conversion))
            .filter(|conversion| {
                !self
                    .stored
                    .contains(&(conversion.advertiser_id, conversion.conversion_id.clone()))
            })
            .map(|conversion| ReceivedConversion {
                conversion,
                received,
                copy: uuid::Uuid::new_v4(),
            })
            .collect();
        if copies.is_empty() {
            return Ok(());
        }
        let due: Vec<DueConversion> = copies
            .iter()
            .map(|copy| DueConversion {
                due: received + self.delay,
                advertiser_id: copy.conversion.advertiser_id,
                conversion_id: copy.conversion.conversion_id.clone(),
            })
            .collect();
        self.store.write_conversion_copies(&copies, &due).await?;
        self.list_again_if_late(received, &due).await?;
        self.stored.remember(
            copies
                .into_iter()
                .map(|copy| (copy.conversion.advertiser_id, copy.conversion.conversion_id)),
        );
        Ok(())
    }
}

//! Sealed days' delivery totals, held per campaign: ad servers poll `delivery` about every
//! second, and a campaign's sealed totals grow with its age while they change only when one of
//! its days is sealed. Holding them makes an answer cost the same for a campaign of a month
//! and of a year (docs/DESIGN.md, "Delivery and freshness").
//!
//! Every seal stores its day and a new version of the campaign's sealed totals together, and
//! deletes the day's live rows afterwards. An answer reads the live rows first, then the
//! version (one small read), and uses held totals only when they were read with that very
//! version: a day sealed before the version was read is in the totals read again, and a day
//! sealed after it still had its live rows when they were read. No count is ever lost or
//! counted twice, whatever the timing.

use crate::domain::delivery::DaySlices;
use crate::domain::ids::CampaignKey;
use crate::domain::time::Day;
use crate::store::SealedCounts;
use chrono::{DateTime, TimeDelta, Utc};
use lru::LruCache;
use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uuid::Uuid;

/// The longest sealed totals are held even when their version stays: a seal written by a
/// release before versions changes no version.
pub(crate) const HELD_AT_MOST: Duration = Duration::from_secs(60);

/// Campaigns whose sealed totals are held at once (a few kilobytes each).
const CAMPAIGNS_HELD: usize = 4096;

/// A campaign's sealed days, in the form an answer needs: every day's slices only where a
/// campaign's local today may overlap it, a sum for the rest.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SealedTotals {
    /// Every sealed day, ascending: their live rows are not counted.
    days: Vec<Day>,
    /// The slices of sealed days from two days before the read's UTC day (a local today
    /// overlaps at most the UTC days from the day before to the day after).
    recent: BTreeMap<Day, DaySlices>,
    /// The billable impressions of the older sealed days: lifetime only.
    earlier: u64,
}

impl SealedTotals {
    /// The sealed days as read at `read_at`.
    pub(crate) fn of(sealed: Vec<(Day, DaySlices)>, read_at: DateTime<Utc>) -> Self {
        let first_recent = Day::new((read_at - TimeDelta::days(2)).date_naive());
        let mut totals = Self::default();
        for (day, slices) in sealed {
            totals.days.push(day);
            if day >= first_recent {
                totals.recent.insert(day, slices);
            } else {
                totals.earlier += slices.total();
            }
        }
        totals.days.sort_unstable();
        totals.days.dedup();
        totals
    }

    pub(crate) fn is_sealed(&self, day: Day) -> bool {
        self.days.binary_search(&day).is_ok()
    }

    /// The sealed days an answer needs one by one.
    pub(crate) fn recent(&self) -> &BTreeMap<Day, DaySlices> {
        &self.recent
    }

    /// What the older sealed days add to the lifetime.
    pub(crate) fn earlier(&self) -> u64 {
        self.earlier
    }
}

struct Held {
    read_at: Instant,
    /// The version the totals were read with.
    version: Option<Uuid>,
    totals: Arc<SealedTotals>,
}

/// The sealed totals held, by campaign.
pub(crate) struct SealedCache {
    held: Mutex<LruCache<CampaignKey, Held>>,
}

impl Default for SealedCache {
    fn default() -> Self {
        Self {
            held: Mutex::new(LruCache::new(
                NonZeroUsize::new(CAMPAIGNS_HELD).unwrap_or(NonZeroUsize::MIN),
            )),
        }
    }
}

impl SealedCache {
    /// The campaign's held totals, if they were read with `version` (just read) and not
    /// longer than [`HELD_AT_MOST`] ago.
    pub(crate) fn get(
        &self,
        campaign: CampaignKey,
        version: Option<Uuid>,
    ) -> Option<Arc<SealedTotals>> {
        let mut held = lock(&self.held);
        let entry = held.get(&campaign)?;
        if entry.version == version && entry.read_at.elapsed() < HELD_AT_MOST {
            return Some(Arc::clone(&entry.totals));
        }
        held.pop(&campaign);
        None
    }

    /// Holds totals read at `read_at` with their version.
    pub(crate) fn put(
        &self,
        campaign: CampaignKey,
        read_at: Instant,
        counts: SealedCounts,
        as_of: DateTime<Utc>,
    ) -> Arc<SealedTotals> {
        let totals = Arc::new(SealedTotals::of(counts.days, as_of));
        lock(&self.held).put(
            campaign,
            Held {
                read_at,
                version: counts.version,
                totals: Arc::clone(&totals),
            },
        );
        totals
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Held totals stay valid whatever panicked while they were held.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::{AdvertiserId, CampaignId};

    fn day(text: &str) -> Day {
        Day::new(text.parse().expect("date"))
    }

    fn slices(count: u64) -> DaySlices {
        let mut slices = DaySlices::default();
        slices.add(40, count);
        slices
    }

    fn campaign() -> CampaignKey {
        CampaignKey {
            advertiser_id: AdvertiserId::new(Uuid::from_u128(1)),
            campaign_id: CampaignId::new(Uuid::from_u128(2)),
        }
    }

    #[test]
    fn days_a_local_today_may_overlap_keep_their_slices_and_older_ones_are_summed() {
        let read_at = "2026-11-26T10:00:00Z".parse().expect("instant");
        let totals = SealedTotals::of(
            vec![
                (day("2025-11-26"), slices(7)),
                (day("2026-11-23"), slices(5)),
                (day("2026-11-24"), slices(3)),
                (day("2026-11-25"), slices(2)),
            ],
            read_at,
        );
        assert_eq!(totals.earlier(), 12);
        assert_eq!(
            totals.recent().keys().copied().collect::<Vec<_>>(),
            [day("2026-11-24"), day("2026-11-25")]
        );
        assert!(totals.is_sealed(day("2025-11-26")));
        assert!(!totals.is_sealed(day("2026-11-26")));
    }

    fn counts(version: Option<Uuid>) -> SealedCounts {
        SealedCounts {
            version,
            days: vec![(day("2026-10-01"), slices(9))],
        }
    }

    #[test]
    fn held_totals_answer_only_for_the_version_they_were_read_with() {
        let cache = SealedCache::default();
        let as_of = "2026-11-26T10:00:00Z".parse().expect("instant");
        let first = Some(Uuid::new_v4());
        let held = cache.put(campaign(), Instant::now(), counts(first), as_of);
        assert_eq!(held.earlier(), 9);
        assert!(cache.get(campaign(), first).is_some());
        // A seal since: another version.
        assert!(cache.get(campaign(), Some(Uuid::new_v4())).is_none());
        assert!(
            cache.get(campaign(), first).is_none(),
            "dropped, not only passed over"
        );
        // Never sealed, then sealed for the first time.
        cache.put(campaign(), Instant::now(), counts(None), as_of);
        assert!(cache.get(campaign(), None).is_some());
        assert!(cache.get(campaign(), first).is_none());
    }

    #[test]
    fn held_totals_are_read_again_after_a_while_whatever_their_version() {
        let cache = SealedCache::default();
        let as_of = "2026-11-26T10:00:00Z".parse().expect("instant");
        let long_ago = Instant::now()
            .checked_sub(HELD_AT_MOST)
            .expect("the clock is past the hold");
        cache.put(campaign(), long_ago, counts(None), as_of);
        assert!(cache.get(campaign(), None).is_none());
    }
}

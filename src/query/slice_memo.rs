//! What summaries decoded of open days' slice aggregates (docs/DESIGN.md, "Open days from
//! closed slices"), kept while the slices' states say the same: a slice's stored aggregate
//! changes only with its state (written after it, under the read's start), so a summary that
//! finds the same states reads them alone, a few small rows, instead of every slice's counts
//! and sketches, and unions nothing it unioned before. Right on every store, shared or not.

use super::aggregate::DayAggregate;
use crate::domain::ids::CampaignKey;
use crate::domain::sketch::UniqueSketch;
use crate::domain::slices::Slice;
use crate::domain::time::Day;
use crate::store::ReachLevel;
use chrono::{DateTime, Utc};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// Campaign-days (and levels) kept; past this, the one read least recently goes.
const DAYS_KEPT: usize = 1_024;
/// The memory all kept days may take (counts and sketches, estimated).
const KEPT_BYTES: usize = 64 * 1024 * 1024;
/// A day taking more than this (hundreds of ads by hour) is not kept.
const DAY_BYTES: usize = KEPT_BYTES / 8;

/// Which campaign-day, read at which levels.
pub(crate) type MemoKey = (CampaignKey, Day, Vec<ReachLevel>);

/// The slices whose aggregates answered, each with the start of the read behind its aggregate.
pub(crate) type Signature = Vec<(Slice, Option<DateTime<Utc>>)>;

/// The day's slice aggregates as decoded, and which of them answered.
#[derive(Clone)]
pub(crate) struct Decoded {
    pub(crate) aggregate: DayAggregate,
    /// The slices the aggregates answered for (those whose sketch decoded).
    pub(crate) answered: HashSet<Slice>,
}

pub(crate) struct SliceMemo {
    days: Mutex<Days>,
}

#[derive(Default)]
struct Days {
    by_key: HashMap<MemoKey, Held>,
    reads: u64,
    bytes: usize,
}

struct Held {
    signature: Signature,
    decoded: Decoded,
    bytes: usize,
    last_read: u64,
}

impl SliceMemo {
    pub(crate) fn new() -> Self {
        Self {
            days: Mutex::new(Days::default()),
        }
    }

    #[cfg(test)]
    fn holds(&self, key: &MemoKey) -> bool {
        self.lock().by_key.contains_key(key)
    }

    /// What is kept of `key`, if it was decoded from the slices `signature` names.
    pub(crate) fn get(&self, key: &MemoKey, signature: &Signature) -> Option<Decoded> {
        let mut days = self.lock();
        days.reads += 1;
        let reads = days.reads;
        let held = days.by_key.get_mut(key)?;
        if held.signature != *signature {
            return None;
        }
        held.last_read = reads;
        Some(held.decoded.clone())
    }

    /// Keeps what was decoded of `key` from the slices `signature` names.
    pub(crate) fn put(&self, key: MemoKey, signature: Signature, decoded: &Decoded) {
        let bytes = bytes_of(&decoded.aggregate);
        let mut days = self.lock();
        let days = &mut *days;
        if let Some(gone) = days.by_key.remove(&key) {
            days.bytes -= gone.bytes.min(days.bytes);
        }
        if bytes > DAY_BYTES {
            return;
        }
        while days.by_key.len() >= DAYS_KEPT || days.bytes + bytes > KEPT_BYTES {
            let Some(oldest) = days
                .by_key
                .iter()
                .min_by_key(|(_, held)| held.last_read)
                .map(|(key, _)| key.clone())
            else {
                break;
            };
            if let Some(gone) = days.by_key.remove(&oldest) {
                days.bytes -= gone.bytes.min(days.bytes);
            }
        }
        days.bytes += bytes;
        let last_read = days.reads;
        days.by_key.insert(
            key,
            Held {
                signature,
                decoded: decoded.clone(),
                bytes,
                last_read,
            },
        );
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Days> {
        self.days
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// About what `aggregate` holds in memory.
fn bytes_of(aggregate: &DayAggregate) -> usize {
    const ENTRY: usize = 256;
    let reach = &aggregate.reach;
    let sketches = reach
        .day
        .iter()
        .chain(reach.ads.iter().flat_map(|ads| ads.values()))
        .chain(reach.hours.iter().flat_map(|hours| hours.values()))
        .chain(reach.ad_hours.iter().flat_map(|ad_hours| ad_hours.values()))
        .map(sketch_bytes)
        .sum::<usize>();
    aggregate.slices.len() * ENTRY + sketches
}

fn sketch_bytes(sketch: &UniqueSketch) -> usize {
    std::mem::size_of::<UniqueSketch>() + 32 + sketch.heap_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::{AdId, AdvertiserId, CampaignId};
    use crate::query::aggregate::SliceCounts;
    use uuid::Uuid;

    fn key(n: u128) -> MemoKey {
        let campaign = CampaignKey {
            advertiser_id: AdvertiserId::new(Uuid::from_u128(1)),
            campaign_id: CampaignId::new(Uuid::from_u128(n)),
        };
        let day = Day::new("2026-11-29".parse().expect("date"));
        (campaign, day, vec![ReachLevel::CampaignDay])
    }

    fn decoded(impressions: u64) -> Decoded {
        let mut aggregate = DayAggregate::default();
        aggregate.slices.insert(
            (7, AdId::new(Uuid::from_u128(3))),
            SliceCounts {
                impressions,
                ..SliceCounts::default()
            },
        );
        Decoded {
            aggregate,
            answered: [7].into_iter().collect(),
        }
    }

    #[test]
    fn kept_while_the_states_say_the_same() {
        let memo = SliceMemo::new();
        let at: DateTime<Utc> = "2026-11-29T10:20:00Z".parse().expect("time");
        let signature: Signature = vec![(7, Some(at))];
        assert!(!memo.holds(&key(1)));
        memo.put(key(1), signature.clone(), &decoded(5));
        assert!(memo.holds(&key(1)));
        let held = memo.get(&key(1), &signature).expect("kept");
        assert_eq!(
            held.aggregate.slices.values().next().map(|c| c.impressions),
            Some(5)
        );
        // Aggregated again, or another slice answering: not the same.
        let again = vec![(7, Some(at + chrono::TimeDelta::seconds(15)))];
        assert!(memo.get(&key(1), &again).is_none());
        assert!(
            memo.get(&key(1), &vec![(7, Some(at)), (8, Some(at))])
                .is_none()
        );
        assert!(memo.get(&key(2), &signature).is_none());
    }

    #[test]
    fn the_days_read_least_recently_go_first() {
        let memo = SliceMemo::new();
        let signature: Signature = vec![(7, None)];
        for n in 0..=DAYS_KEPT as u128 {
            memo.put(key(n), signature.clone(), &decoded(1));
            // Day 0 is read after every put but the last few: it stays.
            if n < DAYS_KEPT as u128 - 5 {
                assert!(memo.get(&key(0), &signature).is_some());
            }
        }
        assert!(memo.holds(&key(DAYS_KEPT as u128)));
        assert!(!memo.holds(&key(1)));
        assert!(memo.lock().by_key.len() <= DAYS_KEPT);
    }
}

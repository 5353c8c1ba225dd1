//! What this process wrote to the campaigns' counted rows, by campaign and event time, for a
//! store no other process writes (the embedded store): a reader that keeps what it aggregated
//! of a stretch asks whether anything written since could change it (docs/DESIGN.md, "Open
//! days from closed slices"). A write changes counts from one instant per campaign on: its
//! events' own times, or earlier where the writer learns that it reaches back (an impression's
//! other copies, a valid click's first click, a view report's impression), so one instant per
//! campaign and write says enough.

use crate::domain::ids::CampaignKey;
use chrono::{DateTime, Utc};
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// Changes remembered per campaign; an older read is taken as changed throughout.
const CHANGES_PER_CAMPAIGN: usize = 4_096;
/// Campaigns remembered; past this the log starts over, every older read taken as changed.
const CAMPAIGNS: usize = 100_000;
/// Steps remembered of every campaign together (16 bytes each); past this too.
const STEPS: usize = 1_000_000;
/// Two changes within one second of event time, the later written last, are kept as one: the
/// earlier instant with the later sequence number (a reader whose pieces are whole seconds
/// learns the same from it).
const COALESCE_MILLIS: i64 = 1_000;

/// The log; one per store, shared by everything in the process that writes or reads through it.
#[derive(Debug, Default)]
pub struct ChangeLog {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The sequence number of the latest write recorded.
    sequence: u64,
    /// Reads at or before this sequence number are taken as changed throughout.
    forgotten_through: u64,
    campaigns: HashMap<CampaignKey, Campaign>,
    /// Steps held by every campaign together.
    steps: usize,
}

/// One campaign's changes as a staircase: sequence numbers and event times both increasing,
/// so the earliest time written after any sequence number is the first step past it.
#[derive(Debug, Default)]
struct Campaign {
    steps: VecDeque<(u64, i64)>,
    forgotten_through: u64,
}

impl ChangeLog {
    pub fn new() -> Self {
        Self::default()
    }

    /// The sequence number a read starting now takes: every write recorded at or before it
    /// was done before the read began.
    pub(crate) fn sequence(&self) -> u64 {
        self.lock().sequence
    }

    /// Records one write, done and visible to reads, that changed the rows of each campaign
    /// from the paired time on. A write records after its commit, so a read that began before
    /// the record either saw the write or holds an older sequence number.
    pub(crate) fn record(&self, changes: impl IntoIterator<Item = (CampaignKey, DateTime<Utc>)>) {
        let mut earliest: HashMap<CampaignKey, i64> = HashMap::new();
        for (campaign, at) in changes {
            let millis = at.timestamp_millis();
            earliest
                .entry(campaign)
                .and_modify(|held| *held = (*held).min(millis))
                .or_insert(millis);
        }
        if earliest.is_empty() {
            return;
        }
        let mut state = self.lock();
        state.sequence += 1;
        let sequence = state.sequence;
        if state.campaigns.len() + earliest.len() > CAMPAIGNS || state.steps >= STEPS {
            state.campaigns.clear();
            state.steps = 0;
            state.forgotten_through = sequence;
        }
        for (campaign, millis) in earliest {
            let steps = state.campaigns.entry(campaign).or_default();
            let before = steps.steps.len();
            steps.step(sequence, millis);
            let after = steps.steps.len();
            state.steps = (state.steps + after).saturating_sub(before);
        }
    }

    /// The earliest event time of `campaign` that a write recorded after `sequence` changed;
    /// `None` when nothing did. A read older than what is remembered gets the earliest time.
    pub(crate) fn changed_since(
        &self,
        campaign: CampaignKey,
        sequence: u64,
    ) -> Option<DateTime<Utc>> {
        let state = self.lock();
        if sequence < state.forgotten_through {
            return Some(DateTime::<Utc>::MIN_UTC);
        }
        let changes = state.campaigns.get(&campaign)?;
        if sequence < changes.forgotten_through {
            return Some(DateTime::<Utc>::MIN_UTC);
        }
        let first_after = changes.steps.partition_point(|(step, _)| *step <= sequence);
        let (_, millis) = changes.steps.get(first_after)?;
        Some(DateTime::from_timestamp_millis(*millis).unwrap_or(DateTime::<Utc>::MIN_UTC))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Campaign {
    fn step(&mut self, sequence: u64, millis: i64) {
        // A later step at an earlier or equal time covers every read the older one answered.
        while self.steps.back().is_some_and(|(_, at)| *at >= millis) {
            self.steps.pop_back();
        }
        match self.steps.back_mut() {
            Some((step, at))
                if at.div_euclid(COALESCE_MILLIS) == millis.div_euclid(COALESCE_MILLIS) =>
            {
                *step = sequence;
            }
            _ => self.steps.push_back((sequence, millis)),
        }
        if self.steps.len() > CHANGES_PER_CAMPAIGN
            && let Some((dropped, _)) = self.steps.pop_front()
        {
            self.forgotten_through = dropped;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::{AdvertiserId, CampaignId};
    use uuid::Uuid;

    fn campaign(n: u128) -> CampaignKey {
        CampaignKey {
            advertiser_id: AdvertiserId::new(Uuid::from_u128(1)),
            campaign_id: CampaignId::new(Uuid::from_u128(n)),
        }
    }

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().expect("time")
    }

    #[test]
    fn a_read_learns_the_earliest_time_written_after_it() {
        let log = ChangeLog::new();
        let (one, two) = (campaign(1), campaign(2));
        log.record([(one, at("2026-11-29T10:00:30Z"))]);
        let read = log.sequence();
        assert_eq!(log.changed_since(one, read), None);
        log.record([
            (one, at("2026-11-29T10:05:00Z")),
            (one, at("2026-11-29T10:04:00Z")),
            (two, at("2026-11-29T09:00:00Z")),
        ]);
        log.record([(one, at("2026-11-29T10:06:00Z"))]);
        assert_eq!(
            log.changed_since(one, read),
            Some(at("2026-11-29T10:04:00Z"))
        );
        assert_eq!(
            log.changed_since(one, read + 1),
            Some(at("2026-11-29T10:06:00Z"))
        );
        assert_eq!(log.changed_since(one, log.sequence()), None);
        assert_eq!(
            log.changed_since(two, read),
            Some(at("2026-11-29T09:00:00Z"))
        );
        // An earlier write after both covers both reads.
        log.record([(one, at("2026-11-29T08:00:00Z"))]);
        assert_eq!(
            log.changed_since(one, read + 1),
            Some(at("2026-11-29T08:00:00Z"))
        );
    }

    #[test]
    fn writes_in_one_second_are_one_step_and_old_reads_count_as_changed() {
        let log = ChangeLog::new();
        let one = campaign(1);
        let start = at("2026-11-29T10:00:00Z");
        let read = log.sequence();
        for millis in 0..100 {
            log.record([(one, start + chrono::TimeDelta::milliseconds(millis * 10))]);
        }
        assert_eq!(log.changed_since(one, read), Some(start));
        // The coalesced step answers for the latest write of its second, at its earliest time.
        assert_eq!(log.changed_since(one, log.sequence() - 1), Some(start));
        for second in 1..=CHANGES_PER_CAMPAIGN as i64 + 1 {
            log.record([(one, start + chrono::TimeDelta::seconds(second))]);
        }
        assert_eq!(log.changed_since(one, read), Some(DateTime::<Utc>::MIN_UTC));
        assert_eq!(log.changed_since(one, log.sequence()), None);
    }
}

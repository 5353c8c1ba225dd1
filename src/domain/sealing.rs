//! The sealing rule (docs/DESIGN.md, "Sealing closed days"): when an event is late, when a
//! day may be sealed, and whether a stored seal still answers for its day. The write paths
//! mark late days by this rule alone; the sealer and the queries read seals by it. Nothing
//! here touches a store or a clock: callers pass `now`.

use super::time::Day;
use chrono::{DateTime, TimeDelta, Utc};
use std::time::Duration;

/// How long after a UTC day ends its events are still on time, and when it may be sealed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealingRule {
    grace: TimeDelta,
    /// How long after the day ends a join may still change it (a pixel fired `--tag-ttl`
    /// late, then its view reports): the day is sealed only past both.
    joins_open: TimeDelta,
}

impl Default for SealingRule {
    /// One hour: ad servers' retries and clock skew fit well inside it.
    fn default() -> Self {
        Self {
            grace: TimeDelta::hours(1),
            joins_open: TimeDelta::zero(),
        }
    }
}

impl SealingRule {
    /// A rule with `grace`; a grace beyond what a date-time can hold is taken as one hour.
    pub(crate) fn new(grace: Duration) -> Self {
        Self {
            grace: TimeDelta::from_std(grace).unwrap_or(TimeDelta::hours(1)),
            joins_open: TimeDelta::zero(),
        }
    }

    /// A rule under which a day is also sealed only once `open` has passed since its end, for
    /// the joins still open then (a pixel fired up to `--tag-ttl` after its impression, then
    /// its view reports up to `--view-window` after that). Events still mark a day late by
    /// the grace alone: a mark before the seal costs nothing, and a day sealed by hand
    /// (`adevents rollup`) is marked again by whatever comes after.
    pub(crate) fn with_joins_open_for(self, open: Duration) -> Self {
        Self {
            joins_open: TimeDelta::from_std(open).unwrap_or(TimeDelta::MAX),
            ..self
        }
    }

    /// How long after a UTC day ends it may be sealed (less the margin).
    pub(crate) fn seal_delay(&self) -> TimeDelta {
        self.grace.max(self.joins_open)
    }

    /// Whether an event for UTC `day` arriving `now` is late: its day may already be sealed,
    /// so it must mark the day (by its age, never by reading the seal).
    pub(crate) fn is_late(&self, day: Day, now: DateTime<Utc>) -> bool {
        now >= day.next().start_utc() + self.grace
    }

    /// Whether `day` may be sealed `now`: past the grace period, with a margin for clock
    /// differences between servers.
    pub(crate) fn may_seal(&self, day: Day, now: DateTime<Utc>) -> bool {
        now >= day.next().start_utc() + self.seal_delay() + SealState::MARGIN
    }
}

/// Whether a day's rollup may answer for it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SealState {
    /// When the read behind the stored rollup started.
    pub(crate) sealed_from: Option<DateTime<Utc>>,
    /// When the latest late event for the day arrived.
    pub(crate) late_at: Option<DateTime<Utc>>,
}

impl SealState {
    /// How much earlier than the seal's read a late event's mark must be for the read to have
    /// surely seen the event. Marks are written after their events, so this only covers
    /// clock differences between the servers that write marks and seals.
    pub(crate) const MARGIN: TimeDelta = TimeDelta::seconds(5);

    /// Whether the stored rollup holds every event of the day.
    pub(crate) fn is_current(&self) -> bool {
        match (self.sealed_from, self.late_at) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(sealed_from), Some(late_at)) => late_at + Self::MARGIN < sealed_from,
        }
    }
}

/// An owner-day with a late event, from the late index: the sealer finds such days whatever
/// their age without scanning every day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LateMark {
    pub(crate) owner: super::owner::Owner,
    pub(crate) day: Day,
    /// The latest late event's arrival recorded in the index.
    pub(crate) late_at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().expect("time")
    }

    #[test]
    fn a_day_is_late_after_its_grace_and_sealed_after_the_margin() {
        let rule = SealingRule::default();
        let day = Day::new("2026-11-25".parse().expect("date"));
        assert!(!rule.is_late(day, at("2026-11-26T00:59:59Z")));
        assert!(rule.is_late(day, at("2026-11-26T01:00:00Z")));
        assert!(!rule.may_seal(day, at("2026-11-26T01:00:04Z")));
        assert!(rule.may_seal(day, at("2026-11-26T01:00:05Z")));

        // With view reports open 1 h 10 min after the day: late as before, sealed later.
        let joins = rule.with_joins_open_for(Duration::from_secs(4200));
        assert!(joins.is_late(day, at("2026-11-26T01:00:00Z")));
        assert!(!joins.may_seal(day, at("2026-11-26T01:10:04Z")));
        assert!(joins.may_seal(day, at("2026-11-26T01:10:05Z")));
    }

    #[test]
    fn a_seal_answers_until_a_late_mark_newer_than_its_read_less_the_margin() {
        let sealed = at("2026-11-26T02:00:00Z");
        let state = |late: Option<&str>| SealState {
            sealed_from: Some(sealed),
            late_at: late.map(at),
        };
        assert!(!SealState::default().is_current());
        assert!(state(None).is_current());
        assert!(state(Some("2026-11-26T01:59:54Z")).is_current());
        assert!(!state(Some("2026-11-26T01:59:55Z")).is_current());
        assert!(!state(Some("2026-11-26T03:00:00Z")).is_current());
    }
}

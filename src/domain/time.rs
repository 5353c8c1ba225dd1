//! Event times and calendar days. An [`EventTime`] is within the accepted window (not before
//! 2000-01-01, not more than 10 minutes ahead of the server's clock) at millisecond precision,
//! the precision the stores keep.

use chrono::{DateTime, Duration, NaiveDate, TimeZone, Utc};
use std::fmt;

/// The additive counts of rollups are kept per 15-minute slice since the epoch: a day in any
/// zone (every offset is a multiple of 15 minutes) is a whole number of slices.
pub(crate) const SLICE_MILLIS: i64 = 15 * 60 * 1000;
/// Unique-count sketches are kept per UTC hour since the epoch.
pub(crate) const HOUR_MILLIS: i64 = 60 * 60 * 1000;
/// 15-minute slices in an hour.
pub(crate) const SLICES_PER_HOUR: i64 = HOUR_MILLIS / SLICE_MILLIS;

/// How far ahead of the server's clock an event may be (clock skew of ad servers).
pub(crate) const MAX_FUTURE_SKEW: Duration = Duration::minutes(10);

/// The instant an impression was served or an ad clicked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventTime(DateTime<Utc>);

/// Why a timestamp is not an acceptable event time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventTimeError {
    #[error("is not an RFC 3339 date-time ({0})")]
    NotRfc3339(String),
    #[error("is out of range")]
    OutOfRange,
    #[error("is before 2000-01-01")]
    TooOld,
    #[error("is more than 10 minutes in the future")]
    InTheFuture,
}

impl EventTime {
    /// The earliest acceptable event time.
    pub fn earliest() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0)
            .single()
            .unwrap_or(DateTime::<Utc>::MIN_UTC)
    }

    /// Checks `instant` against the window around `now`; sub-millisecond digits are dropped.
    pub(crate) fn new(instant: DateTime<Utc>, now: DateTime<Utc>) -> Result<Self, EventTimeError> {
        if instant < Self::earliest() {
            return Err(EventTimeError::TooOld);
        }
        if instant > now + MAX_FUTURE_SKEW {
            return Err(EventTimeError::InTheFuture);
        }
        DateTime::from_timestamp_millis(instant.timestamp_millis())
            .map(Self)
            .ok_or(EventTimeError::OutOfRange)
    }

    pub(crate) fn from_rfc3339(text: &str, now: DateTime<Utc>) -> Result<Self, EventTimeError> {
        let instant = DateTime::parse_from_rfc3339(text)
            .map_err(|error| EventTimeError::NotRfc3339(error.to_string()))?;
        Self::new(instant.with_timezone(&Utc), now)
    }

    pub fn from_epoch_millis(millis: i64, now: DateTime<Utc>) -> Result<Self, EventTimeError> {
        let instant = DateTime::from_timestamp_millis(millis).ok_or(EventTimeError::OutOfRange)?;
        Self::new(instant, now)
    }

    /// A time read back from a store, which only holds valid ones.
    pub fn from_stored(instant: DateTime<Utc>) -> Self {
        Self(instant)
    }

    pub fn instant(&self) -> DateTime<Utc> {
        self.0
    }

    pub(crate) fn epoch_millis(&self) -> i64 {
        self.0.timestamp_millis()
    }

    /// The UTC day the stores partition this event under.
    pub fn utc_day(&self) -> Day {
        Day(self.0.date_naive())
    }
}

impl fmt::Display for EventTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
    }
}

/// A calendar day (in UTC for partitions, in the query's zone for answers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Day(NaiveDate);

impl Day {
    pub const fn new(date: NaiveDate) -> Self {
        Self(date)
    }

    pub(crate) fn date(&self) -> NaiveDate {
        self.0
    }

    pub(crate) fn next(&self) -> Self {
        Self(self.0 + Duration::days(1))
    }

    /// Midnight UTC at the start of this day.
    pub(crate) fn start_utc(&self) -> DateTime<Utc> {
        self.0.and_time(chrono::NaiveTime::MIN).and_utc()
    }

    /// Every day from `self` to `last`, both included.
    pub fn through(self, last: Day) -> impl Iterator<Item = Day> {
        self.0
            .iter_days()
            .take_while(move |day| *day <= last.0)
            .map(Day)
    }

    /// The first 15-minute slice (since the epoch) of this day.
    pub(crate) fn first_slice(&self) -> i64 {
        self.start_utc().timestamp_millis() / SLICE_MILLIS
    }

    /// The first hour (since the epoch) of this day.
    pub(crate) fn first_hour(&self) -> i64 {
        self.start_utc().timestamp_millis() / HOUR_MILLIS
    }
}

impl fmt::Display for Day {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.format("%Y-%m-%d"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 26, 12, 0, 0)
            .single()
            .expect("valid")
    }

    #[test]
    fn accepts_rfc3339_and_epoch_millis_and_keeps_milliseconds() {
        let from_text =
            EventTime::from_rfc3339("2026-11-26T13:00:00.123456+01:00", now()).expect("valid");
        let from_millis =
            EventTime::from_epoch_millis(from_text.epoch_millis(), now()).expect("valid");
        assert_eq!(from_text, from_millis);
        assert_eq!(from_text.to_string(), "2026-11-26T12:00:00.123Z");
    }

    #[test]
    fn refuses_times_outside_the_window() {
        assert_eq!(
            EventTime::from_rfc3339("1999-12-31T23:59:59Z", now()),
            Err(EventTimeError::TooOld)
        );
        assert!(EventTime::from_rfc3339("2026-11-26T12:09:59Z", now()).is_ok());
        assert_eq!(
            EventTime::from_rfc3339("2026-11-26T12:10:01Z", now()),
            Err(EventTimeError::InTheFuture)
        );
        assert!(matches!(
            EventTime::from_rfc3339("yesterday", now()),
            Err(EventTimeError::NotRfc3339(_))
        ));
    }

    #[test]
    fn utc_day_of_a_late_evening_event_elsewhere() {
        let time = EventTime::from_rfc3339("2026-11-25T23:30:00-05:00", now()).expect("valid");
        assert_eq!(time.utc_day().to_string(), "2026-11-26");
    }
}

//! How long raw events and aggregates are kept (`--retain-raw`, `--retain-aggregates`), judged
//! by each UTC day's start: every row of a day expires at the same instant, so a day is never
//! half expired, whatever time of the day its events came or when they were written.

use super::time::Day;
use chrono::{DateTime, TimeDelta, Utc};
use std::fmt;
use std::time::Duration;

/// The shortest retention accepted. A day may be sealed only after its grace (an hour past its
/// end by default): a day that expired sooner would lose its raw events before its rollup
/// exists, so its counts would go with them.
pub const MIN_RETENTION: Duration = Duration::from_secs(2 * 24 * 3600);

/// How long something is kept after its UTC day began.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Retention {
    /// Nothing expires (the default: ad data is kept for audits).
    #[default]
    Forever,
    /// A day's rows expire this long after the day began.
    For(TimeDelta),
}

/// Why a retention is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetentionError {
    #[error("{0:?} is neither `forever` nor a duration such as `400days`")]
    Unreadable(String),
    #[error("{0:?} is shorter than 2 days (a day must be sealed before its raw events expire)")]
    TooShort(String),
    #[error("{0:?} is longer than any store can keep a row (20 years)")]
    TooLong(String),
}

/// Cassandra refuses a TTL above 20 years; no retention may promise more.
const MAX_RETENTION_SECONDS: i64 = 630_720_000;

impl Retention {
    /// `forever`, or a duration (`400days`, `13weeks`) of at least [`MIN_RETENTION`].
    pub fn parse(text: &str) -> Result<Self, RetentionError> {
        if text.trim().eq_ignore_ascii_case("forever") {
            return Ok(Self::Forever);
        }
        let duration = humantime::parse_duration(text.trim())
            .map_err(|_| RetentionError::Unreadable(text.to_owned()))?;
        if duration < MIN_RETENTION {
            return Err(RetentionError::TooShort(text.to_owned()));
        }
        let seconds = i64::try_from(duration.as_secs())
            .ok()
            .filter(|seconds| *seconds <= MAX_RETENTION_SECONDS)
            .ok_or_else(|| RetentionError::TooLong(text.to_owned()))?;
        Ok(Self::For(TimeDelta::seconds(seconds)))
    }

    /// When the rows of `day` expire (`None`: never).
    pub fn expires_at(&self, day: Day) -> Option<DateTime<Utc>> {
        match self {
            Self::Forever => None,
            Self::For(keep) => Some(day.start_utc() + *keep),
        }
    }

    /// Whether `day` began more than the retention before `now`: its rows are gone, or going.
    pub fn expired(&self, day: Day, now: DateTime<Utc>) -> bool {
        self.expires_at(day).is_some_and(|at| at < now)
    }

    /// The oldest UTC day still kept at `now` (`None`: every day is kept); a sweep drops the
    /// days before it.
    pub fn first_kept_day(&self, now: DateTime<Utc>) -> Option<Day> {
        let Self::For(keep) = self else {
            return None;
        };
        // The day that began at or after `now - keep`: the one holding that instant, or the
        // next when the instant falls inside it (that day began before, so it expired).
        let earliest_start = now - *keep;
        let holding = Day::new(earliest_start.date_naive());
        Some(if holding.start_utc() < earliest_start {
            holding.next()
        } else {
            holding
        })
    }

    /// Why an event of an expired day is refused, for its `timestamp` field: judged by the
    /// day, so that a day's events are all kept or all gone.
    pub fn refusal(&self) -> String {
        format!(
            "is on a UTC day that began more than {self} ago, past the server's retention of \
             raw events (--retain-raw)"
        )
    }

    /// Seconds a row of `day` written at `now` still has to live: at least 1, since a TTL of
    /// 0 means "never" to Cassandra (`None`: keep it forever).
    pub fn ttl_seconds(&self, day: Day, now: DateTime<Utc>) -> Option<i32> {
        let remaining = (self.expires_at(day)? - now).num_seconds();
        Some(i32::try_from(remaining.clamp(1, MAX_RETENTION_SECONDS + 86_400)).unwrap_or(i32::MAX))
    }
}

impl fmt::Display for Retention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Forever => f.write_str("forever"),
            Self::For(keep) => {
                let seconds = u64::try_from(keep.num_seconds()).unwrap_or(0);
                write!(
                    f,
                    "{}",
                    humantime::format_duration(Duration::from_secs(seconds))
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().expect("instant")
    }

    fn day(text: &str) -> Day {
        Day::new(text.parse().expect("date"))
    }

    #[test]
    fn parses_forever_and_durations_of_two_days_or_more() {
        assert_eq!(Retention::parse("forever"), Ok(Retention::Forever));
        assert_eq!(
            Retention::parse("400days"),
            Ok(Retention::For(TimeDelta::days(400)))
        );
        assert!(matches!(
            Retention::parse("36h"),
            Err(RetentionError::TooShort(_))
        ));
        assert!(matches!(
            Retention::parse("soon"),
            Err(RetentionError::Unreadable(_))
        ));
        assert!(matches!(
            Retention::parse("30years"),
            Err(RetentionError::TooLong(_))
        ));
        assert_eq!(
            Retention::parse("30days").expect("parses").to_string(),
            "30days"
        );
    }

    #[test]
    fn a_day_expires_whole_at_its_start_plus_the_retention() {
        let keep = Retention::parse("30days").expect("parses");
        // 2026-10-01 began 30 days before 2026-10-31 00:00.
        assert!(!keep.expired(day("2026-10-01"), at("2026-10-31T00:00:00Z")));
        assert!(keep.expired(day("2026-10-01"), at("2026-10-31T00:00:01Z")));
        assert!(!keep.expired(day("2026-10-02"), at("2026-10-31T23:59:59Z")));
        assert_eq!(
            keep.first_kept_day(at("2026-10-31T00:00:00Z")),
            Some(day("2026-10-01"))
        );
        assert_eq!(
            keep.first_kept_day(at("2026-10-31T12:00:00Z")),
            Some(day("2026-10-02"))
        );
        assert_eq!(
            Retention::Forever.first_kept_day(at("2026-10-31T12:00:00Z")),
            None
        );
        assert!(!Retention::Forever.expired(day("2000-01-01"), at("2026-10-31T12:00:00Z")));
    }

    #[test]
    fn a_ttl_counts_from_the_day_not_from_the_write() {
        let keep = Retention::parse("30days").expect("parses");
        // Written at noon the next day: half a day less than the retention.
        assert_eq!(
            keep.ttl_seconds(day("2026-10-01"), at("2026-10-02T12:00:00Z")),
            Some(30 * 86_400 - 36 * 3600)
        );
        // Past it: the smallest TTL Cassandra takes, never 0 (which would mean forever).
        assert_eq!(
            keep.ttl_seconds(day("2026-10-01"), at("2026-12-01T00:00:00Z")),
            Some(1)
        );
        assert_eq!(
            Retention::Forever.ttl_seconds(day("2026-10-01"), at("2026-10-02T00:00:00Z")),
            None
        );
    }
}

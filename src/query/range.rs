//! A query's date range: inclusive calendar days in an IANA time zone, and the UTC instants
//! and UTC days (partitions) they cover.

use crate::domain::time::Day;
use chrono::{DateTime, Duration, NaiveDate, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;

/// The longest range a query may ask for.
pub(crate) const MAX_DAYS: i64 = 366;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryRange {
    from: NaiveDate,
    to: NaiveDate,
    tz: Tz,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
}

/// Why a range is not acceptable; each names the parameter at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    #[error("from is after to")]
    Reversed,
    #[error("the range covers {0} days; at most {MAX_DAYS} are allowed")]
    TooLong(i64),
}

impl QueryRange {
    pub fn new(from: NaiveDate, to: NaiveDate, tz: Tz) -> Result<Self, RangeError> {
        if from > to {
            return Err(RangeError::Reversed);
        }
        let days = (to - from).num_days() + 1;
        if days > MAX_DAYS {
            return Err(RangeError::TooLong(days));
        }
        Ok(Self {
            from,
            to,
            tz,
            start: local_midnight(tz, from),
            end: local_midnight(tz, to + Duration::days(1)),
        })
    }

    pub(crate) fn from(&self) -> NaiveDate {
        self.from
    }

    pub(crate) fn to(&self) -> NaiveDate {
        self.to
    }

    pub(crate) fn tz(&self) -> Tz {
        self.tz
    }

    /// The first instant of the range.
    pub(crate) fn start(&self) -> DateTime<Utc> {
        self.start
    }

    /// The first instant after the range.
    pub(crate) fn end(&self) -> DateTime<Utc> {
        self.end
    }

    /// Whether `instant` falls inside the range's local days.
    pub(crate) fn contains(&self, instant: DateTime<Utc>) -> bool {
        self.start <= instant && instant < self.end
    }

    /// The local calendar day of `instant`.
    pub(crate) fn local_day(&self, instant: DateTime<Utc>) -> NaiveDate {
        instant.with_timezone(&self.tz).date_naive()
    }

    /// Every local day of the range, oldest first.
    pub(crate) fn local_days(&self) -> impl Iterator<Item = NaiveDate> {
        let to = self.to;
        self.from.iter_days().take_while(move |day| *day <= to)
    }

    /// The UTC days (storage partitions) that hold the range's events.
    pub(crate) fn utc_days(&self) -> impl Iterator<Item = Day> {
        let first = Day::new(self.start.date_naive());
        let last = Day::new((self.end - Duration::milliseconds(1)).date_naive());
        first.through(last)
    }
}

/// The first instant of `date` in `tz`. Where midnight does not exist (a DST gap at
/// midnight), the day starts at the first local time after the gap.
fn local_midnight(tz: Tz, date: NaiveDate) -> DateTime<Utc> {
    let mut time = date.and_time(NaiveTime::MIN);
    for _ in 0..=24 * 4 {
        if let Some(instant) = tz.from_local_datetime(&time).earliest() {
            return instant.with_timezone(&Utc);
        }
        time += Duration::minutes(15);
    }
    // No zone has a day-long gap; fall back to UTC midnight rather than fail.
    date.and_time(NaiveTime::MIN).and_utc()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn date(text: &str) -> NaiveDate {
        text.parse().expect("valid date")
    }

    #[test]
    fn a_kolkata_day_spans_two_utc_days() {
        let range = QueryRange::new(
            date("2026-11-02"),
            date("2026-11-02"),
            chrono_tz::Asia::Kolkata,
        )
        .expect("valid");
        let days: Vec<String> = range.utc_days().map(|day| day.to_string()).collect();
        assert_eq!(days, ["2026-11-01", "2026-11-02"]);
        let late_utc = "2026-11-01T23:30:00Z"
            .parse::<DateTime<Utc>>()
            .expect("valid");
        assert!(range.contains(late_utc));
        assert_eq!(range.local_day(late_utc), date("2026-11-02"));
    }

    #[test]
    fn a_utc_range_reads_exactly_its_days() {
        let range =
            QueryRange::new(date("2026-11-01"), date("2026-11-30"), Tz::UTC).expect("valid");
        assert_eq!(range.utc_days().count(), 30);
        assert_eq!(range.local_days().count(), 30);
    }

    #[test]
    fn reversed_and_overlong_ranges_are_refused() {
        assert_eq!(
            QueryRange::new(date("2026-11-02"), date("2026-11-01"), Tz::UTC),
            Err(RangeError::Reversed)
        );
        assert_eq!(
            QueryRange::new(date("2025-01-01"), date("2026-01-02"), Tz::UTC),
            Err(RangeError::TooLong(367))
        );
        assert!(QueryRange::new(date("2024-01-01"), date("2024-12-31"), Tz::UTC).is_ok());
    }

    #[test]
    fn a_day_whose_midnight_does_not_exist_starts_after_the_gap() {
        // Santiago moved clocks from 00:00 to 01:00 on 2022-09-11.
        let range = QueryRange::new(
            date("2022-09-11"),
            date("2022-09-11"),
            chrono_tz::America::Santiago,
        )
        .expect("valid");
        let inside = "2022-09-11T04:00:00Z"
            .parse::<DateTime<Utc>>()
            .expect("valid");
        assert!(range.contains(inside));
    }
}

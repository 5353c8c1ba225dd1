//! Delivery against caps: billable impressions per 15-minute slice of a UTC day (the unit live
//! counters and sealed totals are kept in), and the rule that turns them into a campaign's
//! today, lifetime, pace and stop in the campaign's own zone. Nothing here reads a store or a
//! clock: callers pass the counts and `now`.

use super::time::{Day, SLICE_MILLIS};
use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use chrono_tz::Tz;

/// Slices in a UTC day.
pub(crate) const SLICES_PER_DAY: usize = 96;

/// Billable impressions of one UTC day, per 15-minute slice. Every zone's offset is a multiple
/// of 15 minutes, so any local day is a whole number of slices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaySlices([u64; SLICES_PER_DAY]);

impl Default for DaySlices {
    fn default() -> Self {
        Self([0; SLICES_PER_DAY])
    }
}

impl DaySlices {
    /// The slice of `day` holding epoch milliseconds `at` (clamped into the day).
    pub(crate) fn slice_of(day: Day, at_millis: i64) -> usize {
        let offset = at_millis.div_euclid(SLICE_MILLIS) - day.first_slice();
        offset.clamp(0, SLICES_PER_DAY as i64 - 1) as usize
    }

    pub(crate) fn add(&mut self, slice: usize, count: u64) {
        if let Some(cell) = self.0.get_mut(slice) {
            *cell += count;
        }
    }

    /// Moves one count from slice `from` to slice `to` (an earlier impression of a window
    /// already counted arrived).
    pub(crate) fn move_one(&mut self, from: usize, to: usize) {
        if let Some(cell) = self.0.get_mut(from) {
            *cell = cell.saturating_sub(1);
        }
        self.add(to, 1);
    }

    /// Takes one count from `slice` (a window another process counts).
    pub(crate) fn remove_one(&mut self, slice: usize) {
        if let Some(cell) = self.0.get_mut(slice) {
            *cell = cell.saturating_sub(1);
        }
    }

    /// The counts of the slices before `slice` (the rest zero).
    pub(crate) fn before(&self, slice: usize) -> DaySlices {
        let mut kept = self.clone();
        for cell in kept.0.iter_mut().skip(slice) {
            *cell = 0;
        }
        kept
    }

    #[cfg(test)]
    pub(crate) fn get(&self, slice: usize) -> u64 {
        self.0.get(slice).copied().unwrap_or(0)
    }

    pub(crate) fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// The billable impressions of `day` whose slice starts in `[start, end)`.
    pub(crate) fn between(&self, day: Day, start: DateTime<Utc>, end: DateTime<Utc>) -> u64 {
        let first = day.first_slice();
        (0..SLICES_PER_DAY)
            .filter(|slice| {
                let at = (first + *slice as i64) * SLICE_MILLIS;
                at >= start.timestamp_millis() && at < end.timestamp_millis()
            })
            .map(|slice| self.0[slice])
            .sum()
    }

    pub(crate) fn merge(&mut self, other: &DaySlices) {
        for (mine, theirs) in self.0.iter_mut().zip(other.0.iter()) {
            *mine += theirs;
        }
    }

    /// `self - other` per slice, never below 0.
    pub(crate) fn saturating_sub(&self, other: &DaySlices) -> DaySlices {
        let mut out = self.clone();
        for (mine, theirs) in out.0.iter_mut().zip(other.0.iter()) {
            *mine = mine.saturating_sub(*theirs);
        }
        out
    }

    /// Sparse: (slice, count) pairs of the non-zero slices, 1 + 8 bytes each.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        for (slice, count) in self.0.iter().enumerate().filter(|(_, count)| **count > 0) {
            bytes.push(slice as u8);
            bytes.extend_from_slice(&count.to_be_bytes());
        }
        bytes
    }

    pub(crate) fn from_bytes(bytes: &[u8]) -> Option<Self> {
        if !bytes.len().is_multiple_of(9) {
            return None;
        }
        let mut slices = Self::default();
        for pair in bytes.chunks_exact(9) {
            let slice = usize::from(pair[0]);
            if slice >= SLICES_PER_DAY {
                return None;
            }
            slices.0[slice] = u64::from_be_bytes(pair[1..9].try_into().ok()?);
        }
        Some(slices)
    }
}

/// A campaign's caps and the zone of its day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Caps {
    pub(crate) daily_cap: Option<u64>,
    pub(crate) total_cap: Option<u64>,
    pub(crate) tz: Tz,
}

/// What a campaign delivered, against its caps, at `as_of`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeliveryFigures {
    /// The campaign's current local day.
    pub(crate) today: NaiveDate,
    pub(crate) today_billable: u64,
    pub(crate) lifetime_billable: u64,
    pub(crate) daily_remaining: Option<u64>,
    pub(crate) total_remaining: Option<u64>,
    /// Today's billable ÷ (daily cap × the fraction of the local day elapsed).
    pub(crate) pace: Option<f64>,
    /// Either cap reached.
    pub(crate) stop: bool,
}

/// The local day holding `now` in `tz`, and its start and end as instants (a day of 23 or 25
/// hours across a DST change).
pub(crate) fn local_day(tz: Tz, now: DateTime<Utc>) -> (NaiveDate, DateTime<Utc>, DateTime<Utc>) {
    let today = now.with_timezone(&tz).date_naive();
    let start = local_midnight(tz, today);
    let end = today
        .succ_opt()
        .map_or(start + chrono::TimeDelta::days(1), |next| {
            local_midnight(tz, next)
        });
    (today, start, end)
}

/// The first instant of `date` in `tz` (a day that starts in a DST gap starts at its first
/// existing instant).
fn local_midnight(tz: Tz, date: NaiveDate) -> DateTime<Utc> {
    let midnight = date.and_hms_opt(0, 0, 0).unwrap_or_default();
    (0..=24)
        .find_map(|quarter| {
            let at = midnight + chrono::TimeDelta::minutes(15 * quarter);
            tz.from_local_datetime(&at).earliest()
        })
        .map_or_else(|| midnight.and_utc(), |at| at.with_timezone(&Utc))
}

/// The UTC days a local day from `start` to `end` overlaps (one or two).
pub(crate) fn utc_days_between(start: DateTime<Utc>, end: DateTime<Utc>) -> Vec<Day> {
    let first = Day::new(start.date_naive());
    let last = Day::new((end - chrono::TimeDelta::milliseconds(1)).date_naive());
    first.through(last).collect()
}

/// Today's and the lifetime's billable impressions from per-day counts (each day once, sealed
/// or live) and `earlier`, the sum of days too old to overlap today, against `caps`, at `now`.
pub(crate) fn figures<'a>(
    caps: Caps,
    now: DateTime<Utc>,
    earlier: u64,
    days: impl IntoIterator<Item = (Day, &'a DaySlices)>,
) -> DeliveryFigures {
    let (today, start, end) = local_day(caps.tz, now);
    let mut today_billable = 0;
    let mut lifetime_billable = earlier;
    for (day, slices) in days {
        lifetime_billable += slices.total();
        if day.next().start_utc() > start && day.start_utc() < end {
            today_billable += slices.between(day, start, end);
        }
    }
    let elapsed = (now - start).num_milliseconds().max(0) as f64;
    let length = (end - start).num_milliseconds().max(1) as f64;
    let pace = caps.daily_cap.map(|cap| {
        let expected = cap as f64 * (elapsed / length);
        if expected > 0.0 {
            today_billable as f64 / expected
        } else {
            0.0
        }
    });
    let daily_remaining = caps.daily_cap.map(|cap| cap.saturating_sub(today_billable));
    let total_remaining = caps
        .total_cap
        .map(|cap| cap.saturating_sub(lifetime_billable));
    DeliveryFigures {
        today,
        today_billable,
        lifetime_billable,
        daily_remaining,
        total_remaining,
        pace,
        stop: daily_remaining == Some(0) || total_remaining == Some(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().expect("time")
    }

    fn day(text: &str) -> Day {
        Day::new(text.parse().expect("date"))
    }

    fn counted(day: Day, entries: &[(&str, u64)]) -> DaySlices {
        let mut slices = DaySlices::default();
        for (instant, count) in entries {
            slices.add(
                DaySlices::slice_of(day, at(instant).timestamp_millis()),
                *count,
            );
        }
        slices
    }

    #[test]
    fn slices_round_trip_through_their_sparse_bytes() {
        let d = day("2026-11-26");
        let slices = counted(
            d,
            &[("2026-11-26T00:00:00Z", 3), ("2026-11-26T23:59:59Z", 7)],
        );
        assert_eq!(slices.to_bytes().len(), 18);
        assert_eq!(DaySlices::from_bytes(&slices.to_bytes()), Some(slices));
        assert_eq!(DaySlices::from_bytes(&[96, 0, 0, 0, 0, 0, 0, 0, 1]), None);
        assert_eq!(DaySlices::from_bytes(&[1, 2]), None);
    }

    #[test]
    fn today_is_the_campaign_zones_day_and_the_lifetime_every_day() {
        // Kiritimati is UTC+14: its 2026-11-27 runs from 2026-11-26T10:00Z to 2026-11-27T10:00Z.
        let caps = Caps {
            daily_cap: Some(100),
            total_cap: Some(1000),
            tz: chrono_tz::Pacific::Kiritimati,
        };
        let (d25, d26, d27) = (day("2026-11-25"), day("2026-11-26"), day("2026-11-27"));
        let a = counted(d25, &[("2026-11-25T12:00:00Z", 400)]);
        let b = counted(
            d26,
            &[("2026-11-26T09:45:00Z", 5), ("2026-11-26T10:00:00Z", 20)],
        );
        let c = counted(d27, &[("2026-11-27T01:00:00Z", 10)]);
        let now = at("2026-11-27T04:00:00Z");
        let out = figures(caps, now, 0, [(d25, &a), (d26, &b), (d27, &c)]);
        assert_eq!(out.today, "2026-11-27".parse::<NaiveDate>().expect("date"));
        assert_eq!(out.today_billable, 30);
        assert_eq!(out.lifetime_billable, 435);
        assert_eq!(out.daily_remaining, Some(70));
        assert_eq!(out.total_remaining, Some(565));
        // 18 of 24 hours elapsed: 30 ÷ (100 × 0.75).
        assert!((out.pace.expect("a cap") - 0.4).abs() < 1e-9);
        assert!(!out.stop);
    }

    #[test]
    fn either_cap_reached_stops_and_remaining_never_goes_below_zero() {
        let d = day("2026-11-26");
        let slices = counted(d, &[("2026-11-26T01:00:00Z", 1200)]);
        let now = at("2026-11-26T12:00:00Z");
        let daily = Caps {
            daily_cap: Some(1000),
            total_cap: None,
            tz: Tz::UTC,
        };
        let out = figures(daily, now, 0, [(d, &slices)]);
        assert_eq!((out.daily_remaining, out.stop), (Some(0), true));
        let yesterday = figures(daily, at("2026-11-27T00:00:01Z"), 0, [(d, &slices)]);
        assert_eq!((yesterday.today_billable, yesterday.stop), (0, false));
        let total = Caps {
            daily_cap: None,
            total_cap: Some(1200),
            tz: Tz::UTC,
        };
        let later = figures(total, at("2026-11-27T00:00:01Z"), 0, [(d, &slices)]);
        assert_eq!(
            (later.total_remaining, later.stop, later.pace),
            (Some(0), true, None)
        );
    }

    #[test]
    fn a_dst_day_has_its_own_length() {
        // Europe/Berlin's 2026-10-25 lasts 25 hours.
        let (_, start, end) = local_day(chrono_tz::Europe::Berlin, at("2026-10-25T12:00:00Z"));
        assert_eq!((end - start).num_hours(), 25);
        assert_eq!(utc_days_between(start, end).len(), 2);
    }
}

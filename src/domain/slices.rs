//! The 15-minute slices of days not yet sealed (docs/DESIGN.md, "Open days from closed
//! slices"): when a slice closes, which slices a write must mark, and the span of time a
//! raw read covers. Nothing here touches a store or a clock: callers pass `now`.

use super::sealing::SealState;
use super::time::{Day, SLICE_MILLIS};
use chrono::{DateTime, TimeDelta, Utc};
use std::time::Duration;

/// A 15-minute slice, numbered since the epoch as rollups number them.
pub(crate) type Slice = i64;

/// The slice holding `at`.
pub(crate) fn slice_of(at: DateTime<Utc>) -> Slice {
    at.timestamp_millis().div_euclid(SLICE_MILLIS)
}

/// When `slice` starts.
pub(crate) fn slice_start(slice: Slice) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(slice.saturating_mul(SLICE_MILLIS))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// A 2-second piece of a slice, numbered since the epoch: the grain at which a summary keeps
/// what it read raw of an open stretch (`query::stretch_cache`).
pub(crate) type Piece = i64;

/// How long a piece lasts; a slice holds a whole number of them.
pub(crate) const PIECE_MILLIS: i64 = 2_000;

/// The piece holding `at`.
pub(crate) fn piece_of(at: DateTime<Utc>) -> Piece {
    at.timestamp_millis().div_euclid(PIECE_MILLIS)
}

/// The slice a piece lies in.
pub(crate) fn slice_of_piece(piece: Piece) -> Slice {
    piece.div_euclid(SLICE_MILLIS / PIECE_MILLIS)
}

/// On a store other processes write, how long after a piece's end a write reaching back to
/// it marks its slice although the slice is still open: a summary keeps what it read raw of
/// a piece only once this has passed (with the seals' margin), so every write it did not see
/// leaves a mark it reads with the next slice states (docs/DESIGN.md, "Open days from closed
/// slices"). Ten seconds: an ad server's batch of events just served reaches the store well
/// within it and marks nothing.
pub(crate) const PIECE_SETTLE: TimeDelta = TimeDelta::seconds(10);

/// How finely a stretch's counts are kept apart: by slice (what is stored), or by piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grain {
    Slice,
    Piece,
}

impl Grain {
    /// The slice or piece holding `at`.
    pub(crate) fn of(self, at: DateTime<Utc>) -> i64 {
        match self {
            Self::Slice => slice_of(at),
            Self::Piece => piece_of(at),
        }
    }
}

/// When a slice closes for late events, and so which slices may answer from their aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SliceRule {
    grace: TimeDelta,
    /// Whether writes mark the open slices of settled pieces too ([`PIECE_SETTLE`]): on a
    /// store other processes write, where summaries learn of writes from marks alone.
    marks_settled_pieces: bool,
}

impl Default for SliceRule {
    /// Two minutes: an ad server's retries of a failed request fit well inside it, and the
    /// stretch a summary reads raw stays at most 17 minutes long.
    fn default() -> Self {
        Self {
            grace: TimeDelta::minutes(2),
            marks_settled_pieces: false,
        }
    }
}

impl SliceRule {
    /// A rule with `grace`; one beyond what a date-time can hold is taken as two minutes.
    pub fn new(grace: Duration) -> Self {
        Self {
            grace: TimeDelta::from_std(grace).unwrap_or(TimeDelta::minutes(2)),
            marks_settled_pieces: false,
        }
    }

    /// The rule for writes to a store other processes write: a write reaching back to a
    /// settled piece marks its slice, open or closed.
    pub(crate) fn marking_settled_pieces(self) -> Self {
        Self {
            marks_settled_pieces: true,
            ..self
        }
    }

    /// Whether a write that changes counts from `at` on, done `now`, marks the slice of `at`:
    /// when the slice is closed, or (by [`Self::marking_settled_pieces`]) when the piece of
    /// `at` ended [`PIECE_SETTLE`] ago or more.
    pub(crate) fn marks(&self, at: DateTime<Utc>, now: DateTime<Utc>) -> bool {
        self.is_late(slice_of(at), now)
            || self.marks_settled_pieces && Span::of_piece(piece_of(at)).to + PIECE_SETTLE <= now
    }

    /// Whether an event in `slice` arriving `now` is late: the slice may be aggregated
    /// already, so the event marks it.
    pub(crate) fn is_late(&self, slice: Slice, now: DateTime<Utc>) -> bool {
        now >= slice_start(slice + 1) + self.grace
    }

    /// Whether `slice` may be aggregated `now`: past its grace, with the seals' margin for
    /// clock differences between servers.
    pub(crate) fn may_aggregate(&self, slice: Slice, now: DateTime<Utc>) -> bool {
        now >= slice_start(slice + 1) + self.grace + SealState::MARGIN
    }

    /// The slices a write of an event at `at` must mark when it arrives `now`: its own slice
    /// if [`Self::marks`] says so, and the next one too when the event's billable window (`window`
    /// long, aligned at the epoch) reaches past the slice's end, since that slice counts the
    /// window only if no impression of it came before.
    pub(crate) fn late_slices(
        &self,
        at: DateTime<Utc>,
        window: TimeDelta,
        now: DateTime<Utc>,
    ) -> Vec<Slice> {
        if !self.marks(at, now) {
            return Vec::new();
        }
        touched_slices(at, window)
    }
}

/// The slice of an event at `at` and, when its billable window (`window` long, aligned at the
/// epoch) reaches past that slice's end, the next one: the slices whose counts an event can
/// change.
pub(crate) fn touched_slices(at: DateTime<Utc>, window: TimeDelta) -> Vec<Slice> {
    let slice = slice_of(at);
    let window_millis = window.num_milliseconds().max(1);
    let window_end = (at.timestamp_millis().div_euclid(window_millis) + 1) * window_millis;
    if window_end > (slice + 1) * SLICE_MILLIS {
        vec![slice, slice + 1]
    } else {
        vec![slice]
    }
}

/// The slices of UTC `day`, oldest first.
pub(crate) fn slices_of_day(day: Day) -> std::ops::Range<Slice> {
    let first = day.first_slice();
    first..first + 96
}

/// A stretch of time read raw: from `from` (included) to `to` (excluded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub(crate) from: DateTime<Utc>,
    pub(crate) to: DateTime<Utc>,
}

impl Span {
    /// Piece `piece` whole.
    pub(crate) fn of_piece(piece: Piece) -> Self {
        let start = |piece: Piece| {
            DateTime::from_timestamp_millis(piece.saturating_mul(PIECE_MILLIS))
                .unwrap_or(DateTime::<Utc>::MAX_UTC)
        };
        Self {
            from: start(piece),
            to: start(piece + 1),
        }
    }

    /// UTC `day` whole.
    pub(crate) fn of_day(day: Day) -> Self {
        let slices = slices_of_day(day);
        Self::of_slices(slices.start, slices.end - 1)
    }

    /// Slices `first` to `last`, both included.
    pub(crate) fn of_slices(first: Slice, last: Slice) -> Self {
        Self {
            from: slice_start(first),
            to: slice_start(last + 1),
        }
    }

    pub(crate) fn contains(&self, at: DateTime<Utc>) -> bool {
        self.from <= at && at < self.to
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().expect("time")
    }

    #[test]
    fn a_slice_is_late_after_its_grace_and_aggregated_after_the_margin() {
        let rule = SliceRule::default();
        let slice = slice_of(at("2026-11-28T10:05:00Z"));
        assert_eq!(slice_start(slice), at("2026-11-28T10:00:00Z"));
        assert!(!rule.is_late(slice, at("2026-11-28T10:16:59Z")));
        assert!(rule.is_late(slice, at("2026-11-28T10:17:00Z")));
        assert!(!rule.may_aggregate(slice, at("2026-11-28T10:17:04Z")));
        assert!(rule.may_aggregate(slice, at("2026-11-28T10:17:05Z")));
    }

    #[test]
    fn writes_to_a_shared_store_mark_the_open_slices_of_settled_pieces() {
        let now = at("2026-11-28T10:05:00Z");
        let shared = SliceRule::default().marking_settled_pieces();
        // The piece 10:04:48–10:04:50 ended ten seconds ago; the next one has not settled.
        assert!(shared.marks(at("2026-11-28T10:04:49Z"), now));
        assert!(!shared.marks(at("2026-11-28T10:04:50Z"), now));
        assert!(!SliceRule::default().marks(at("2026-11-28T10:04:49Z"), now));
        // A closed slice is marked by either rule.
        assert!(SliceRule::default().marks(at("2026-11-28T09:40:00Z"), now));
        assert_eq!(
            shared.late_slices(at("2026-11-28T10:04:49Z"), TimeDelta::seconds(40), now),
            [slice_of(now)]
        );
    }

    #[test]
    fn a_late_event_whose_window_crosses_the_slice_end_marks_the_next_slice_too() {
        let rule = SliceRule::default();
        let now = at("2026-11-28T12:00:00Z");
        let window = TimeDelta::seconds(40);
        let slice = slice_of(at("2026-11-28T10:00:00Z"));
        // 10:14:40 opens a window that ends at 10:15:20: past the slice's end.
        assert_eq!(
            rule.late_slices(at("2026-11-28T10:14:50Z"), window, now),
            [slice, slice + 1]
        );
        // 10:14:00 opens one that ends at 10:14:40.
        assert_eq!(
            rule.late_slices(at("2026-11-28T10:14:10Z"), window, now),
            [slice]
        );
        assert!(
            rule.late_slices(at("2026-11-28T11:55:00Z"), window, now)
                .is_empty()
        );
    }

    #[test]
    fn pieces_divide_slices() {
        let at = at("2026-11-28T10:14:59.999Z");
        let piece = piece_of(at);
        assert_eq!(slice_of_piece(piece), slice_of(at));
        assert_eq!(slice_of_piece(piece + 1), slice_of(at) + 1);
        let span = Span::of_piece(piece);
        assert!(span.contains(at));
        assert_eq!((span.to - span.from).num_milliseconds(), PIECE_MILLIS);
        assert_eq!(Grain::Slice.of(at), slice_of(at));
        assert_eq!(Grain::Piece.of(at), piece);
    }

    #[test]
    fn a_day_has_96_slices() {
        let day = Day::new("2026-11-28".parse().expect("date"));
        let slices = slices_of_day(day);
        assert_eq!(slices.end - slices.start, 96);
        assert_eq!(slice_start(slices.start), day.start_utc());
        assert_eq!(slice_start(slices.end), day.next().start_utc());
    }
}

//! What dashboards and ad servers read: summaries, reports, exports, uniques, listings,
//! conversions, delivery and freshness.

pub(super) mod conversions;
pub(super) mod delivery;
pub(super) mod export;
pub(super) mod listings;
pub(super) mod report;
pub(super) mod summary;
pub(super) mod uniques;

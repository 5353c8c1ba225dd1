//! Personal data (docs/DESIGN.md, "Personal data"): finding one subject's stored events
//! through the event index, erasing them as a durable job, answering a subject access, and
//! dropping an erased subject's re-sent old events at ingest.

pub(crate) mod access;
pub(crate) mod backfill;
pub(crate) mod erasure;
pub(crate) mod finder;

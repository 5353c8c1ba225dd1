//! The domain: events, their identities and times, campaigns and how their events are spread
//! over partitions. Values here are valid by construction; raw input becomes them at the
//! HTTP edge, so inner code never holds an invalid event.

pub mod access;
pub mod address;
pub mod beacon;
pub mod bucket;
pub mod campaign;
pub mod conversion;
pub(crate) mod delivery;
pub(crate) mod echo;
pub mod event;
pub mod ids;
pub mod owner;
pub mod partition;
pub mod privacy;
pub(crate) mod process;
pub mod retention;
pub(crate) mod sealing;
pub(crate) mod sketch;
pub mod slices;
pub(crate) mod tag;
pub mod time;
pub(crate) mod traffic;
pub mod user_data;
pub mod view;

//! The domain: events, their identities and times, campaigns and how their events are spread
//! over partitions. Values here are valid by construction; raw input becomes them at the
//! HTTP edge, so inner code never holds an invalid event.

pub mod access;
pub mod beacon;
pub mod bucket;
pub mod campaign;
pub mod delivery;
pub mod echo;
pub mod event;
pub mod ids;
pub mod owner;
pub mod partition;
pub mod process;
pub mod sealing;
pub mod sketch;
pub mod tag;
pub mod time;
pub mod traffic;
pub mod user_data;

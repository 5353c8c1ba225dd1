//! `adevents simulate`: mock traffic for a site ([`traffic`]), sent to a running server like
//! script tags send it ([`send`]), then the server's unique-visitor counts set beside the exact
//! ones ([`report`]).

pub(crate) mod report;
pub(crate) mod send;
pub mod traffic;

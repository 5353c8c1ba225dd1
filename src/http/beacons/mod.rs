//! Beacons from customers' pages: `/track` and the parsing of its parameters.

pub(super) mod beacon_params;
pub(super) mod track;

//! Conversions and their attribution (docs/DESIGN.md, "Conversions"): storing them as they
//! arrive ([`intake`]) and the one decision per conversion ([`decider`]), from the event
//! index (`crate::event_index`).

pub(crate) mod decider;
pub(crate) mod intake;

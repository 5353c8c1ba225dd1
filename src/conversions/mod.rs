//! Conversions and their attribution (docs/DESIGN.md, "Conversions"): storing them as they
//! arrive ([`intake`]) and the one decision per conversion ([`decider`]), from the event
//! index (`crate::event_index`), the due lists of a day read in [`turns`].

pub(crate) mod decider;
pub(crate) mod intake;
mod turns;

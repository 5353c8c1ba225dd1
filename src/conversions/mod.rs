//! Conversions and their attribution (docs/DESIGN.md, "Conversions"): storing them as they
//! arrive ([`intake`]), the event index attribution reads ([`indexer`], written off the
//! request path), and the one decision per conversion ([`decider`]).

pub(crate) mod decider;
pub(crate) mod indexer;
pub(crate) mod intake;
pub(crate) mod reindex;

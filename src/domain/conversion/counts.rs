//! The conversion measures of a summary row or report row: conversions credited to the
//! campaign (at the conversion's own time and the credited ad), by kind, and their values
//! summed exactly per currency.

use super::money::ValueSums;
use super::{AttributionKind, DecidedConversion};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConversionCounts {
    pub conversions: u64,
    pub post_click: u64,
    pub post_view: u64,
    pub value: ValueSums,
}

impl ConversionCounts {
    /// Counts one decided conversion (an unattributed one counts only as a conversion).
    pub fn count(&mut self, decided: &DecidedConversion) {
        self.conversions += 1;
        match decided.attribution.map(|attribution| attribution.kind) {
            Some(AttributionKind::PostClick) => self.post_click += 1,
            Some(AttributionKind::PostView) => self.post_view += 1,
            None => {}
        }
        if let Some(money) = decided.conversion.value {
            self.value.add_money(money);
        }
    }

    pub fn add(&mut self, other: &ConversionCounts) {
        self.conversions += other.conversions;
        self.post_click += other.post_click;
        self.post_view += other.post_view;
        self.value.add(&other.value);
    }

    /// Post-click conversions per click; 0 without clicks. A row's may exceed 1: conversions
    /// count at their own time, clicks at theirs.
    pub fn rate(&self, clicks: u64) -> f64 {
        if clicks == 0 {
            0.0
        } else {
            self.post_click as f64 / clicks as f64
        }
    }
}

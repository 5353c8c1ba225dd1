//! The additive view measures of any set of valid impressions, and the rates and means an
//! answer derives from them.

use super::join::ImpressionViews;

/// The additive view measures of any set of valid impressions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ViewCounts {
    pub(crate) measurable: u64,
    pub(crate) viewable: u64,
    pub(crate) engaged: u64,
    /// The sum of `in_view_ms` over the viewable impressions that have one, and their number:
    /// the mean is exact from any sum of parts.
    pub(crate) in_view_ms_total: u64,
    pub(crate) in_view_measured: u64,
}

impl ViewCounts {
    pub(crate) fn add(&mut self, other: &Self) {
        self.measurable += other.measurable;
        self.viewable += other.viewable;
        self.engaged += other.engaged;
        self.in_view_ms_total += other.in_view_ms_total;
        self.in_view_measured += other.in_view_measured;
    }

    /// Counts one valid impression's measures.
    pub(crate) fn count(&mut self, views: &ImpressionViews) {
        self.measurable += u64::from(views.measurable());
        self.engaged += u64::from(views.engaged());
        if views.viewable() {
            self.viewable += 1;
            if let Some(ms) = views.in_view_ms {
                self.in_view_ms_total += u64::from(ms);
                self.in_view_measured += 1;
            }
        }
    }

    /// Viewable ÷ measurable; `None` when nothing was measured.
    pub(crate) fn viewable_rate(&self) -> Option<f64> {
        (self.measurable > 0).then(|| self.viewable as f64 / self.measurable as f64)
    }

    /// The mean in-view time of the viewable impressions that reported one, rounded half up.
    pub(crate) fn avg_in_view_ms(&self) -> Option<u64> {
        (self.in_view_measured > 0)
            .then(|| (self.in_view_ms_total + self.in_view_measured / 2) / self.in_view_measured)
    }

    /// The five numbers in their stored order.
    pub(crate) fn to_array(self) -> [u64; 5] {
        [
            self.measurable,
            self.viewable,
            self.engaged,
            self.in_view_ms_total,
            self.in_view_measured,
        ]
    }

    pub(crate) fn from_array([measurable, viewable, engaged, total, measured]: [u64; 5]) -> Self {
        Self {
            measurable,
            viewable,
            engaged,
            in_view_ms_total: total,
            in_view_measured: measured,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::view::{ViewKind, ViewKinds};

    #[test]
    fn means_round_half_up_and_rates_need_a_measured_impression() {
        let mut counts = ViewCounts::default();
        assert_eq!(counts.viewable_rate(), None);
        assert_eq!(counts.avg_in_view_ms(), None);
        for ms in [1000, 1001] {
            counts.count(&ImpressionViews {
                kinds: ViewKinds::default().with(ViewKind::Viewable),
                in_view_ms: Some(ms),
            });
        }
        counts.count(&ImpressionViews {
            kinds: ViewKinds::default().with(ViewKind::Measurable),
            in_view_ms: None,
        });
        assert_eq!(counts.avg_in_view_ms(), Some(1001));
        assert_eq!(counts.viewable_rate(), Some(2.0 / 3.0));
        assert_eq!(ViewCounts::from_array(counts.to_array()), counts);
    }
}

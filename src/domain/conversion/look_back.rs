//! A campaign's attribution look-backs: how long before a conversion a click (`click_window`)
//! or an impression (`view_window`) may have happened and still be credited with it. Written
//! as `"30d"`, `"12h"`, `"90m"` or `"45s"`, and answered in the largest whole unit.

use chrono::TimeDelta;
use std::fmt;

/// A look-back of whole seconds; zero turns its kind of attribution off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LookBack(u32);

const UNITS: [(char, u32); 4] = [('d', 86_400), ('h', 3_600), ('m', 60), ('s', 1)];

impl LookBack {
    /// Post-click default: 30 days.
    pub const CLICK_DEFAULT: Self = Self(30 * 86_400);
    /// Post-view default: one day.
    pub const VIEW_DEFAULT: Self = Self(86_400);
    /// The longest post-click look-back: 90 days.
    pub const CLICK_MAX: Self = Self(90 * 86_400);
    /// The longest post-view look-back: 30 days.
    pub const VIEW_MAX: Self = Self(30 * 86_400);

    /// Reads `"30d"` and the like, at most `max`.
    pub fn parse(text: &str, max: LookBack) -> Result<Self, String> {
        let unit = text.chars().last().unwrap_or(' ');
        let number = text.strip_suffix(unit).unwrap_or("");
        let Some((_, seconds)) = UNITS.iter().find(|(name, _)| *name == unit) else {
            return Err(format!(
                "must be a whole number and a unit, d, h, m or s (e.g. \"30d\"), at most {max}"
            ));
        };
        if number.is_empty() || number.len() > 7 || !number.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!(
                "must be a whole number and a unit, d, h, m or s (e.g. \"30d\"), at most {max}"
            ));
        }
        let count: u64 = number.parse().map_err(|_| format!("is over {max}"))?;
        let total = count.saturating_mul(u64::from(*seconds));
        if total > u64::from(max.0) {
            return Err(format!("is over the longest look-back, {max}"));
        }
        Ok(Self(total as u32))
    }

    pub const fn from_seconds(seconds: u32) -> Self {
        Self(seconds)
    }

    pub fn seconds(&self) -> u32 {
        self.0
    }

    pub fn is_off(&self) -> bool {
        self.0 == 0
    }

    /// Whether an event at `event` may be credited with a conversion at `conversion`: not
    /// after it, and at most this long before (both ends included, to the millisecond).
    pub fn covers(
        &self,
        event: chrono::DateTime<chrono::Utc>,
        conversion: chrono::DateTime<chrono::Utc>,
    ) -> bool {
        !self.is_off()
            && event <= conversion
            && conversion - event <= TimeDelta::seconds(i64::from(self.0))
    }
}

impl fmt::Display for LookBack {
    /// The largest unit that divides it whole (`"0s"` for zero).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (unit, seconds) = UNITS
            .iter()
            .find(|(_, seconds)| self.0.is_multiple_of(*seconds) && self.0 > 0)
            .copied()
            .unwrap_or(('s', 1));
        write!(f, "{}{unit}", self.0 / seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};

    #[test]
    fn look_backs_read_and_answer_in_the_largest_whole_unit() {
        let read = |text| LookBack::parse(text, LookBack::CLICK_MAX).map(|l| l.to_string());
        assert_eq!(read("30d").as_deref(), Ok("30d"));
        assert_eq!(read("48h").as_deref(), Ok("2d"));
        assert_eq!(read("90m").as_deref(), Ok("90m"));
        assert_eq!(read("3600s").as_deref(), Ok("1h"));
        assert_eq!(read("0s").as_deref(), Ok("0s"));
        assert_eq!(read("0d").as_deref(), Ok("0s"));
        assert_eq!(read("90d").as_deref(), Ok("90d"));
        for bad in [
            "91d",
            "30",
            "d",
            "-1d",
            "1.5d",
            "30D",
            "",
            "1w",
            "99999999999d",
        ] {
            assert!(read(bad).is_err(), "{bad:?}");
        }
        assert!(LookBack::parse("31d", LookBack::VIEW_MAX).is_err());
    }

    #[test]
    fn a_look_back_covers_its_edge_and_not_a_millisecond_past_nor_the_future() {
        let at = |text: &str| text.parse::<DateTime<Utc>>().expect("time");
        let day = LookBack::parse("1d", LookBack::VIEW_MAX).expect("valid");
        let conversion = at("2026-11-28T12:00:00Z");
        assert!(day.covers(at("2026-11-27T12:00:00Z"), conversion));
        assert!(!day.covers(at("2026-11-27T11:59:59.999Z"), conversion));
        assert!(day.covers(conversion, conversion));
        assert!(!day.covers(at("2026-11-28T12:00:00.001Z"), conversion));
        assert!(!LookBack::from_seconds(0).covers(conversion, conversion));
    }
}

//! What a view report says: its kinds, its in-view time and visible share, parsed strictly
//! from the body's fields.

/// What a report can say: measured, viewable, or one of the engagement kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewKind {
    Measurable,
    Viewable,
    Hover,
    Click,
    Expand,
    Play,
    Pause,
    Complete,
}

impl ViewKind {
    /// Every kind, in the order of its bit.
    const ALL: [Self; 8] = [
        Self::Measurable,
        Self::Viewable,
        Self::Hover,
        Self::Click,
        Self::Expand,
        Self::Play,
        Self::Pause,
        Self::Complete,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Measurable => "measurable",
            Self::Viewable => "viewable",
            Self::Hover => "hover",
            Self::Click => "click",
            Self::Expand => "expand",
            Self::Play => "play",
            Self::Pause => "pause",
            Self::Complete => "complete",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == text)
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A set of kinds, one bit each (the stored form).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ViewKinds(u8);

impl ViewKinds {
    /// The kinds that are engagement: every one but `measurable` and `viewable`.
    const ENGAGEMENT: u8 = !0b11;

    pub(crate) fn from_bits(bits: u8) -> Self {
        Self(bits)
    }

    pub(crate) fn bits(self) -> u8 {
        self.0
    }

    pub(crate) fn with(self, kind: ViewKind) -> Self {
        Self(self.0 | kind.bit())
    }

    pub(crate) fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    pub(crate) fn has(self, kind: ViewKind) -> bool {
        self.0 & kind.bit() != 0
    }

    /// A `viewable` report also says the impression was measured.
    pub(crate) fn measurable(self) -> bool {
        self.has(ViewKind::Measurable) || self.has(ViewKind::Viewable)
    }

    pub(crate) fn engaged(self) -> bool {
        self.0 & Self::ENGAGEMENT != 0
    }

    /// The engagement kinds, sorted by name (as exports list them).
    /// Every kind in the set, in the order of its bit.
    pub(crate) fn names(self) -> Vec<&'static str> {
        ViewKind::ALL
            .into_iter()
            .filter(|kind| self.has(*kind))
            .map(ViewKind::as_str)
            .collect()
    }

    pub(crate) fn engagements(self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = ViewKind::ALL
            .into_iter()
            .filter(|kind| kind.bit() & Self::ENGAGEMENT != 0 && self.has(*kind))
            .map(ViewKind::as_str)
            .collect();
        names.sort_unstable();
        names
    }
}

/// The longest in-view time a report may carry: the whole view window.
pub(crate) const MAX_IN_VIEW_MS: u32 = 600_000;

/// One problem with a report's body, naming its field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewReportError {
    pub(crate) field: String,
    pub(crate) message: String,
}

impl ViewReportError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// What one report says: its kinds, the longest continuous time in view so far and the
/// largest share of the ad seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ViewReport {
    pub(crate) kinds: ViewKinds,
    pub(crate) in_view_ms: Option<u32>,
    pub(crate) max_visible: Option<u8>,
}

impl ViewReport {
    /// A report from its body's fields (`e`, `in_view_ms`, `max_visible`). Every problem is
    /// named: an unknown field or kind, a repeated field, a number out of range, a missing
    /// `e` (which may be empty only beside `in_view_ms`).
    pub(crate) fn from_fields(fields: Vec<(String, String)>) -> Result<Self, Vec<ViewReportError>> {
        let mut errors = Vec::new();
        let (mut kinds, mut in_view, mut visible) = (None, None, None);
        for (name, value) in fields {
            let slot = match name.as_str() {
                "e" => &mut kinds,
                "in_view_ms" => &mut in_view,
                "max_visible" => &mut visible,
                _ => {
                    errors.push(ViewReportError::new(
                        crate::domain::echo::cut(&name, crate::domain::echo::MAX_ECHO_CHARS),
                        "is not a field of a view report (e, in_view_ms, max_visible)",
                    ));
                    continue;
                }
            };
            if slot.is_some() {
                errors.push(ViewReportError::new(name, "is given more than once"));
            } else {
                *slot = Some(value);
            }
        }
        let in_view_ms = in_view
            .map(|text| bounded(&text, MAX_IN_VIEW_MS))
            .transpose()
            .map_err(|message| errors.push(ViewReportError::new("in_view_ms", message)))
            .ok()
            .flatten();
        let max_visible = visible
            .map(|text| bounded(&text, 100))
            .transpose()
            .map_err(|message| errors.push(ViewReportError::new("max_visible", message)))
            .ok()
            .flatten()
            .and_then(|percent| u8::try_from(percent).ok());
        let mut parsed = ViewKinds::default();
        match kinds {
            None => errors.push(ViewReportError::new("e", "is required")),
            Some(list) => {
                // "measurable, viewable" is read as the list it means.
                for name in list
                    .split(',')
                    .map(str::trim)
                    .filter(|name| !name.is_empty())
                {
                    match ViewKind::parse(name) {
                        Some(kind) => parsed = parsed.with(kind),
                        None => errors.push(ViewReportError::new(
                            "e",
                            format!(
                                "names an unknown kind {} (measurable, viewable, hover, click, \
                                 expand, play, pause, complete)",
                                crate::domain::echo::echo(name)
                            ),
                        )),
                    }
                }
                if list.trim().is_empty() && in_view_ms.is_none() && errors.is_empty() {
                    errors.push(ViewReportError::new(
                        "e",
                        "may be empty only when in_view_ms is given",
                    ));
                }
            }
        }
        if errors.is_empty() {
            Ok(Self {
                kinds: parsed,
                in_view_ms,
                max_visible,
            })
        } else {
            Err(errors)
        }
    }
}

/// A decimal integer from 0 to `max`.
fn bounded(text: &str, max: u32) -> Result<u32, String> {
    let message = || format!("must be an integer from 0 to {max}");
    if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) || text.len() > 9 {
        return Err(message());
    }
    text.parse::<u32>()
        .ok()
        .filter(|value| *value <= max)
        .ok_or_else(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect()
    }

    #[test]
    fn a_report_names_every_problem_with_its_fields() {
        let report = ViewReport::from_fields(fields(&[
            ("e", "measurable, viewable,play"),
            ("in_view_ms", "1200"),
            ("max_visible", "80"),
        ]))
        .expect("valid");
        assert!(report.kinds.measurable() && report.kinds.engaged());
        assert_eq!(report.in_view_ms, Some(1200));
        assert_eq!(report.max_visible, Some(80));

        let errors = ViewReport::from_fields(fields(&[
            ("e", "viewable,wink"),
            ("in_view_ms", "600001"),
            ("max_visible", "-1"),
            ("extra", "1"),
        ]))
        .expect_err("invalid");
        let named: Vec<&str> = errors.iter().map(|error| error.field.as_str()).collect();
        assert_eq!(named, ["extra", "in_view_ms", "max_visible", "e"]);

        assert!(ViewReport::from_fields(fields(&[("e", "")])).is_err());
        assert!(ViewReport::from_fields(fields(&[])).is_err());
        assert!(ViewReport::from_fields(fields(&[("e", ""), ("in_view_ms", "0")])).is_ok());
        assert!(ViewReport::from_fields(fields(&[("e", "hover"), ("e", "play")])).is_err());
        assert!(ViewReport::from_fields(fields(&[("in_view_ms", "1e3"), ("e", "")])).is_err());
    }
}

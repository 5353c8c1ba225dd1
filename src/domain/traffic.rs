//! Who an event came from, as far as counting is concerned: the viewer's user agent, and
//! whether the event is general invalid traffic (docs/API.md, "Invalid traffic"). Invalid
//! events are kept with their reason and never counted as valid; an event stored more than
//! once is valid if any of its copies is.

use std::fmt;

/// A user agent as stored: at most [`UserAgent::MAX_BYTES`] bytes (cut at a character
/// boundary), never empty (an absent or empty user agent is `None`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UserAgent(String);

impl UserAgent {
    pub(crate) const MAX_BYTES: usize = 512;

    /// The stored form of `text`: cut to [`Self::MAX_BYTES`]; `None` when empty.
    pub(crate) fn new(text: &str) -> Option<Self> {
        let text = text.trim();
        if text.is_empty() {
            return None;
        }
        let mut end = text.len().min(Self::MAX_BYTES);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        Some(Self(text[..end].to_owned()))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for UserAgent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why an event is general invalid traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InvalidReason {
    /// A crawler, bot or headless browser on the maintained list.
    BotUserAgent,
    /// A prefetch (`Purpose: prefetch`, `Sec-Purpose: prefetch…`), not a view.
    Prefetch,
    /// A client address in `--ivt-deny-cidrs`.
    DeniedAddress,
}

impl InvalidReason {
    pub(crate) const ALL: [Self; 3] = [Self::BotUserAgent, Self::Prefetch, Self::DeniedAddress];

    /// The reason's name in answers and in the stores.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::BotUserAgent => "bot_user_agent",
            Self::Prefetch => "prefetch",
            Self::DeniedAddress => "denied_address",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|reason| reason.as_str() == text)
    }

    /// A one-byte code for compact encodings (0 is "valid").
    pub(crate) fn code(self) -> u8 {
        match self {
            Self::BotUserAgent => 1,
            Self::Prefetch => 2,
            Self::DeniedAddress => 3,
        }
    }

    /// The reason of [`code`](Self::code); `Ok(None)` for 0 (valid), `Err` for an unknown code.
    pub(crate) fn from_code(code: u8) -> Result<Option<Self>, u8> {
        match code {
            0 => Ok(None),
            1 => Ok(Some(Self::BotUserAgent)),
            2 => Ok(Some(Self::Prefetch)),
            3 => Ok(Some(Self::DeniedAddress)),
            other => Err(other),
        }
    }
}

impl fmt::Display for InvalidReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Folds the validity of the copies of one event: valid if any copy is (`None`), otherwise
/// the first copy's reason.
pub(crate) fn any_valid(
    copies: impl IntoIterator<Item = Option<InvalidReason>>,
) -> Option<InvalidReason> {
    let mut reason = None;
    for copy in copies {
        match copy {
            None => return None,
            Some(invalid) => {
                reason.get_or_insert(invalid);
            }
        }
    }
    reason
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_agent_is_cut_at_512_bytes_on_a_character_boundary_and_empty_is_none() {
        assert_eq!(UserAgent::new(""), None);
        assert_eq!(UserAgent::new("   "), None);
        let long = "é".repeat(300);
        let cut = UserAgent::new(&long).expect("some");
        assert!(cut.as_str().len() <= UserAgent::MAX_BYTES);
        assert_eq!(cut.as_str().len(), 512);
        assert_eq!(
            UserAgent::new("curl/8.0").expect("some").as_str(),
            "curl/8.0"
        );
    }

    #[test]
    fn reasons_round_trip_by_name_and_code() {
        for reason in InvalidReason::ALL {
            assert_eq!(InvalidReason::parse(reason.as_str()), Some(reason));
            assert_eq!(InvalidReason::from_code(reason.code()), Ok(Some(reason)));
        }
        assert_eq!(InvalidReason::from_code(0), Ok(None));
        assert_eq!(InvalidReason::from_code(9), Err(9));
        assert_eq!(InvalidReason::parse("human"), None);
    }

    #[test]
    fn an_event_is_valid_if_any_copy_is() {
        use InvalidReason::*;
        assert_eq!(any_valid([Some(Prefetch), None]), None);
        assert_eq!(
            any_valid([Some(Prefetch), Some(BotUserAgent)]),
            Some(Prefetch)
        );
        assert_eq!(any_valid([]), None);
    }
}

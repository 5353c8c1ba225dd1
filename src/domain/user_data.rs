//! Free-form user attributes an ad server attaches to an impression, within bounds that keep
//! rows small.

use super::echo::echo;
use std::collections::BTreeMap;

pub(crate) const MAX_ENTRIES: usize = 64;
pub(crate) const MAX_KEY_BYTES: usize = 64;
pub(crate) const MAX_VALUE_BYTES: usize = 1024;

/// Whether `key` may name a user attribute: 1 to 64 bytes, no control character. The same rule
/// holds for the key a report groups by (`user_data.<key>`).
pub(crate) fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(format!(
            "key {} must be 1 to {MAX_KEY_BYTES} bytes",
            echo(key)
        ));
    }
    if key.chars().any(char::is_control) {
        return Err(format!(
            "key {} has a control character; none are allowed",
            echo(key)
        ));
    }
    Ok(())
}

/// At most 64 entries; keys 1–64 bytes, values at most 1024 bytes; no control characters (a NUL
/// or an escape sequence in a value would reach CSV exports, logs and terminals).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct UserData(BTreeMap<String, String>);

impl UserData {
    pub(crate) fn new(entries: BTreeMap<String, String>) -> Result<Self, String> {
        if entries.len() > MAX_ENTRIES {
            return Err(format!(
                "has {} entries; at most {MAX_ENTRIES} are allowed",
                entries.len()
            ));
        }
        for (key, value) in &entries {
            check_key(key)?;
            if value.len() > MAX_VALUE_BYTES {
                return Err(format!(
                    "value of {} is {} bytes; at most {MAX_VALUE_BYTES} are allowed",
                    echo(key),
                    value.len()
                ));
            }
            if value.chars().any(char::is_control) {
                return Err(format!(
                    "value of {} has a control character; none are allowed",
                    echo(key)
                ));
            }
        }
        Ok(Self(entries))
    }

    /// Attributes read back from a store, which only holds valid ones.
    pub fn from_stored(entries: BTreeMap<String, String>) -> Self {
        Self(entries)
    }

    pub(crate) fn entries(&self) -> &BTreeMap<String, String> {
        &self.0
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_enforced() {
        let ok = BTreeMap::from([("country".to_owned(), "FR".to_owned())]);
        assert!(UserData::new(ok).is_ok());
        let many: BTreeMap<_, _> = (0..65).map(|i| (format!("k{i}"), String::new())).collect();
        assert!(UserData::new(many).is_err());
        let long_key = BTreeMap::from([("k".repeat(65), String::new())]);
        assert!(UserData::new(long_key).is_err());
        let long_value = BTreeMap::from([("k".to_owned(), "v".repeat(1025))]);
        assert!(UserData::new(long_value).is_err());
    }

    #[test]
    fn control_characters_are_refused_in_keys_and_values() {
        for (key, value) in [
            ("a\0b", "v"),
            ("k", "v\0"),
            ("k", "\u{1b}[31m"),
            ("\u{85}", "v"),
        ] {
            let entries = BTreeMap::from([(key.to_owned(), value.to_owned())]);
            let message = UserData::new(entries).expect_err("refused");
            assert!(message.contains("control character"), "{message}");
        }
        let unicode = BTreeMap::from([("pays".to_owned(), "Côte d’Ivoire 🇨🇮".to_owned())]);
        assert!(UserData::new(unicode).is_ok());
    }
}

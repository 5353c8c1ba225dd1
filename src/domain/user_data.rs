//! Free-form user attributes an ad server attaches to an impression, within bounds that keep
//! rows small.

use super::echo::echo;
use std::collections::BTreeMap;

pub const MAX_ENTRIES: usize = 64;
pub const MAX_KEY_BYTES: usize = 64;
pub const MAX_VALUE_BYTES: usize = 1024;

/// At most 64 entries; keys 1–64 bytes, values at most 1024 bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct UserData(BTreeMap<String, String>);

impl UserData {
    pub fn new(entries: BTreeMap<String, String>) -> Result<Self, String> {
        if entries.len() > MAX_ENTRIES {
            return Err(format!(
                "has {} entries; at most {MAX_ENTRIES} are allowed",
                entries.len()
            ));
        }
        for (key, value) in &entries {
            if key.is_empty() || key.len() > MAX_KEY_BYTES {
                return Err(format!(
                    "key {} must be 1 to {MAX_KEY_BYTES} bytes",
                    echo(key)
                ));
            }
            if value.len() > MAX_VALUE_BYTES {
                return Err(format!(
                    "value of {} is {} bytes; at most {MAX_VALUE_BYTES} are allowed",
                    echo(key),
                    value.len()
                ));
            }
        }
        Ok(Self(entries))
    }

    /// Attributes read back from a store, which only holds valid ones.
    pub fn from_stored(entries: BTreeMap<String, String>) -> Self {
        Self(entries)
    }

    pub fn entries(&self) -> &BTreeMap<String, String> {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
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
}

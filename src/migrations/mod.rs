//! Schema migrations as data: the `migrations/NNNN_name.cql` files embedded at build time,
//! their versions, checksums and statements. Applying them is the store's job
//! (`store::cassandra::migrator`); this module only knows what they are.

mod split;

use sha2::{Digest, Sha256};
use std::borrow::Cow;

pub(crate) use split::split_statements;

include!(concat!(env!("OUT_DIR"), "/migrations.rs"));

/// One migration file: a version taken from its name and the CQL it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    version: u32,
    file_name: Cow<'static, str>,
    text: Cow<'static, str>,
}

/// A migration file that cannot be used as one.
#[derive(Debug, thiserror::Error)]
pub enum MigrationFileError {
    #[error("migration file {file} is not named NNNN_name.cql")]
    BadName { file: String },
    #[error("migration files {first} and {second} have the same version {version}")]
    DuplicateVersion {
        version: u32,
        first: String,
        second: String,
    },
    #[error("migration file {file} holds no statement")]
    Empty { file: String },
}

impl Migration {
    /// Takes a file name of the form `NNNN_name.cql` (version `NNNN`) and its contents.
    pub fn new(
        file_name: impl Into<Cow<'static, str>>,
        text: impl Into<Cow<'static, str>>,
    ) -> Result<Self, MigrationFileError> {
        let file_name = file_name.into();
        let text = text.into();
        let bad_name = || MigrationFileError::BadName {
            file: file_name.to_string(),
        };
        let stem = file_name.strip_suffix(".cql").ok_or_else(bad_name)?;
        let (digits, name) = stem.split_once('_').ok_or_else(bad_name)?;
        let valid_name = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) || !valid_name {
            return Err(bad_name());
        }
        let version = digits.parse().map_err(|_| bad_name())?;
        if split_statements(&text).is_empty() {
            return Err(MigrationFileError::Empty {
                file: file_name.to_string(),
            });
        }
        Ok(Self {
            version,
            file_name,
            text,
        })
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    pub fn file_name(&self) -> &str {
        &self.file_name
    }

    /// Hex SHA-256 of the file's bytes: any edit to an applied file, even a comment, is a
    /// change, since the schema in the database no longer provably matches the repository.
    pub fn checksum(&self) -> String {
        Sha256::digest(self.text.as_bytes())
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect()
    }

    pub fn statements(&self) -> Vec<String> {
        split_statements(&self.text)
    }
}

/// Orders migrations by version and refuses two files claiming the same one.
pub(crate) fn ordered(
    mut migrations: Vec<Migration>,
) -> Result<Vec<Migration>, MigrationFileError> {
    migrations.sort_by_key(Migration::version);
    for pair in migrations.windows(2) {
        if pair[0].version == pair[1].version {
            return Err(MigrationFileError::DuplicateVersion {
                version: pair[0].version,
                first: pair[0].file_name.to_string(),
                second: pair[1].file_name.to_string(),
            });
        }
    }
    Ok(migrations)
}

/// The migrations built into this binary, in order.
pub fn embedded() -> Result<Vec<Migration>, MigrationFileError> {
    ordered(
        EMBEDDED
            .iter()
            .map(|(file, text)| Migration::new(*file, *text))
            .collect::<Result<_, _>>()?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_migrations_are_valid_and_numbered_from_one_without_gaps() {
        let migrations = embedded().expect("embedded migrations parse");
        assert!(!migrations.is_empty());
        for (index, migration) in migrations.iter().enumerate() {
            assert_eq!(
                migration.version() as usize,
                index + 1,
                "{}",
                migration.file_name()
            );
        }
    }

    #[test]
    fn version_comes_from_the_file_name() {
        let migration =
            Migration::new("0042_add_things.cql", "CREATE TABLE t (k int PRIMARY KEY);")
                .expect("valid");
        assert_eq!(migration.version(), 42);
        for bad in [
            "42.cql",
            "x_name.cql",
            "0001_.cql",
            "0001_name.sql",
            "0001_bad name.cql",
        ] {
            assert!(
                matches!(
                    Migration::new(bad, "SELECT 1 FROM t;"),
                    Err(MigrationFileError::BadName { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn checksum_changes_with_any_byte() {
        let a = Migration::new("0001_a.cql", "CREATE TABLE t (k int PRIMARY KEY);").expect("valid");
        let b =
            Migration::new("0001_a.cql", "CREATE TABLE t (k int PRIMARY KEY); ").expect("valid");
        assert_eq!(a.checksum().len(), 64);
        assert_ne!(a.checksum(), b.checksum());
    }

    #[test]
    fn duplicate_versions_are_refused() {
        let a = Migration::new("0001_a.cql", "SELECT 1 FROM t;").expect("valid");
        let b = Migration::new("0001_b.cql", "SELECT 1 FROM t;").expect("valid");
        assert!(matches!(
            ordered(vec![a, b]),
            Err(MigrationFileError::DuplicateVersion { version: 1, .. })
        ));
    }
}

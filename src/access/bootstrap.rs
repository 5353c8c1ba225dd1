//! The first admin key of a deployment. The embedded store makes one at the first start of a
//! data folder (the quick start stays two commands): its secret goes to `<data-dir>/admin.key`
//! (mode 0600) and nowhere else, and a marker in the store makes sure it happens once per
//! folder, even if every admin key is later revoked. Cassandra deployments make theirs with
//! `adevents keys create-admin`, which prints it once.

use super::Access;
use crate::domain::access::{Grant, IssuedKey};
use crate::store::{AccessStore, StoreError};
use chrono::Utc;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Why the bootstrap key could not be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BootstrapError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot write the admin key to {path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The file the bootstrap admin key is written to.
pub(crate) fn admin_key_file(data_dir: &Path) -> PathBuf {
    data_dir.join("admin.key")
}

/// Makes the folder's admin key unless it ever had one; returns the file it was written to.
pub(crate) async fn ensure_folder_admin(
    access: &Access,
    store: &dyn AccessStore,
    data_dir: &Path,
) -> Result<Option<PathBuf>, BootstrapError> {
    if store.admin_bootstrapped().await? {
        return Ok(None);
    }
    let path = admin_key_file(data_dir);
    // The file first: a crash after it and before the marker makes a new key at the next
    // start (overwriting the file), never a stored key whose secret nobody has.
    let issued = IssuedKey::generate();
    write_secret(&path, &issued.token).map_err(|source| BootstrapError::File {
        path: path.clone(),
        source,
    })?;
    access
        .store_issued(
            issued,
            Grant::Admin,
            Some("bootstrap admin key".into()),
            Utc::now(),
        )
        .await?;
    store.mark_admin_bootstrapped().await?;
    Ok(Some(path))
}

/// Writes `secret` to `path`, readable by its owner only, replacing any earlier file whole.
fn write_secret(path: &Path, secret: &str) -> std::io::Result<()> {
    let partial = path.with_extension("key.partial");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(&partial)?;
    file.write_all(secret.as_bytes())?;
    file.write_all(b"\n")?;
    file.sync_all()?;
    std::fs::rename(&partial, path)
}

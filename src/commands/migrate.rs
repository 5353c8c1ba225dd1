//! `adevents migrate`: apply pending schema migrations and exit.

use super::{CommandError, OpenedStore, embedded_migrations};
use crate::cli::MigrateArgs;

pub async fn migrate(args: MigrateArgs) -> Result<(), CommandError> {
    let migrations = embedded_migrations()?;
    let store = OpenedStore::open(&args.store, &migrations).await?;
    store.migrate(&migrations).await
}

//! `adevents keys create-admin`: an admin key made directly in the store (a Cassandra
//! deployment's first, or a replacement), printed once on standard output and never logged.

use super::{CommandError, OpenedStore, embedded_migrations};
use crate::access::{Access, AccessOptions};
use crate::cli::{KeysArgs, KeysCommand};
use crate::domain::access::Grant;
use chrono::Utc;
use std::sync::Arc;

pub async fn keys(args: KeysArgs) -> Result<(), CommandError> {
    let migrations = embedded_migrations()?;
    let opened = OpenedStore::open(&args.store, &migrations).await?;
    opened.prepare().await;
    let store = opened.into_store();
    let access = Access::new(
        Arc::clone(&store) as Arc<dyn crate::store::AccessStore>,
        AccessOptions::default(),
    );
    match args.command {
        KeysCommand::CreateAdmin { name } => {
            let (key, issued) = access
                .create_key(Grant::Admin, Some(name), Utc::now())
                .await?;
            tracing::info!(key = %key.id, "admin key created");
            println!("{}", issued.token);
            eprintln!(
                "the admin key {} is above; it is shown only this once (the store keeps its hash)",
                key.id
            );
        }
    }
    Ok(())
}

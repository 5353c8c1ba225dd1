//! Opening a data folder: its lock, its tables, and the upgrade of a layout written by an
//! older release.

use super::engine::{Tables, engine_error};
use super::{EmbeddedConfig, Fsync};
use crate::store::StoreError;
use fjall::{Database, KeyspaceCreateOptions, PersistMode};

/// The on-disk layout this build reads and writes.
const FORMAT_VERSION: u32 = 2;

/// Opens (or creates) the tables in `config.data_dir`, refusing a folder another process
/// holds, and brings an older layout up to [`FORMAT_VERSION`].
pub fn open_tables(config: &EmbeddedConfig) -> Result<Tables, StoreError> {
    let folder = config.data_dir.display();
    std::fs::create_dir_all(&config.data_dir).map_err(|error| {
        StoreError::internal(format!("cannot create the data folder {folder}"), error)
    })?;
    let db = Database::builder(&config.data_dir)
        .open()
        .map_err(|error| match error {
            fjall::Error::Locked => StoreError::internal_message(format!(
                "the data folder {folder} is in use by another adevents process; stop it or choose another --data-dir"
            )),
            other => StoreError::internal(format!("cannot open the data folder {folder}"), other),
        })?;
    let open = |name: &str| {
        db.keyspace(name, KeyspaceCreateOptions::default)
            .map_err(|error| engine_error("opening tables", error))
    };
    let meta = open("meta")?;
    let write_format = || {
        meta.insert("format", FORMAT_VERSION.to_be_bytes())
            .map_err(|error| engine_error("writing the format", error))
    };
    match meta
        .get("format")
        .map_err(|error| engine_error("reading the format", error))?
    {
        None => write_format()?,
        Some(version) if version.as_ref() == FORMAT_VERSION.to_be_bytes() => {}
        Some(version) if version.as_ref() == 1u32.to_be_bytes() => {
            upgrade_from_format_1(&db)?;
            write_format()?;
        }
        Some(_) => {
            return Err(StoreError::schema_message(format!(
                "the data folder {folder} was written by a newer adevents (format other than {FORMAT_VERSION})"
            )));
        }
    }
    let tables = Tables {
        impression: open("impression")?,
        impression_summary: open("impression_summary")?,
        click: open("click")?,
        click_by_impression: open("click_by_impression")?,
        campaign_config: open("campaign_config")?,
        visit: open("visit")?,
        site_config: open("site_config")?,
        visit_sketch: open("visit_sketch")?,
        site_day: open("site_day")?,
        campaign_day: open("campaign_day")?,
        campaign_rollup: open("campaign_rollup")?,
        campaign_reach: open("campaign_reach_level")?,
        campaign_seal: open("campaign_seal")?,
        site_visits: open("site_visits")?,
        site_reach: open("site_reach")?,
        site_seal: open("site_seal")?,
        persist: match config.fsync {
            Fsync::Always => PersistMode::SyncData,
            Fsync::Never => PersistMode::Buffer,
        },
        db,
    };
    tables
        .db
        .persist(PersistMode::SyncAll)
        .map_err(|error| engine_error("syncing the data folder", error))?;
    Ok(tables)
}

/// Format 1 kept users reached per ad and hour only (`campaign_reach`); format 2 keeps them
/// by level (`campaign_reach_level`, see `migrations/0005_reach_levels.cql`). The old rows go,
/// and so do the seals that relied on them: those days are read raw until sealed again.
fn upgrade_from_format_1(db: &Database) -> Result<(), StoreError> {
    let fail = |error: fjall::Error| engine_error("upgrading the data folder", error);
    if db.keyspace_exists("campaign_reach") {
        let old = db
            .keyspace("campaign_reach", KeyspaceCreateOptions::default)
            .map_err(fail)?;
        db.delete_keyspace(old).map_err(fail)?;
    }
    let seals = db
        .keyspace("campaign_seal", KeyspaceCreateOptions::default)
        .map_err(fail)?;
    let keys = seals
        .iter()
        .map(|guard| guard.key().map_err(fail))
        .collect::<Result<Vec<_>, _>>()?;
    for key in keys {
        seals.remove(key).map_err(fail)?;
    }
    Ok(())
}

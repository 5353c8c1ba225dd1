//! Data steps that belong to a migration: what a `.cql` file cannot say (CQL has no
//! `INSERT … SELECT`). A step runs after its file's statements and before the file is recorded
//! as applied, so a failed step runs again with the next migrator. Steps are idempotent.

use super::access::register_stored_site;
use super::config::KeyspaceName;
use super::errors::{decode_error, pager_error, stream_error};
use crate::domain::beacon::SiteId;
use crate::store::StoreError;
use chrono::NaiveDate;
use futures::TryStreamExt;
use scylla::client::session::Session;
use std::collections::BTreeSet;

/// Runs the data step of migration `version`, if it has one.
pub(crate) async fn after_migration(
    session: &Session,
    keyspace: &KeyspaceName,
    version: u32,
) -> Result<(), StoreError> {
    match version {
        6 => register_stored_sites(session, keyspace).await,
        _ => Ok(()),
    }
}

/// Every row of an unprepared, paged query.
async fn rows<R>(
    session: &Session,
    cql: String,
    values: impl scylla::serialize::row::SerializeRow,
    context: &'static str,
) -> Result<Vec<R>, StoreError>
where
    R: for<'frame, 'metadata> scylla::deserialize::row::DeserializeRow<'frame, 'metadata>
        + Send
        + 'static,
{
    session
        .query_iter(cql, values)
        .await
        .map_err(|error| pager_error(context, error))?
        .rows_stream::<R>()
        .map_err(|error| decode_error(context, error))?
        .try_collect()
        .await
        .map_err(|error| stream_error(context, error))
}

/// Migration 0006: registers every site that already received beacons (the site day index)
/// or has settings, so turning keys on does not refuse their traffic. The distinct partition
/// keys of the two tables are read once; this runs once per keyspace.
async fn register_stored_sites(
    session: &Session,
    keyspace: &KeyspaceName,
) -> Result<(), StoreError> {
    const CONTEXT: &str = "registering the stored sites";
    let mut sites = BTreeSet::new();
    let days: Vec<(NaiveDate,)> = rows(
        session,
        format!("SELECT DISTINCT day FROM {keyspace}.site_day"),
        (),
        CONTEXT,
    )
    .await?;
    for (day,) in days {
        let of_day: Vec<(String,)> = rows(
            session,
            format!("SELECT site FROM {keyspace}.site_day WHERE day = ?"),
            (day,),
            CONTEXT,
        )
        .await?;
        sites.extend(of_day.into_iter().map(|(site,)| site));
    }
    let configured: Vec<(String,)> = rows(
        session,
        format!("SELECT DISTINCT site FROM {keyspace}.site_config"),
        (),
        CONTEXT,
    )
    .await?;
    sites.extend(configured.into_iter().map(|(site,)| site));
    for site in sites {
        if let Ok(site) = SiteId::parse(&site) {
            register_stored_site(session, keyspace, &site).await?;
        }
    }
    Ok(())
}

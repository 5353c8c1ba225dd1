//! The zero-setup store: an embedded LSM engine (`fjall`) in a local data folder.
//!
//! Each table of the Cassandra schema is one fjall keyspace, and each row's key starts with its
//! partition key ([`keys`]), so a partition is one contiguous, clustering-ordered key range and
//! the planner above reads it exactly as it reads a Cassandra partition. A write call is one
//! atomic write batch, in the journal before the call returns: with `--fsync always` (the
//! default) fdatasync'ed, so it survives power loss; with `--fsync never`, handed to the OS,
//! so it survives a crash of the process (kill -9) but not of the machine. The folder is locked:
//! a second process on it is refused.

mod committer;
mod keys;
mod rollup_keys;
mod rows;
mod site_keys;

use crate::domain::beacon::{Beacon, Features, Guid, SiteId, VisitPartition};
use crate::domain::bucket::BucketCount;
use crate::domain::campaign::{CampaignSettings, SettingsHistory};
use crate::domain::event::{Click, Impression};
use crate::domain::ids::{AdId, CampaignKey, ImpressionId, UserId};
use crate::domain::partition::EventPartition;
use crate::domain::time::Day;
use crate::domain::time::EventTime;
use crate::domain::user_data::UserData;
use crate::store::{
    ClickRow, ImpressionPage, ImpressionSummaryRow, PageCursor, ReachLevel, Rollup, RollupSlice,
    SealState, SiteRollup, SketchPartition, SketchRow, Store, StoreError, VisitRow,
};
use async_trait::async_trait;
use committer::{Committer, Removals, Rows};
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use rollup_keys::SealCell;
use std::path::PathBuf;
use std::sync::Arc;

/// The on-disk layout this build reads and writes.
const FORMAT_VERSION: u32 = 2;

/// When the journal is synced to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fsync {
    /// fdatasync before every answer: acknowledged events survive power loss.
    Always,
    /// Hand the journal to the OS before every answer: acknowledged events survive a crash of
    /// the process, not of the machine.
    Never,
}

#[derive(Debug, Clone)]
pub struct EmbeddedConfig {
    pub data_dir: PathBuf,
    pub fsync: Fsync,
}

struct Tables {
    db: Database,
    impression: Keyspace,
    impression_summary: Keyspace,
    click: Keyspace,
    click_by_impression: Keyspace,
    campaign_config: Keyspace,
    visit: Keyspace,
    site_config: Keyspace,
    visit_sketch: Keyspace,
    site_day: Keyspace,
    campaign_day: Keyspace,
    campaign_rollup: Keyspace,
    campaign_reach: Keyspace,
    campaign_seal: Keyspace,
    site_visits: Keyspace,
    site_reach: Keyspace,
    site_seal: Keyspace,
    persist: PersistMode,
}

/// The embedded store; cheap to clone, one per data folder and process.
#[derive(Clone)]
pub struct EmbeddedStore {
    tables: Arc<Tables>,
    committer: Arc<Committer>,
    engine_slots: Arc<tokio::sync::Semaphore>,
}

fn engine_error(context: &str, error: &fjall::Error) -> StoreError {
    match error {
        fjall::Error::Poisoned | fjall::Error::Unrecoverable => StoreError::Internal(format!(
            "{context}: the data folder failed a write earlier ({error}); restart the server"
        )),
        _ => StoreError::Unavailable(format!("{context}: {error}")),
    }
}

fn corrupt(context: &str) -> StoreError {
    StoreError::Internal(format!("{context}: a stored row does not decode"))
}

/// Engine calls (reads, mostly) run at once. A query's fan-out of 64 partition reads would
/// otherwise start 64 blocking threads, each keeping its own allocator pages: hundreds of MB
/// of memory for no speed on a few cores (the engine reads from the page cache, CPU-bound).
const ENGINE_CALLS_IN_FLIGHT: usize = 8;

/// Rows per page of a partition read for exports and reports.
const EXPORT_PAGE_ROWS: usize = 2_000;

/// A full impression row of `partition` back from its key and value.
fn full_impression(partition: &EventPartition, key: &[u8], value: &[u8]) -> Option<Impression> {
    let (at, impression_id) = keys::decode_event_key(key)?;
    let (ad_id, user_id, user_ip, user_data) = rows::decode_impression_value(value)?;
    Some(Impression {
        impression_id,
        campaign: partition.campaign,
        ad_id,
        user_id,
        timestamp: EventTime::from_stored(at),
        user_ip,
        user_data: UserData::from_stored(user_data),
    })
}

/// Format 1 kept users reached per ad and hour only (`campaign_reach`); format 2 keeps them
/// by level (`campaign_reach_level`, see `migrations/0005_reach_levels.cql`). The old rows go,
/// and so do the seals that relied on them: those days are read raw until sealed again.
fn upgrade_from_format_1(db: &Database) -> Result<(), StoreError> {
    let fail = |error: fjall::Error| engine_error("upgrading the data folder", &error);
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

impl EmbeddedStore {
    /// Opens (or creates) the store in `config.data_dir`, refusing a folder another process holds.
    pub fn open(config: &EmbeddedConfig) -> Result<Self, StoreError> {
        let folder = config.data_dir.display();
        std::fs::create_dir_all(&config.data_dir).map_err(|error| {
            StoreError::Internal(format!("cannot create the data folder {folder}: {error}"))
        })?;
        let db = Database::builder(&config.data_dir).open().map_err(|error| match error {
            fjall::Error::Locked => StoreError::Internal(format!(
                "the data folder {folder} is in use by another adevents process; stop it or choose another --data-dir"
            )),
            other => StoreError::Internal(format!("cannot open the data folder {folder}: {other}")),
        })?;
        let open = |name: &str| {
            db.keyspace(name, KeyspaceCreateOptions::default)
                .map_err(|error| engine_error("opening tables", &error))
        };
        let meta = open("meta")?;
        match meta
            .get("format")
            .map_err(|error| engine_error("reading the format", &error))?
        {
            None => meta
                .insert("format", FORMAT_VERSION.to_be_bytes())
                .map_err(|error| engine_error("writing the format", &error))?,
            Some(version) if version.as_ref() == FORMAT_VERSION.to_be_bytes() => {}
            Some(version) if version.as_ref() == 1u32.to_be_bytes() => {
                upgrade_from_format_1(&db)?;
                meta.insert("format", FORMAT_VERSION.to_be_bytes())
                    .map_err(|error| engine_error("writing the format", &error))?;
            }
            Some(_) => {
                return Err(StoreError::SchemaNotCurrent(format!(
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
            .map_err(|error| engine_error("syncing the data folder", &error))?;
        let tables = Arc::new(tables);
        let committer = Arc::new(Committer::start(Arc::clone(&tables))?);
        Ok(Self {
            tables,
            committer,
            engine_slots: Arc::new(tokio::sync::Semaphore::new(ENGINE_CALLS_IN_FLIGHT)),
        })
    }

    /// Runs engine work off the async threads, at most [`ENGINE_CALLS_IN_FLIGHT`] at once.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Tables) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let tables = Arc::clone(&self.tables);
        // The slot goes with the work, not with this future: a caller that is slow to poll
        // the result (an export waiting on its client) must not hold an engine slot.
        let slot = Arc::clone(&self.engine_slots)
            .acquire_owned()
            .await
            .map_err(|_| StoreError::Internal("the store is closing".into()))?;
        tokio::task::spawn_blocking(move || {
            let result = work(&tables);
            drop(slot);
            result
        })
        .await
        .map_err(|error| StoreError::Internal(format!("store task failed: {error}")))?
    }

    /// Applies `rows` (table, key, value) as one atomic batch, durable per the fsync policy;
    /// concurrent calls share a commit ([`committer`]).
    async fn write(&self, context: &'static str, rows: Rows) -> Result<(), StoreError> {
        self.committer.commit(context, rows).await
    }

    /// Every (key, value) under `prefix` in one table, in key order, at most `limit`.
    async fn scan(
        &self,
        table: Table,
        prefix: Vec<u8>,
        limit: Option<usize>,
        context: &'static str,
    ) -> Result<Vec<(fjall::Slice, fjall::Slice)>, StoreError> {
        self.blocking(move |tables| {
            tables
                .get(table)
                .prefix(prefix)
                .take(limit.unwrap_or(usize::MAX))
                .map(|guard| {
                    guard
                        .into_inner()
                        .map_err(|error| engine_error(context, &error))
                })
                .collect()
        })
        .await
    }
}

impl EmbeddedStore {
    /// Every row of one event partition, its key's time and id decoded, the value by `decode`.
    async fn read_partition<R>(
        &self,
        table: Table,
        partition: &EventPartition,
        context: &'static str,
        decode: impl Fn(chrono::DateTime<chrono::Utc>, ImpressionId, &[u8]) -> Option<R>,
    ) -> Result<Vec<R>, StoreError> {
        let rows = self
            .scan(table, keys::partition_prefix(partition), None, context)
            .await?;
        rows.iter()
            .map(|(key, value)| {
                let (at, impression_id) =
                    keys::decode_event_key(key).ok_or_else(|| corrupt(context))?;
                decode(at, impression_id, value).ok_or_else(|| corrupt(context))
            })
            .collect()
    }
}

/// A seal state from its cells: `S` (sealed_from) and `L` (late_at), epoch milliseconds.
fn decode_seal(cells: &[(fjall::Slice, fjall::Slice)]) -> Option<SealState> {
    let mut state = SealState::default();
    for (key, value) in cells {
        let at = chrono::DateTime::from_timestamp_millis(i64::from_be_bytes(
            value.as_ref().try_into().ok()?,
        ))?;
        match key.last()? {
            b'S' => state.sealed_from = Some(at),
            b'L' => state.late_at = Some(at),
            _ => return None,
        }
    }
    Some(state)
}

#[derive(Debug, Clone, Copy)]
enum Table {
    Impression,
    ImpressionSummary,
    Click,
    ClickByImpression,
    CampaignConfig,
    Visit,
    SiteConfig,
    VisitSketch,
    SiteDay,
    CampaignDay,
    CampaignRollup,
    CampaignReach,
    CampaignSeal,
    SiteVisits,
    SiteReach,
    SiteSeal,
}

impl Tables {
    fn get(&self, table: Table) -> &Keyspace {
        match table {
            Table::Impression => &self.impression,
            Table::ImpressionSummary => &self.impression_summary,
            Table::Click => &self.click,
            Table::ClickByImpression => &self.click_by_impression,
            Table::CampaignConfig => &self.campaign_config,
            Table::Visit => &self.visit,
            Table::SiteConfig => &self.site_config,
            Table::VisitSketch => &self.visit_sketch,
            Table::SiteDay => &self.site_day,
            Table::CampaignDay => &self.campaign_day,
            Table::CampaignRollup => &self.campaign_rollup,
            Table::CampaignReach => &self.campaign_reach,
            Table::CampaignSeal => &self.campaign_seal,
            Table::SiteVisits => &self.site_visits,
            Table::SiteReach => &self.site_reach,
            Table::SiteSeal => &self.site_seal,
        }
    }
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn check_ready(&self) -> Result<(), StoreError> {
        if !self.committer.is_running() {
            return Err(StoreError::Internal(
                "the embedded store's commit thread stopped; restart the server".into(),
            ));
        }
        // A local folder answers whenever the process runs; a poisoned one fails its writes.
        self.scan(
            Table::CampaignConfig,
            Vec::new(),
            Some(1),
            "checking readiness",
        )
        .await
        .map(|_| ())
    }

    async fn write_impressions(
        &self,
        partition: EventPartition,
        impressions: &[Impression],
    ) -> Result<(), StoreError> {
        let mut rows = Vec::with_capacity(impressions.len() * 2);
        for event in impressions {
            let key = keys::event_key(&partition, event.timestamp.instant(), event.impression_id);
            rows.push((
                Table::Impression,
                key.clone(),
                rows::impression_value(event),
            ));
            rows.push((Table::ImpressionSummary, key, rows::summary_value(event)));
        }
        self.write("writing impressions", rows).await
    }

    async fn write_clicks(
        &self,
        partition: EventPartition,
        clicks: &[Click],
    ) -> Result<(), StoreError> {
        let mut rows = Vec::with_capacity(clicks.len() * 2);
        for click in clicks {
            let ad = click.ad_id.as_uuid().as_bytes().to_vec();
            let key = keys::event_key(&partition, click.timestamp.instant(), click.impression_id);
            rows.push((Table::Click, key, ad.clone()));
            let index = keys::click_index_key(
                click.campaign,
                click.impression_id,
                click.timestamp.instant(),
            );
            rows.push((Table::ClickByImpression, index, ad));
        }
        self.write("writing clicks", rows).await
    }

    async fn read_impression_summaries(
        &self,
        partition: EventPartition,
    ) -> Result<Vec<ImpressionSummaryRow>, StoreError> {
        self.read_partition(
            Table::ImpressionSummary,
            &partition,
            "reading impressions",
            |at, impression_id, value| {
                let (ad, user) = rows::decode_two_ids(value)?;
                Some(ImpressionSummaryRow {
                    impression_id,
                    ad_id: AdId::new(ad),
                    user_id: UserId::new(user),
                    timestamp: EventTime::from_stored(at),
                })
            },
        )
        .await
    }

    async fn read_impression_page(
        &self,
        partition: EventPartition,
        cursor: Option<PageCursor>,
    ) -> Result<ImpressionPage, StoreError> {
        const CONTEXT: &str = "reading impressions";
        // Keys run newest first, so a page is read backwards from the last key returned.
        let prefix = keys::partition_prefix(&partition);
        let rows = self
            .blocking(move |tables| {
                let table = tables.get(Table::Impression);
                let rows = match cursor {
                    None => table.prefix(&prefix),
                    Some(cursor) => table.range(prefix.clone()..cursor.bytes().to_vec()),
                };
                rows.rev()
                    .take(EXPORT_PAGE_ROWS)
                    .map(|guard| {
                        guard
                            .into_inner()
                            .map_err(|error| engine_error(CONTEXT, &error))
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .await?;
        let next = (rows.len() == EXPORT_PAGE_ROWS)
            .then(|| rows.last().map(|(key, _)| PageCursor::new(key.to_vec())))
            .flatten();
        let impressions = rows
            .iter()
            .map(|(key, value)| {
                full_impression(&partition, key, value).ok_or_else(|| corrupt(CONTEXT))
            })
            .collect::<Result<_, _>>()?;
        Ok(ImpressionPage { impressions, next })
    }

    async fn read_newest_impressions(
        &self,
        partition: EventPartition,
        limit: usize,
    ) -> Result<Vec<Impression>, StoreError> {
        const CONTEXT: &str = "reading the newest impressions";
        let rows = self
            .scan(
                Table::Impression,
                keys::partition_prefix(&partition),
                Some(limit),
                CONTEXT,
            )
            .await?;
        rows.iter()
            .map(|(key, value)| {
                full_impression(&partition, key, value).ok_or_else(|| corrupt(CONTEXT))
            })
            .collect()
    }

    async fn read_clicks(&self, partition: EventPartition) -> Result<Vec<ClickRow>, StoreError> {
        self.read_partition(
            Table::Click,
            &partition,
            "reading clicks",
            |at, impression_id, value| {
                Some(ClickRow {
                    impression_id,
                    ad_id: AdId::new(rows::decode_one_id(value)?),
                    timestamp: EventTime::from_stored(at),
                })
            },
        )
        .await
    }

    async fn first_click(
        &self,
        campaign: CampaignKey,
        impression_id: ImpressionId,
    ) -> Result<Option<ClickRow>, StoreError> {
        let context = "reading the click index";
        let rows = self
            .scan(
                Table::ClickByImpression,
                keys::click_index_prefix(campaign, impression_id),
                Some(1),
                context,
            )
            .await?;
        rows.first()
            .map(|(key, value)| {
                let at = keys::decode_click_index_time(key).ok_or_else(|| corrupt(context))?;
                let ad = rows::decode_one_id(value).ok_or_else(|| corrupt(context))?;
                Ok(ClickRow {
                    impression_id,
                    ad_id: AdId::new(ad),
                    timestamp: EventTime::from_stored(at),
                })
            })
            .transpose()
    }

    async fn campaign_settings(
        &self,
        campaign: CampaignKey,
    ) -> Result<SettingsHistory, StoreError> {
        let context = "reading campaign settings";
        let rows = self
            .scan(
                Table::CampaignConfig,
                keys::campaign_prefix(campaign),
                None,
                context,
            )
            .await?;
        let entries = rows
            .iter()
            .map(|(key, value)| {
                let effective_from =
                    keys::decode_settings_time(key).ok_or_else(|| corrupt(context))?;
                let (buckets, daily_cap) =
                    rows::decode_settings_value(value).ok_or_else(|| corrupt(context))?;
                Ok(CampaignSettings {
                    buckets: BucketCount::new(buckets).map_err(|_| corrupt(context))?,
                    effective_from,
                    daily_cap,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(SettingsHistory::new(entries))
    }

    async fn put_campaign_settings(
        &self,
        campaign: CampaignKey,
        settings: &CampaignSettings,
    ) -> Result<(), StoreError> {
        let row = (
            Table::CampaignConfig,
            keys::settings_key(campaign, settings.effective_from),
            rows::settings_value(settings.buckets.get(), settings.daily_cap),
        );
        self.write("writing campaign settings", vec![row]).await
    }

    async fn write_visits(
        &self,
        partition: &VisitPartition,
        visits: &[Beacon],
    ) -> Result<(), StoreError> {
        let rows = visits
            .iter()
            .map(|visit| {
                let key = site_keys::visit_key(
                    partition,
                    visit.timestamp.instant(),
                    visit.guid.as_str(),
                    &visit.features.combination_key(),
                );
                (Table::Visit, key, Vec::new())
            })
            .collect();
        self.write("writing beacons", rows).await
    }

    async fn read_visits(&self, partition: &VisitPartition) -> Result<Vec<VisitRow>, StoreError> {
        const CONTEXT: &str = "reading beacons";
        let prefix = site_keys::visit_prefix(partition);
        let prefix_len = prefix.len();
        let rows = self.scan(Table::Visit, prefix, None, CONTEXT).await?;
        rows.iter()
            .map(|(key, _)| {
                let (at, guid, features) =
                    site_keys::decode_visit_key(key, prefix_len).ok_or_else(|| corrupt(CONTEXT))?;
                Ok(VisitRow {
                    timestamp: EventTime::from_stored(at),
                    guid: Guid::from_stored(guid.to_owned()),
                    features: Features::from_combination_key(features)
                        .ok_or_else(|| corrupt(CONTEXT))?,
                })
            })
            .collect()
    }

    async fn site_settings(&self, site: &SiteId) -> Result<SettingsHistory, StoreError> {
        const CONTEXT: &str = "reading site settings";
        let prefix = site_keys::site_prefix(site);
        let prefix_len = prefix.len();
        let rows = self.scan(Table::SiteConfig, prefix, None, CONTEXT).await?;
        let entries = rows
            .iter()
            .map(|(key, value)| {
                let effective_from = site_keys::decode_site_settings_time(key, prefix_len)
                    .ok_or_else(|| corrupt(CONTEXT))?;
                let (buckets, _) =
                    rows::decode_settings_value(value).ok_or_else(|| corrupt(CONTEXT))?;
                Ok(CampaignSettings {
                    buckets: BucketCount::new(buckets).map_err(|_| corrupt(CONTEXT))?,
                    effective_from,
                    daily_cap: None,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(SettingsHistory::new(entries))
    }

    async fn put_site_settings(
        &self,
        site: &SiteId,
        settings: &CampaignSettings,
    ) -> Result<(), StoreError> {
        let row = (
            Table::SiteConfig,
            site_keys::site_settings_key(site, settings.effective_from),
            rows::settings_value(settings.buckets.get(), None),
        );
        self.write("writing site settings", vec![row]).await
    }

    async fn write_sketches(
        &self,
        partition: &SketchPartition,
        rows: &[SketchRow],
    ) -> Result<(), StoreError> {
        let rows = rows
            .iter()
            .map(|row| {
                (
                    Table::VisitSketch,
                    site_keys::sketch_key(partition, row.hour, row.writer),
                    row.sketch.clone(),
                )
            })
            .collect();
        self.write("writing sketches", rows).await
    }

    async fn read_sketches(
        &self,
        partition: &SketchPartition,
    ) -> Result<Vec<SketchRow>, StoreError> {
        const CONTEXT: &str = "reading sketches";
        let prefix = site_keys::sketch_prefix(partition);
        let prefix_len = prefix.len();
        let rows = self.scan(Table::VisitSketch, prefix, None, CONTEXT).await?;
        rows.iter()
            .map(|(key, value)| {
                let (hour, writer) = site_keys::decode_sketch_key(key, prefix_len)
                    .ok_or_else(|| corrupt(CONTEXT))?;
                Ok(SketchRow {
                    hour,
                    writer,
                    sketch: value.to_vec(),
                    // Not kept: one process writes this folder, in order.
                    captured_at: 0,
                })
            })
            .collect()
    }

    async fn mark_site_day(&self, day: Day, site: &SiteId) -> Result<(), StoreError> {
        let row = (
            Table::SiteDay,
            site_keys::site_day_key(day, site),
            Vec::new(),
        );
        self.write("writing the day index", vec![row]).await
    }

    async fn sites_of_day(&self, day: Day) -> Result<Vec<SiteId>, StoreError> {
        const CONTEXT: &str = "reading the day index";
        let rows = self
            .scan(
                Table::SiteDay,
                site_keys::site_day_prefix(day),
                None,
                CONTEXT,
            )
            .await?;
        rows.iter()
            .map(|(key, _)| {
                site_keys::decode_site_day_key(key)
                    .and_then(|site| SiteId::parse(site).ok())
                    .ok_or_else(|| corrupt(CONTEXT))
            })
            .collect()
    }

    async fn mark_campaign_day(&self, day: Day, campaign: CampaignKey) -> Result<(), StoreError> {
        let row = (
            Table::CampaignDay,
            rollup_keys::day_index_key(day, campaign),
            Vec::new(),
        );
        self.write("writing the day index", vec![row]).await
    }

    async fn campaigns_of_day(&self, day: Day) -> Result<Vec<CampaignKey>, StoreError> {
        const CONTEXT: &str = "reading the day index";
        let rows = self
            .scan(
                Table::CampaignDay,
                rollup_keys::day_index_prefix(day),
                None,
                CONTEXT,
            )
            .await?;
        rows.iter()
            .map(|(key, _)| rollup_keys::decode_day_index_key(key).ok_or_else(|| corrupt(CONTEXT)))
            .collect()
    }

    async fn mark_late(
        &self,
        campaign: CampaignKey,
        day: Day,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StoreError> {
        let row = (
            Table::CampaignSeal,
            rollup_keys::seal_key(campaign, day, SealCell::LateAt),
            at.timestamp_millis().to_be_bytes().to_vec(),
        );
        self.write("marking a late event", vec![row]).await
    }

    async fn seal_state(&self, campaign: CampaignKey, day: Day) -> Result<SealState, StoreError> {
        const CONTEXT: &str = "reading a seal";
        let rows = self
            .scan(
                Table::CampaignSeal,
                rollup_keys::campaign_day_prefix(campaign, day),
                None,
                CONTEXT,
            )
            .await?;
        decode_seal(&rows).ok_or_else(|| corrupt(CONTEXT))
    }

    async fn write_rollup(
        &self,
        campaign: CampaignKey,
        day: Day,
        rollup: &Rollup,
        read_started: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StoreError> {
        // One atomic batch: rows and seal together (one process owns this folder, so a later
        // seal's batch simply lands after an earlier one's).
        let mut rows: Rows = rollup
            .slices
            .iter()
            .map(|row| {
                (
                    Table::CampaignRollup,
                    rollup_keys::rollup_key(campaign, day, row.slice, row.ad_id),
                    rollup_keys::counts_value(
                        row.impressions,
                        row.clicks,
                        row.billable_impressions,
                    ),
                )
            })
            .collect();
        rows.extend(rollup.reach.iter().map(|row| {
            (
                Table::CampaignReach,
                rollup_keys::reach_key(campaign, day, row),
                row.sketch.clone(),
            )
        }));
        rows.push((
            Table::CampaignSeal,
            rollup_keys::seal_key(campaign, day, SealCell::SealedFrom),
            read_started.timestamp_millis().to_be_bytes().to_vec(),
        ));
        // Rows of an earlier seal that this one has no more (a click that moved to another
        // day as a late, earlier first click arrived) must not linger.
        let new_keys: std::collections::HashSet<&[u8]> =
            rows.iter().map(|(_, key, _)| key.as_slice()).collect();
        let prefix = rollup_keys::campaign_day_prefix(campaign, day);
        let mut removals: Removals = Vec::new();
        for table in [Table::CampaignRollup, Table::CampaignReach] {
            for (key, _) in self
                .scan(table, prefix.clone(), None, "reading a rollup")
                .await?
            {
                if !new_keys.contains(key.as_ref()) {
                    removals.push((table, key.to_vec()));
                }
            }
        }
        self.committer
            .commit_replacing("writing a rollup", removals, rows)
            .await
    }

    async fn read_rollup(
        &self,
        campaign: CampaignKey,
        day: Day,
        reach: &[ReachLevel],
    ) -> Result<Rollup, StoreError> {
        const CONTEXT: &str = "reading a rollup";
        let prefix = rollup_keys::campaign_day_prefix(campaign, day);
        let slices = self
            .scan(Table::CampaignRollup, prefix, None, CONTEXT)
            .await?;
        let mut reach_rows = Vec::new();
        for level in reach {
            let level_prefix = rollup_keys::reach_level_prefix(campaign, day, *level);
            for (key, value) in self
                .scan(Table::CampaignReach, level_prefix, None, CONTEXT)
                .await?
            {
                reach_rows.push(
                    rollup_keys::decode_reach_row(&key, &value).ok_or_else(|| corrupt(CONTEXT))?,
                );
            }
        }
        Ok(Rollup {
            slices: slices
                .iter()
                .map(|(key, value)| {
                    let (slice, ad_id) =
                        rollup_keys::decode_rollup_key(key).ok_or_else(|| corrupt(CONTEXT))?;
                    let (impressions, clicks, billable_impressions) =
                        rollup_keys::decode_counts_value(value).ok_or_else(|| corrupt(CONTEXT))?;
                    Ok(RollupSlice {
                        slice,
                        ad_id,
                        impressions,
                        clicks,
                        billable_impressions,
                    })
                })
                .collect::<Result<_, StoreError>>()?,
            reach: reach_rows,
        })
    }

    async fn mark_site_late(
        &self,
        site: &SiteId,
        day: Day,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StoreError> {
        let row = (
            Table::SiteSeal,
            site_keys::site_seal_key(site, day, b'L'),
            at.timestamp_millis().to_be_bytes().to_vec(),
        );
        self.write("marking a late beacon", vec![row]).await
    }

    async fn site_seal_state(&self, site: &SiteId, day: Day) -> Result<SealState, StoreError> {
        const CONTEXT: &str = "reading a site seal";
        let rows = self
            .scan(
                Table::SiteSeal,
                site_keys::site_seal_prefix(site, day),
                None,
                CONTEXT,
            )
            .await?;
        decode_seal(&rows).ok_or_else(|| corrupt(CONTEXT))
    }

    async fn write_site_rollup(
        &self,
        site: &SiteId,
        day: Day,
        combinations: &[(String, SiteRollup)],
        read_started: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StoreError> {
        let mut rows: Rows = Vec::new();
        for (combination, rollup) in combinations {
            let partition = SketchPartition {
                site: site.clone(),
                day,
                combination: combination.clone(),
            };
            rows.extend(rollup.visits.iter().map(|(slice, visits)| {
                (
                    Table::SiteVisits,
                    site_keys::rollup_unit_key(&partition, *slice),
                    visits.to_be_bytes().to_vec(),
                )
            }));
            rows.extend(rollup.reach.iter().map(|(hour, sketch)| {
                (
                    Table::SiteReach,
                    site_keys::rollup_unit_key(&partition, *hour),
                    sketch.clone(),
                )
            }));
        }
        rows.push((
            Table::SiteSeal,
            site_keys::site_seal_key(site, day, b'S'),
            read_started.timestamp_millis().to_be_bytes().to_vec(),
        ));
        self.write("writing a site rollup", rows).await
    }

    async fn read_site_rollup(
        &self,
        partition: &SketchPartition,
    ) -> Result<SiteRollup, StoreError> {
        const CONTEXT: &str = "reading a site rollup";
        let prefix = site_keys::sketch_prefix(partition);
        let prefix_len = prefix.len();
        let visits = self
            .scan(Table::SiteVisits, prefix.clone(), None, CONTEXT)
            .await?;
        let reach = self.scan(Table::SiteReach, prefix, None, CONTEXT).await?;
        Ok(SiteRollup {
            visits: visits
                .iter()
                .map(|(key, value)| {
                    let slice = site_keys::decode_rollup_unit(key, prefix_len)
                        .ok_or_else(|| corrupt(CONTEXT))?;
                    let count: [u8; 8] = value.as_ref().try_into().map_err(|_| corrupt(CONTEXT))?;
                    Ok((slice, u64::from_be_bytes(count)))
                })
                .collect::<Result<_, StoreError>>()?,
            reach: reach
                .iter()
                .map(|(key, value)| {
                    let hour = site_keys::decode_rollup_unit(key, prefix_len)
                        .ok_or_else(|| corrupt(CONTEXT))?;
                    Ok((hour, value.to_vec()))
                })
                .collect::<Result<_, StoreError>>()?,
        })
    }
}

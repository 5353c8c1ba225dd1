//! The embedded store's tables and the two ways work reaches them: reads on the blocking pool
//! (a bounded number at once) and writes through the group committer.

use super::EmbeddedStore;
use crate::store::StoreError;
use crate::store::error::Message;
use fjall::{Database, Keyspace, PersistMode};
use std::sync::Arc;

/// Engine calls (reads, mostly) run at once. A query's fan-out of 64 partition reads would
/// otherwise start 64 blocking threads, each keeping its own allocator pages: hundreds of MB
/// of memory for no speed on a few cores (the engine reads from the page cache, CPU-bound).
pub(crate) const ENGINE_CALLS_IN_FLIGHT: usize = 8;

/// One fjall keyspace per table of the Cassandra schema.
pub(crate) struct Tables {
    pub(crate) db: Database,
    pub(crate) impression: Keyspace,
    pub(crate) impression_summary: Keyspace,
    pub(crate) click: Keyspace,
    pub(crate) click_by_impression: Keyspace,
    pub(crate) campaign_config: Keyspace,
    /// Beacons of format 3 folders, one row each; read, no longer written.
    pub(crate) visit: Keyspace,
    /// Beacons, one row per partition and commit ([`super::committer::Appended`]).
    pub(crate) visit_log: Keyspace,
    pub(crate) site_config: Keyspace,
    pub(crate) visit_sketch: Keyspace,
    pub(crate) site_day: Keyspace,
    pub(crate) campaign_day: Keyspace,
    pub(crate) campaign_rollup: Keyspace,
    pub(crate) campaign_reach: Keyspace,
    pub(crate) campaign_seal: Keyspace,
    pub(crate) site_visits: Keyspace,
    pub(crate) site_reach: Keyspace,
    pub(crate) site_seal: Keyspace,
    pub(crate) api_key: Keyspace,
    pub(crate) tag_secret: Keyspace,
    pub(crate) site_registry: Keyspace,
    pub(crate) late_day: Keyspace,
    pub(crate) process: Keyspace,
    pub(crate) process_mark: Keyspace,
    pub(crate) delivery_live: Keyspace,
    pub(crate) delivery_sealed: Keyspace,
    pub(crate) delivery_windows: Keyspace,
    pub(crate) owner_listing: Keyspace,
    pub(crate) site_features: Keyspace,
    /// Every stored copy of an impression by partition, id and time (see [`crate::store::SliceStore`]).
    pub(crate) impression_copy: Keyspace,
    /// The slices of unsealed campaign-days: states, duplicates and aggregates.
    pub(crate) open_day: Keyspace,
    pub(crate) view_report: Keyspace,
    pub(crate) event_index: Keyspace,
    pub(crate) conversion_copy: Keyspace,
    /// The due list that releases before format 7 wrote: one per day, by due time.
    pub(crate) conversion_due: Keyspace,
    /// The due lists by (day, advertiser), by due time.
    pub(crate) conversion_due_by_advertiser: Keyspace,
    /// The day's directory of due lists, and where each was last taken through.
    pub(crate) conversion_due_advertiser: Keyspace,
    pub(crate) conversion_decision: Keyspace,
    pub(crate) conversion: Keyspace,
    pub(crate) campaign_conversion: Keyspace,
    /// The subject directory: which advertisers and weeks index a user's events.
    pub(crate) subject_week: Keyspace,
    /// The conversions carrying a user, by advertiser, week and user.
    pub(crate) subject_conversion: Keyspace,
    /// The visitor index: which UTC days hold a visitor's beacons on a site.
    pub(crate) visitor_day: Keyspace,
    /// Erasure records, the pending list, erased subjects and settled counts.
    pub(crate) erasure: Keyspace,
    /// The folder's format version and markers kept once (the bootstrap admin key).
    pub(crate) meta: Keyspace,
    pub(crate) persist: PersistMode,
    /// Whether this opening created the folder: it holds no rows yet.
    pub(crate) created: bool,
}

/// Derived rows in one engine batch at most (see [`EmbeddedStore::write_derived`]).
const DERIVED_ROWS_PER_BATCH: usize = 512;

/// Rows (table, key, value) one write call applies.
pub(crate) type Rows = Vec<(Table, Vec<u8>, Vec<u8>)>;

/// A table, named for the write batches that list their rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Table {
    Impression,
    ImpressionSummary,
    Click,
    ClickByImpression,
    CampaignConfig,
    Visit,
    VisitLog,
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
    ApiKey,
    TagSecret,
    SiteRegistry,
    LateDay,
    Process,
    ProcessMark,
    DeliveryLive,
    DeliverySealed,
    DeliveryWindows,
    OwnerListing,
    SiteFeatures,
    ImpressionCopy,
    OpenDay,
    ViewReport,
    EventIndex,
    ConversionCopy,
    ConversionDue,
    ConversionDueByAdvertiser,
    ConversionDueAdvertiser,
    ConversionDecision,
    Conversion,
    CampaignConversion,
    SubjectWeek,
    SubjectConversion,
    VisitorDay,
    Erasure,
    Meta,
}

impl Tables {
    pub(crate) fn get(&self, table: Table) -> &Keyspace {
        match table {
            Table::Impression => &self.impression,
            Table::ImpressionSummary => &self.impression_summary,
            Table::Click => &self.click,
            Table::ClickByImpression => &self.click_by_impression,
            Table::CampaignConfig => &self.campaign_config,
            Table::Visit => &self.visit,
            Table::VisitLog => &self.visit_log,
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
            Table::ApiKey => &self.api_key,
            Table::TagSecret => &self.tag_secret,
            Table::SiteRegistry => &self.site_registry,
            Table::LateDay => &self.late_day,
            Table::Process => &self.process,
            Table::ProcessMark => &self.process_mark,
            Table::DeliveryLive => &self.delivery_live,
            Table::DeliverySealed => &self.delivery_sealed,
            Table::DeliveryWindows => &self.delivery_windows,
            Table::OwnerListing => &self.owner_listing,
            Table::SiteFeatures => &self.site_features,
            Table::ImpressionCopy => &self.impression_copy,
            Table::OpenDay => &self.open_day,
            Table::ViewReport => &self.view_report,
            Table::EventIndex => &self.event_index,
            Table::ConversionCopy => &self.conversion_copy,
            Table::ConversionDue => &self.conversion_due,
            Table::ConversionDueByAdvertiser => &self.conversion_due_by_advertiser,
            Table::ConversionDueAdvertiser => &self.conversion_due_advertiser,
            Table::ConversionDecision => &self.conversion_decision,
            Table::Conversion => &self.conversion,
            Table::CampaignConversion => &self.campaign_conversion,
            Table::SubjectWeek => &self.subject_week,
            Table::SubjectConversion => &self.subject_conversion,
            Table::VisitorDay => &self.visitor_day,
            Table::Erasure => &self.erasure,
            Table::Meta => &self.meta,
        }
    }
}

/// Sorts an engine failure: a folder that failed a write earlier stays out of service until a
/// restart (an outage: 503, and not ready); a damaged journal is not worth a retry; anything
/// else (I/O pressure) may pass.
pub(crate) fn engine_failure(context: &str, error: Arc<fjall::Error>) -> StoreError {
    match error.as_ref() {
        // The folder is out of service until a restart, whichever writer failed first (an
        // ingestion, or the event index written beside it): callers are told to come back, as
        // for any outage, and /readyz says why.
        fjall::Error::Poisoned => StoreError::Unavailable {
            context: format!(
                "{context}: the data folder failed a write earlier; restart the server"
            ),
            source: Some(error),
        },
        fjall::Error::Unrecoverable => StoreError::Internal {
            context: format!(
                "{context}: the data folder failed a write earlier; restart the server"
            ),
            source: Some(error),
        },
        _ => StoreError::Unavailable {
            context: context.to_owned(),
            source: Some(error),
        },
    }
}

pub(crate) fn engine_error(context: &str, error: fjall::Error) -> StoreError {
    engine_failure(context, Arc::new(error))
}

/// A stored row that does not decode: a bug or a damaged folder, never worth a retry.
pub(crate) fn corrupt(context: &str) -> StoreError {
    StoreError::internal(context, Message("a stored row does not decode".into()))
}

/// Every (key, value) a scan returns, in key order.
pub(crate) type KeyValues = Vec<(fjall::Slice, fjall::Slice)>;

impl EmbeddedStore {
    /// Runs engine work off the async threads, at most [`ENGINE_CALLS_IN_FLIGHT`] at once.
    pub(super) async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Tables) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let tables = Arc::clone(&self.tables);
        // The slot goes with the work, not with this future: a caller that is slow to poll
        // the result (an export waiting on its client) must not hold an engine slot.
        let slot = Arc::clone(&self.engine_slots)
            .acquire_owned()
            .await
            .map_err(|_| StoreError::internal_message("the store is closing"))?;
        tokio::task::spawn_blocking(move || {
            let result = work(&tables);
            drop(slot);
            result
        })
        .await
        .map_err(|error| StoreError::internal("a store task failed", error))?
    }

    /// Applies `rows` (table, key, value) as one atomic batch, durable per the fsync policy;
    /// concurrent calls share a commit ([`super::committer`]).
    pub(super) async fn write(&self, context: &'static str, rows: Rows) -> Result<(), StoreError> {
        self.committer.commit(context, rows).await
    }

    /// Writes derived rows (`table`, key, value) beside the commit thread rather than through
    /// it, in batches of [`DERIVED_ROWS_PER_BATCH`], each in the journal without waiting for
    /// an fsync: what derives them is repaired from the raw rows after a crash, and every
    /// write the commit thread makes durable later in the journal makes these durable too.
    /// Small batches, because the engine applies a batch to its memtables while holding the
    /// journal: a large one would hold every ingestion's commit behind it.
    pub(super) async fn write_derived(
        &self,
        context: &'static str,
        table: Table,
        mut rows: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<(), StoreError> {
        // In key order, consecutive inserts walk the memtable's skiplist along nearly the same
        // path, which stays in the CPU's caches; random keys miss at every level.
        rows.sort_unstable_by(|(one, _), (other, _)| one.cmp(other));
        self.blocking(move |tables| {
            let keyspace = tables.get(table);
            for chunk in rows.chunks(DERIVED_ROWS_PER_BATCH) {
                let mut batch = tables.db.batch().durability(Some(PersistMode::Buffer));
                for (key, value) in chunk {
                    batch.insert(keyspace, key.as_slice(), value.as_slice());
                }
                batch
                    .commit()
                    .map_err(|error| engine_error(context, error))?;
            }
            Ok(())
        })
        .await
    }

    /// Every (key, value) from `start` on (`..end` when given) in one table, in key order.
    pub(super) async fn scan_range(
        &self,
        table: Table,
        start: Vec<u8>,
        end: Option<Vec<u8>>,
        context: &'static str,
    ) -> Result<KeyValues, StoreError> {
        self.scan_range_at_most(table, start, end, usize::MAX, context)
            .await
    }

    /// The first `limit` (key, value) pairs of [`scan_range`](Self::scan_range)'s.
    pub(super) async fn scan_range_at_most(
        &self,
        table: Table,
        start: Vec<u8>,
        end: Option<Vec<u8>>,
        limit: usize,
        context: &'static str,
    ) -> Result<KeyValues, StoreError> {
        self.blocking(move |tables| {
            let keyspace = tables.get(table);
            let rows = match end {
                Some(end) => keyspace.range(start..end),
                None => keyspace.range(start..),
            };
            pairs(rows.take(limit), context)
        })
        .await
    }

    /// The last `limit` (key, value) pairs from `start` (included) to `end` (excluded), last
    /// first.
    pub(super) async fn scan_range_newest(
        &self,
        table: Table,
        start: Vec<u8>,
        end: Vec<u8>,
        limit: usize,
        context: &'static str,
    ) -> Result<KeyValues, StoreError> {
        self.blocking(move |tables| {
            pairs(
                tables.get(table).range(start..end).rev().take(limit),
                context,
            )
        })
        .await
    }

    /// Every (key, value) under `prefix` in one table, in key order, at most `limit`.
    pub(super) async fn scan(
        &self,
        table: Table,
        prefix: Vec<u8>,
        limit: Option<usize>,
        context: &'static str,
    ) -> Result<KeyValues, StoreError> {
        self.blocking(move |tables| {
            let rows = tables.get(table).prefix(prefix);
            pairs(rows.take(limit.unwrap_or(usize::MAX)), context)
        })
        .await
    }
}

/// The (key, value) pair of each of `guards`, in their order; the first that cannot be read
/// fails them all.
fn pairs(
    guards: impl Iterator<Item = fjall::Guard>,
    context: &'static str,
) -> Result<KeyValues, StoreError> {
    guards
        .map(|guard| {
            guard
                .into_inner()
                .map_err(|error| engine_error(context, error))
        })
        .collect()
}

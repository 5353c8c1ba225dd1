//! The slices of unsealed campaign-days in the embedded store. The copies index keys each
//! stored impression copy by partition, id and time. One `open_day` table holds a
//! campaign-day's slice states, duplicate copies, slice counts by ad, each ad's users and
//! every ad's users together under the day's prefix, a kind byte apart, so a day's rows are a
//! few prefix scans (each ad's users only when asked for) and are dropped with one.

use super::committer::Removals;
use super::engine::{KeyValues, Rows, Table, corrupt};
use super::events::{click_row, summary_row};
use super::keys::{self, decode_ordered_i64, ordered_i64};
use super::rollup_keys::{campaign_day_prefix, decode_row_value, row_value};
use super::{EmbeddedStore, rows};
use crate::domain::ids::{AdId, CampaignKey, ImpressionId};
use crate::domain::partition::EventPartition;
use crate::domain::sealing::SealState;
use crate::domain::slices::{Slice, Span};
use crate::domain::time::{Day, EventTime};
use crate::domain::traffic::InvalidReason;
use crate::store::{
    ClickRow, CopyRow, ImpressionSummaryRow, OpenDayParts, OpenDayRows, RollupSlice,
    SliceAggregate, SliceAggregateRow, SliceStore, StoreError,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use uuid::Uuid;

/// Clicks of one impression read (as [`super::events`] reads them for its first click).
const MAX_CLICKS_READ: usize = 100;

/// Rows a sealed day's clean-up removes per commit.
const DELETES_PER_COMMIT: usize = 20_000;
/// Campaign (32) + day (4).
const DAY_PREFIX_LEN: usize = 36;
const STATE: u8 = b'S';
const DUPLICATE: u8 = b'D';
const AGGREGATE: u8 = b'A';
const AD_USERS: u8 = b'B';
const USERS: u8 = b'U';
/// The two cells of a slice's state, each with its own writers.
const MARKED_AT: u8 = b'M';
const AGGREGATED_FROM: u8 = b'F';

fn kind_prefix(campaign: CampaignKey, day: Day, kind: u8) -> Vec<u8> {
    let mut key = campaign_day_prefix(campaign, day);
    key.push(kind);
    key
}

fn state_key(campaign: CampaignKey, day: Day, slice: Slice, cell: u8) -> Vec<u8> {
    let mut key = kind_prefix(campaign, day, STATE);
    key.extend_from_slice(&ordered_i64(slice));
    key.push(cell);
    key
}

fn slice_prefix(campaign: CampaignKey, day: Day, kind: u8, slice: Slice) -> Vec<u8> {
    let mut key = kind_prefix(campaign, day, kind);
    key.extend_from_slice(&ordered_i64(slice));
    key
}

fn millis(value: &[u8]) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(i64::from_be_bytes(value.try_into().ok()?))
}

/// The key range of a partition's events in `span` (keys run newest first).
pub(super) fn span_range(partition: &EventPartition, span: Span) -> (Vec<u8>, Vec<u8>) {
    let prefix = keys::partition_prefix(partition);
    let mut start = prefix.clone();
    start.extend_from_slice(&ordered_i64(!(span.to.timestamp_millis() - 1)));
    let mut end = prefix;
    end.extend_from_slice(&ordered_i64(!(span.from.timestamp_millis() - 1)));
    (start, end)
}

impl EmbeddedStore {
    /// The rows of `table` in `partition` stamped within `span`: from the rows held in memory
    /// when they reach back that far (the newest seconds), else from the engine.
    pub(super) async fn scan_span(
        &self,
        table: Table,
        partition: &EventPartition,
        span: Span,
        context: &'static str,
    ) -> Result<KeyValues, StoreError> {
        let (start, end) = span_range(partition, span);
        if let Some(rows) = self
            .recent
            .range(table, span.from.timestamp_millis(), &start, &end)
        {
            metrics::counter!("adevents_embedded_span_reads_total", "from" => "memory")
                .increment(1);
            return Ok(rows);
        }
        metrics::counter!("adevents_embedded_span_reads_total", "from" => "engine").increment(1);
        self.scan_range(table, start, Some(end), context).await
    }
}

/// A copy back from its key's id and time, and its value's reason code.
fn decode_copy(id_and_time: &[u8], value: &[u8]) -> Option<CopyRow> {
    let id = Uuid::from_slice(id_and_time.get(..16)?).ok()?;
    let at = DateTime::from_timestamp_millis(decode_ordered_i64(id_and_time.get(16..24)?)?)?;
    Some(CopyRow {
        impression_id: ImpressionId::new(id),
        timestamp: EventTime::from_stored(at),
        invalid: InvalidReason::from_code(*value.first()?).ok()?,
    })
}

fn decode_open_day(rows: &[(fjall::Slice, fjall::Slice)]) -> Option<OpenDayRows> {
    let mut states: BTreeMap<Slice, SealState> = BTreeMap::new();
    let mut ad_users: BTreeMap<(Slice, Uuid), Vec<u8>> = BTreeMap::new();
    let mut day = OpenDayRows::default();
    for (key, value) in rows {
        let rest = key.get(DAY_PREFIX_LEN + 1..)?;
        let slice = || decode_ordered_i64(rest.get(..8)?);
        let ad = || Uuid::from_slice(rest.get(8..24)?).ok();
        match *key.get(DAY_PREFIX_LEN)? {
            STATE => {
                let state = states.entry(slice()?).or_default();
                match *rest.get(8)? {
                    MARKED_AT => state.late_at = Some(millis(value)?),
                    AGGREGATED_FROM => state.sealed_from = Some(millis(value)?),
                    _ => return None,
                }
            }
            DUPLICATE => day.duplicates.push(decode_copy(rest, value)?),
            AGGREGATE => {
                let (counts, value) = decode_row_value(value, 5)?;
                day.aggregates.push(SliceAggregateRow {
                    counts: RollupSlice::from_counts(slice()?, AdId::new(ad()?), counts, value),
                    users: Vec::new(),
                });
            }
            AD_USERS => {
                ad_users.insert((slice()?, ad()?), value.to_vec());
            }
            USERS => day.users.push((slice()?, value.to_vec())),
            _ => return None,
        }
    }
    for row in &mut day.aggregates {
        let key = (row.counts.slice, row.counts.ad_id.as_uuid());
        if let Some(users) = ad_users.remove(&key) {
            row.users = users;
        }
    }
    day.states = states.into_iter().collect();
    Some(day)
}

#[async_trait]
impl SliceStore for EmbeddedStore {
    fn changes(&self) -> Option<std::sync::Arc<crate::store::ChangeLog>> {
        Some(std::sync::Arc::clone(&self.changes))
    }

    async fn read_impression_summaries_between(
        &self,
        partition: &EventPartition,
        span: Span,
    ) -> Result<Vec<ImpressionSummaryRow>, StoreError> {
        const CONTEXT: &str = "reading impressions";
        let rows = self
            .scan_span(Table::ImpressionSummary, partition, span, CONTEXT)
            .await?;
        rows.iter()
            .map(|(key, value)| {
                let (at, impression_id) = keys::decode_event_key(key)?;
                summary_row(at, impression_id, value)
            })
            .map(|row| row.ok_or_else(|| corrupt(CONTEXT)))
            .collect()
    }

    async fn read_clicks_between(
        &self,
        partition: &EventPartition,
        span: Span,
    ) -> Result<Vec<ClickRow>, StoreError> {
        const CONTEXT: &str = "reading clicks";
        let rows = self
            .scan_span(Table::Click, partition, span, CONTEXT)
            .await?;
        rows.iter()
            .map(|(key, value)| {
                let (at, impression_id) = keys::decode_event_key(key)?;
                click_row(at, impression_id, value)
            })
            .map(|row| row.ok_or_else(|| corrupt(CONTEXT)))
            .collect()
    }

    async fn impression_copies(
        &self,
        partition: &EventPartition,
        ids: &[ImpressionId],
    ) -> Result<Vec<CopyRow>, StoreError> {
        const CONTEXT: &str = "reading the copies index";
        let mut ids = ids.to_vec();
        // In key order: neighbouring lookups share the engine's blocks.
        ids.sort_unstable();
        ids.dedup();
        let partition = *partition;
        self.blocking(move |tables| {
            let table = tables.get(Table::ImpressionCopy);
            let mut copies = Vec::with_capacity(ids.len());
            for id in ids {
                let stored = table
                    .get(keys::copy_prefix(&partition, id))
                    .map_err(|error| super::engine::engine_error(CONTEXT, error))?;
                let Some(stored) = stored else {
                    continue;
                };
                let entries = rows::decode_copy_entries(&stored).ok_or_else(|| corrupt(CONTEXT))?;
                for (at, code) in entries {
                    let copy = DateTime::from_timestamp_millis(at)
                        .zip(InvalidReason::from_code(code).ok())
                        .map(|(at, invalid)| CopyRow {
                            impression_id: id,
                            timestamp: EventTime::from_stored(at),
                            invalid,
                        })
                        .ok_or_else(|| corrupt(CONTEXT))?;
                    copies.push(copy);
                }
            }
            Ok(copies)
        })
        .await
    }

    async fn clicks_of(
        &self,
        campaign: CampaignKey,
        impression_id: ImpressionId,
    ) -> Result<Vec<ClickRow>, StoreError> {
        const CONTEXT: &str = "reading the click index";
        let rows = self
            .scan(
                Table::ClickByImpression,
                keys::click_index_prefix(campaign, impression_id),
                Some(MAX_CLICKS_READ),
                CONTEXT,
            )
            .await?;
        rows.iter()
            .map(|(key, value)| {
                click_row(keys::decode_click_index_time(key)?, impression_id, value)
            })
            .map(|row| row.ok_or_else(|| corrupt(CONTEXT)))
            .collect()
    }

    async fn mark_slices(
        &self,
        campaign: CampaignKey,
        day: Day,
        slices: &[Slice],
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let rows: Rows = slices
            .iter()
            .map(|slice| {
                (
                    Table::OpenDay,
                    state_key(campaign, day, *slice, MARKED_AT),
                    at.timestamp_millis().to_be_bytes().to_vec(),
                )
            })
            .collect();
        self.write("marking slices", rows).await
    }

    async fn write_duplicates(
        &self,
        campaign: CampaignKey,
        day: Day,
        copies: &[CopyRow],
    ) -> Result<(), StoreError> {
        let rows: Rows = copies
            .iter()
            .map(|copy| {
                let mut key = kind_prefix(campaign, day, DUPLICATE);
                key.extend_from_slice(copy.impression_id.as_uuid().as_bytes());
                key.extend_from_slice(&ordered_i64(copy.timestamp.epoch_millis()));
                let value = vec![copy.invalid.map_or(0, InvalidReason::code)];
                (Table::OpenDay, key, value)
            })
            .collect();
        self.write("recording duplicate impressions", rows).await?;
        self.changed(
            copies
                .iter()
                .map(|copy| (campaign, copy.timestamp.instant())),
        );
        Ok(())
    }

    async fn read_open_day(
        &self,
        campaign: CampaignKey,
        day: Day,
        parts: OpenDayParts,
    ) -> Result<OpenDayRows, StoreError> {
        const CONTEXT: &str = "reading an open day's slices";
        let kinds = match parts {
            OpenDayParts::States => vec![STATE, DUPLICATE],
            OpenDayParts::Aggregates => vec![STATE, DUPLICATE, AGGREGATE, USERS],
            OpenDayParts::AggregatesWithAdUsers => {
                vec![STATE, DUPLICATE, AGGREGATE, USERS, AD_USERS]
            }
        };
        let rows = self
            .blocking(move |tables| {
                let table = tables.get(Table::OpenDay);
                let mut rows = Vec::new();
                for kind in kinds {
                    for row in table.prefix(kind_prefix(campaign, day, kind)) {
                        rows.push(
                            row.into_inner()
                                .map_err(|error| super::engine::engine_error(CONTEXT, error))?,
                        );
                    }
                }
                Ok(rows)
            })
            .await?;
        decode_open_day(&rows).ok_or_else(|| corrupt(CONTEXT))
    }

    async fn write_slice_aggregate(
        &self,
        campaign: CampaignKey,
        day: Day,
        slice: Slice,
        aggregate: &SliceAggregate,
        read_started: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut removals: Removals = Vec::new();
        for kind in [AGGREGATE, AD_USERS] {
            let prefix = slice_prefix(campaign, day, kind, slice);
            for (key, _) in self
                .scan(Table::OpenDay, prefix, None, "reading a slice")
                .await?
            {
                removals.push((Table::OpenDay, key.to_vec()));
            }
        }
        let mut rows: Rows = Vec::with_capacity(aggregate.by_ad.len() * 2 + 2);
        for row in &aggregate.by_ad {
            let counts = &row.counts;
            let ad = counts.ad_id.as_uuid();
            let mut key = slice_prefix(campaign, day, AGGREGATE, slice);
            key.extend_from_slice(ad.as_bytes());
            let value = row_value(&counts.counts(), &counts.conversions.value);
            rows.push((Table::OpenDay, key, value));
            let mut key = slice_prefix(campaign, day, AD_USERS, slice);
            key.extend_from_slice(ad.as_bytes());
            rows.push((Table::OpenDay, key, row.users.clone()));
        }
        rows.push((
            Table::OpenDay,
            slice_prefix(campaign, day, USERS, slice),
            aggregate.users.clone(),
        ));
        // In the same atomic batch: one process owns the folder, so a later aggregate's batch
        // simply lands after an earlier one's.
        rows.push((
            Table::OpenDay,
            state_key(campaign, day, slice, AGGREGATED_FROM),
            read_started.timestamp_millis().to_be_bytes().to_vec(),
        ));
        self.committer
            .commit_replacing("writing a slice aggregate", removals, rows)
            .await
    }

    async fn delete_open_day(
        &self,
        campaign: CampaignKey,
        day: Day,
        partitions: &[EventPartition],
    ) -> Result<(), StoreError> {
        const CONTEXT: &str = "dropping an open day's slices";
        let mut prefixes = vec![(Table::OpenDay, campaign_day_prefix(campaign, day))];
        prefixes.extend(
            partitions
                .iter()
                .map(|partition| (Table::ImpressionCopy, keys::partition_prefix(partition))),
        );
        for (table, prefix) in prefixes {
            // A busy day's copies index holds millions of rows: dropped a bounded batch at a
            // time, so no commit holds them all in memory.
            loop {
                let batch = self
                    .scan(table, prefix.clone(), Some(DELETES_PER_COMMIT), CONTEXT)
                    .await?;
                if batch.is_empty() {
                    break;
                }
                let removals: Removals = batch
                    .into_iter()
                    .map(|(key, _)| (table, key.to_vec()))
                    .collect();
                self.committer
                    .commit_replacing(CONTEXT, removals, Vec::new())
                    .await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::bucket::BucketCount;
    use crate::domain::ids::{AdvertiserId, CampaignId};

    #[test]
    fn a_span_covers_exactly_its_events() {
        let partition = EventPartition {
            campaign: CampaignKey {
                advertiser_id: AdvertiserId::new(Uuid::nil()),
                campaign_id: CampaignId::new(Uuid::max()),
            },
            day: Day::new("2026-11-28".parse().expect("date")),
            bucket: BucketCount::ONE.ids().next().expect("bucket"),
        };
        let at = |text: &str| text.parse::<DateTime<Utc>>().expect("time");
        let span = Span {
            from: at("2026-11-28T10:00:00Z"),
            to: at("2026-11-28T10:15:00Z"),
        };
        let (start, end) = span_range(&partition, span);
        let key =
            |text: &str| keys::event_key(&partition, at(text), ImpressionId::new(Uuid::max()));
        let inside = |text: &str| {
            let key = key(text);
            start <= key && key < end
        };
        assert!(inside("2026-11-28T10:00:00Z"));
        assert!(inside("2026-11-28T10:14:59.999Z"));
        assert!(!inside("2026-11-28T10:15:00Z"));
        assert!(!inside("2026-11-28T09:59:59.999Z"));
    }
}

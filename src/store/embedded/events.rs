//! Impressions and clicks in the embedded store: the full and thin rows of each impression,
//! clicks and the click index, read a partition (or a page of one) at a time.

use super::committer::{Guarded, Merged};
use super::engine::{Table, corrupt, engine_error};
use super::{EmbeddedStore, keys, rows};
use crate::domain::event::{Click, Impression};
use crate::domain::ids::{AdId, CampaignKey, ImpressionId, UserId};
use crate::domain::partition::EventPartition;
use crate::domain::time::EventTime;
use crate::domain::traffic::{InvalidReason, any_valid};
use crate::domain::user_data::UserData;
use crate::store::{
    ClickRow, EventStore, ImpressionPage, ImpressionSummaryRow, PageCursor, StoreError,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};

/// Rows per page of a partition read for exports and reports.
const EXPORT_PAGE_ROWS: usize = 2_000;

/// An invalid copy's row, written only where no valid copy is stored.
fn guard((table, key, value): (Table, Vec<u8>, Vec<u8>), keeps: fn(&[u8]) -> bool) -> Guarded {
    Guarded {
        table,
        key,
        value,
        keeps,
    }
}

/// A full impression row of `partition` back from its key and value.
pub(super) fn full_impression(
    partition: &EventPartition,
    key: &[u8],
    value: &[u8],
) -> Option<Impression> {
    let (at, impression_id) = keys::decode_event_key(key)?;
    let row = rows::decode_impression_value(value)?;
    Some(Impression {
        impression_id,
        campaign: partition.campaign,
        ad_id: row.ad_id,
        user_id: row.user_id,
        timestamp: EventTime::from_stored(at),
        user_ip: row.user_ip,
        user_data: UserData::from_stored(row.user_data),
        user_agent: row.user_agent,
        invalid: row.invalid,
        // Kept in the thin row, which the view join reads.
        pixel_arrival: None,
        ip_is_viewers: true,
    })
}

/// Copies of one id kept in its copies-index row at most, the earliest: what counting needs.
const MAX_COPIES_KEPT: usize = 256;

/// An impression copy's entry in its id's copies-index row: its time, then its reason code.
fn copy_entry(event: &Impression) -> Vec<u8> {
    let mut entry = event.timestamp.epoch_millis().to_be_bytes().to_vec();
    entry.push(event.invalid.map_or(0, InvalidReason::code));
    entry
}

/// A copies-index row with `new`'s entry added: entries by time, one per time, valid if any
/// copy of that time is (a stored row that does not decode is replaced).
pub(super) fn merge_copies(stored: Option<&[u8]>, new: &[u8]) -> Vec<u8> {
    let mut entries: Vec<(i64, u8)> = stored
        .and_then(rows::decode_copy_entries)
        .unwrap_or_default();
    for (at, code) in rows::decode_copy_entries(new).unwrap_or_default() {
        match entries.binary_search_by_key(&at, |(time, _)| *time) {
            Ok(found) => {
                if code == 0 {
                    entries[found].1 = 0;
                }
            }
            Err(position) => entries.insert(position, (at, code)),
        }
    }
    entries.truncate(MAX_COPIES_KEPT);
    copies_value(&entries)
}

/// A copies-index row without the entry of the time `erased` holds (8 bytes of epoch
/// milliseconds): empty, which removes the row, once no entry remains, or when the stored row
/// does not decode (no read could use it, and it may hold the erased copy).
pub(super) fn remove_copy(stored: Option<&[u8]>, erased: &[u8]) -> Vec<u8> {
    let Ok(at) = <[u8; 8]>::try_from(erased).map(i64::from_be_bytes) else {
        return stored.unwrap_or_default().to_vec();
    };
    let mut entries = stored
        .and_then(rows::decode_copy_entries)
        .unwrap_or_default();
    entries.retain(|(time, _)| *time != at);
    copies_value(&entries)
}

fn copies_value(entries: &[(i64, u8)]) -> Vec<u8> {
    entries
        .iter()
        .flat_map(|(at, code)| at.to_be_bytes().into_iter().chain([*code]))
        .collect()
}

/// The copies-index row of one impression copy: one row per partition and id, so a lookup is
/// a point read the engine's filters answer, merged in the commit thread.
fn copy_row(partition: &EventPartition, event: &Impression) -> Merged {
    Merged {
        table: Table::ImpressionCopy,
        key: keys::copy_prefix(partition, event.impression_id),
        value: copy_entry(event),
        merge: merge_copies,
    }
}

/// A thin impression row back from its key's time and id and its value.
pub(super) fn summary_row(
    at: DateTime<Utc>,
    impression_id: ImpressionId,
    value: &[u8],
) -> Option<ImpressionSummaryRow> {
    let (ad, user) = rows::decode_two_ids(value)?;
    let (client, pixel_arrival) = rows::decode_summary_client(value)?;
    Some(ImpressionSummaryRow {
        impression_id,
        ad_id: AdId::new(ad),
        user_id: UserId::new(user),
        timestamp: EventTime::from_stored(at),
        invalid: rows::decode_summary_invalid(value)?,
        client,
        pixel_arrival,
    })
}

/// A click row back from its key's time and impression id and its value (a click-index row's
/// value has the same form, without the user agent).
pub(super) fn click_row(
    at: DateTime<Utc>,
    impression_id: ImpressionId,
    value: &[u8],
) -> Option<ClickRow> {
    let (invalid, _) = rows::decode_traffic_suffix(value.get(16..)?)?;
    Some(ClickRow {
        impression_id,
        ad_id: AdId::new(rows::decode_one_id(value)?),
        timestamp: EventTime::from_stored(at),
        invalid,
    })
}

impl EmbeddedStore {
    /// Every row of one event partition, its key's time and id decoded, the value by `decode`.
    async fn read_partition<R>(
        &self,
        table: Table,
        partition: &EventPartition,
        context: &'static str,
        decode: impl Fn(DateTime<Utc>, ImpressionId, &[u8]) -> Option<R>,
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

#[async_trait]
impl EventStore for EmbeddedStore {
    async fn write_impressions(
        &self,
        partition: &EventPartition,
        impressions: &[Impression],
    ) -> Result<Vec<EventTime>, StoreError> {
        let mut rows = Vec::with_capacity(impressions.len() * 2);
        let mut guarded = Vec::new();
        let mut copies = Vec::with_capacity(impressions.len());
        for event in impressions {
            let key = keys::event_key(partition, event.timestamp.instant(), event.impression_id);
            let full = (
                Table::Impression,
                key.clone(),
                rows::impression_value(event),
            );
            let thin = (Table::ImpressionSummary, key, rows::summary_value(event));
            copies.push(copy_row(partition, event));
            if event.invalid.is_none() {
                rows.push(full);
                if event.pixel_arrival.is_some() {
                    rows.push(thin);
                } else {
                    // A POSTed copy never replaces a valid pixel's thin row: the client that
                    // rendered the ad is the one view reports are checked against.
                    guarded.push(guard(thin, rows::summary_is_valid_pixel));
                }
            } else {
                guarded.push(guard(full, rows::impression_is_valid));
                guarded.push(guard(thin, rows::summary_is_valid));
            }
        }
        let copies = self
            .committer
            .commit_merged("writing impressions", rows, guarded, copies)
            .await?;
        // Only an id stored with more than one timestamp (a client bug) has several entries:
        // the usual single entry is passed over without decoding.
        let copies: Vec<EventTime> = copies
            .iter()
            .filter(|row| row.len() > rows::COPY_ENTRY_LEN)
            .filter_map(|row| rows::decode_copy_entries(row))
            .filter(|entries| entries.len() > 1)
            .flatten()
            .filter_map(|(millis, _)| DateTime::from_timestamp_millis(millis))
            .map(EventTime::from_stored)
            .collect();
        // A copy changes which of an id's copies counts: from the earliest of them on.
        self.changed(
            impressions
                .iter()
                .map(|event| event.timestamp)
                .chain(copies.iter().copied())
                .map(|at| (partition.campaign, at.instant())),
        );
        Ok(copies)
    }

    async fn write_clicks(
        &self,
        partition: &EventPartition,
        clicks: &[Click],
    ) -> Result<(), StoreError> {
        let mut rows = Vec::with_capacity(clicks.len() * 2);
        let mut guarded = Vec::new();
        for click in clicks {
            let mut value = click.ad_id.as_uuid().as_bytes().to_vec();
            value.extend(rows::traffic_suffix(
                click.invalid,
                click.user_agent.as_ref(),
            ));
            let key = keys::event_key(partition, click.timestamp.instant(), click.impression_id);
            let index = keys::click_index_key(
                click.campaign,
                click.impression_id,
                click.timestamp.instant(),
            );
            let row = (Table::Click, key, value.clone());
            // The index keeps the ad and the reason code, not the user agent.
            value.truncate(17);
            let index_row = (Table::ClickByImpression, index, value);
            if click.invalid.is_none() {
                rows.extend([row, index_row]);
            } else {
                guarded.push(guard(row, rows::click_is_valid));
                guarded.push(guard(index_row, rows::click_is_valid));
            }
        }
        self.committer
            .commit_guarded("writing clicks", rows, guarded)
            .await?;
        // A click moves its impression's first click only to an earlier time, and a valid one
        // can make an earlier invalid first click count as valid: from that click's time on.
        let mut changed = Vec::with_capacity(clicks.len());
        for click in clicks {
            let mut at = click.timestamp.instant();
            if click.invalid.is_none() {
                match self.first_click(click.campaign, click.impression_id).await {
                    Ok(first) => {
                        at = first.map_or(at, |first| at.min(first.timestamp.instant()));
                    }
                    Err(error) => {
                        // Stored all the same: whatever was kept of the campaign is read again.
                        self.changed([(partition.campaign, DateTime::<Utc>::MIN_UTC)]);
                        return Err(error);
                    }
                }
            }
            changed.push((partition.campaign, at));
        }
        self.changed(changed);
        Ok(())
    }

    async fn read_impression_summaries(
        &self,
        partition: &EventPartition,
    ) -> Result<Vec<ImpressionSummaryRow>, StoreError> {
        self.read_partition(
            Table::ImpressionSummary,
            partition,
            "reading impressions",
            summary_row,
        )
        .await
    }

    async fn read_impression_page(
        &self,
        partition: &EventPartition,
        cursor: Option<PageCursor>,
    ) -> Result<ImpressionPage, StoreError> {
        const CONTEXT: &str = "reading impressions";
        // Keys run newest first, so a page is read backwards from the last key returned.
        let prefix = keys::partition_prefix(partition);
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
                            .map_err(|error| engine_error(CONTEXT, error))
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
                full_impression(partition, key, value).ok_or_else(|| corrupt(CONTEXT))
            })
            .collect::<Result<_, _>>()?;
        Ok(ImpressionPage { impressions, next })
    }

    async fn read_newest_impressions(
        &self,
        partition: &EventPartition,
        limit: usize,
    ) -> Result<Vec<Impression>, StoreError> {
        const CONTEXT: &str = "reading the newest impressions";
        let rows = self
            .scan(
                Table::Impression,
                keys::partition_prefix(partition),
                Some(limit),
                CONTEXT,
            )
            .await?;
        rows.iter()
            .map(|(key, value)| {
                full_impression(partition, key, value).ok_or_else(|| corrupt(CONTEXT))
            })
            .collect()
    }

    async fn read_clicks(&self, partition: &EventPartition) -> Result<Vec<ClickRow>, StoreError> {
        self.read_partition(Table::Click, partition, "reading clicks", click_row)
            .await
    }

    async fn first_click(
        &self,
        campaign: CampaignKey,
        impression_id: ImpressionId,
    ) -> Result<Option<ClickRow>, StoreError> {
        // Oldest first: the first is the first click; the click is valid if any copy is.
        let clicks = crate::store::SliceStore::clicks_of(self, campaign, impression_id).await?;
        Ok(clicks.first().map(|first| ClickRow {
            invalid: any_valid(clicks.iter().map(|copy| copy.invalid)),
            ..*first
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(at: i64, code: u8) -> Vec<u8> {
        let mut entry = at.to_be_bytes().to_vec();
        entry.push(code);
        entry
    }

    #[test]
    fn copies_merge_by_time_and_a_valid_copy_wins() {
        let one = merge_copies(None, &entry(2_000, 1));
        let two = merge_copies(Some(&one), &entry(1_000, 0));
        let again = merge_copies(Some(&two), &entry(2_000, 0));
        assert_eq!(
            rows::decode_copy_entries(&again),
            Some(vec![(1_000, 0), (2_000, 0)])
        );
        let invalid_later = merge_copies(Some(&again), &entry(1_000, 2));
        assert_eq!(
            invalid_later, again,
            "an invalid copy never hides a valid one"
        );
        assert_eq!(
            rows::decode_copy_entries(&merge_copies(Some(b"damaged"), &entry(5, 0))),
            Some(vec![(5, 0)])
        );
    }

    #[test]
    fn erasing_a_copy_takes_out_its_time_only_and_the_last_leaves_nothing() {
        let millis = |at: i64| at.to_be_bytes();
        let two = merge_copies(
            Some(&merge_copies(None, &entry(1_000, 0))),
            &entry(2_000, 1),
        );
        let one = remove_copy(Some(&two), &millis(1_000));
        assert_eq!(rows::decode_copy_entries(&one), Some(vec![(2_000, 1)]));
        assert_eq!(
            remove_copy(Some(&one), &millis(5)),
            one,
            "another time stays"
        );
        assert!(remove_copy(Some(&one), &millis(2_000)).is_empty());
        assert!(remove_copy(None, &millis(2_000)).is_empty());
        assert!(remove_copy(Some(b"damaged"), &millis(2_000)).is_empty());
    }
}

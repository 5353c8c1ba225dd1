//! Billable impressions for delivery in the embedded store: live rows keyed by campaign, day
//! and writer, sealed totals keyed by campaign and day, beside the version of the campaign's
//! sealed totals (the campaign prefix and one byte). Each campaign's rows are one contiguous
//! key range, read by one scan; the folder has one writer, so a day a row needs no month
//! grouping to stay cheap. Window publications are keyed by campaign, window start,
//! publication time and writer; a server on this store never publishes (its folder has no
//! other process to compare with), so they are kept only for whoever writes them.

use super::EmbeddedStore;
use super::committer::Removals;
use super::engine::{Table, corrupt, engine_error};
use super::keys::{campaign_prefix, day_bytes, decode_day, decode_ordered_i64, ordered_i64};
use crate::domain::delivery::DaySlices;
use crate::domain::ids::CampaignKey;
use crate::domain::process::ProcessId;
use crate::domain::time::Day;
use crate::store::{DeliveryStore, LiveCountRow, SealedCounts, StoreError, WindowPublication};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

/// Campaign prefix (32 bytes), then the day.
fn day_key(campaign: CampaignKey, day: Day) -> Vec<u8> {
    let mut key = campaign_prefix(campaign);
    key.extend_from_slice(&day_bytes(day));
    key
}

/// A live row: campaign, day, writer.
fn live_key(campaign: CampaignKey, day: Day, writer: ProcessId) -> Vec<u8> {
    let mut key = day_key(campaign, day);
    key.extend_from_slice(writer.as_uuid().as_bytes());
    key
}

/// The version of a campaign's sealed totals: the campaign prefix and this byte, shorter
/// than any day's key.
const VERSION_SUFFIX: u8 = b'v';

fn version_key(campaign: CampaignKey) -> Vec<u8> {
    let mut key = campaign_prefix(campaign);
    key.push(VERSION_SUFFIX);
    key
}

/// A window's publications: campaign prefix, then the window's start in milliseconds.
fn window_prefix(campaign: CampaignKey, window_start: DateTime<Utc>) -> Vec<u8> {
    let mut key = campaign_prefix(campaign);
    key.extend_from_slice(&ordered_i64(window_start.timestamp_millis()));
    key
}

/// One publication: the window's prefix, the publication's milliseconds, the writer.
fn publication_key(publication: &WindowPublication) -> Vec<u8> {
    let mut key = window_prefix(publication.campaign, publication.window_start);
    key.extend_from_slice(&ordered_i64(publication.published_at.timestamp_millis()));
    key.extend_from_slice(publication.writer.as_uuid().as_bytes());
    key
}

fn decode_publication_key(key: &[u8]) -> Option<(DateTime<Utc>, ProcessId)> {
    let published_at = DateTime::from_timestamp_millis(decode_ordered_i64(key.get(40..48)?)?)?;
    let writer = ProcessId::new(Uuid::from_slice(key.get(48..64)?).ok()?);
    Some((published_at, writer))
}

fn decode_live_key(key: &[u8]) -> Option<(Day, ProcessId)> {
    let day = decode_day(key.get(32..36)?)?;
    let writer = ProcessId::new(Uuid::from_slice(key.get(36..52)?).ok()?);
    Some((day, writer))
}

#[async_trait]
impl DeliveryStore for EmbeddedStore {
    async fn write_live_counts(&self, rows: &[LiveCountRow]) -> Result<(), StoreError> {
        let rows = rows
            .iter()
            .map(|row| {
                (
                    Table::DeliveryLive,
                    live_key(row.campaign, row.day, row.writer),
                    row.slices.to_bytes(),
                )
            })
            .collect();
        self.write("writing live delivery counts", rows).await
    }

    async fn read_live_counts(
        &self,
        campaign: CampaignKey,
    ) -> Result<Vec<LiveCountRow>, StoreError> {
        const CONTEXT: &str = "reading live delivery counts";
        let rows = self
            .scan(
                Table::DeliveryLive,
                campaign_prefix(campaign),
                None,
                CONTEXT,
            )
            .await?;
        rows.iter()
            .map(|(key, value)| {
                let (day, writer) = decode_live_key(key).ok_or_else(|| corrupt(CONTEXT))?;
                Ok(LiveCountRow {
                    campaign,
                    day,
                    writer,
                    slices: DaySlices::from_bytes(value).ok_or_else(|| corrupt(CONTEXT))?,
                })
            })
            .collect()
    }

    async fn delete_live_counts(&self, campaign: CampaignKey, day: Day) -> Result<(), StoreError> {
        const CONTEXT: &str = "deleting a sealed day's live delivery counts";
        let rows = self
            .scan(Table::DeliveryLive, day_key(campaign, day), None, CONTEXT)
            .await?;
        let removals: Removals = rows
            .iter()
            .map(|(key, _)| (Table::DeliveryLive, key.to_vec()))
            .collect();
        self.committer
            .commit_replacing(CONTEXT, removals, Vec::new())
            .await
    }

    async fn write_sealed_counts(
        &self,
        campaign: CampaignKey,
        day: Day,
        slices: &DaySlices,
    ) -> Result<(), StoreError> {
        let rows = vec![
            (
                Table::DeliverySealed,
                day_key(campaign, day),
                slices.to_bytes(),
            ),
            (
                Table::DeliverySealed,
                version_key(campaign),
                Uuid::new_v4().as_bytes().to_vec(),
            ),
        ];
        // One commit: the day and the version change together.
        self.write("writing a sealed day's delivery", rows).await
    }

    async fn read_sealed_counts(&self, campaign: CampaignKey) -> Result<SealedCounts, StoreError> {
        const CONTEXT: &str = "reading sealed delivery";
        let rows = self
            .scan(
                Table::DeliverySealed,
                campaign_prefix(campaign),
                None,
                CONTEXT,
            )
            .await?;
        let mut counts = SealedCounts::default();
        for (key, value) in &rows {
            if key.len() == 33 {
                counts.version = Some(Uuid::from_slice(value).map_err(|_| corrupt(CONTEXT))?);
                continue;
            }
            let day = key
                .get(32..36)
                .and_then(decode_day)
                .ok_or_else(|| corrupt(CONTEXT))?;
            let slices = DaySlices::from_bytes(value).ok_or_else(|| corrupt(CONTEXT))?;
            counts.days.push((day, slices));
        }
        Ok(counts)
    }

    async fn sealed_version(&self, campaign: CampaignKey) -> Result<Option<Uuid>, StoreError> {
        const CONTEXT: &str = "reading the sealed delivery version";
        let key = version_key(campaign);
        // A point read: every seal rewrites this key, and a range over it would step over
        // each older version the engine still holds.
        let value = self
            .blocking(move |tables| {
                tables
                    .get(Table::DeliverySealed)
                    .get(&key)
                    .map_err(|error| engine_error(CONTEXT, error))
            })
            .await?;
        value
            .map(|value| Uuid::from_slice(&value).map_err(|_| corrupt(CONTEXT)))
            .transpose()
    }

    async fn publish_windows(&self, publications: &[WindowPublication]) -> Result<(), StoreError> {
        let rows = publications
            .iter()
            .map(|publication| {
                (
                    Table::DeliveryWindows,
                    publication_key(publication),
                    publication.packed_users(),
                )
            })
            .collect();
        self.write("publishing counted billable windows", rows)
            .await
    }

    async fn window_publications(
        &self,
        campaign: CampaignKey,
        window_start: DateTime<Utc>,
    ) -> Result<Vec<WindowPublication>, StoreError> {
        const CONTEXT: &str = "reading a billable window's publications";
        let rows = self
            .scan(
                Table::DeliveryWindows,
                window_prefix(campaign, window_start),
                None,
                CONTEXT,
            )
            .await?;
        rows.iter()
            .map(|(key, value)| {
                let (published_at, writer) =
                    decode_publication_key(key).ok_or_else(|| corrupt(CONTEXT))?;
                Ok(WindowPublication {
                    campaign,
                    window_start,
                    published_at,
                    writer,
                    users: WindowPublication::unpack_users(value)
                        .ok_or_else(|| corrupt(CONTEXT))?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::{AdvertiserId, CampaignId};

    #[test]
    fn a_live_key_decodes_to_its_day_and_writer() {
        let campaign = CampaignKey {
            advertiser_id: AdvertiserId::new(Uuid::new_v4()),
            campaign_id: CampaignId::new(Uuid::new_v4()),
        };
        let day = Day::new("2026-11-26".parse().expect("date"));
        let writer = ProcessId::random();
        assert_eq!(
            decode_live_key(&live_key(campaign, day, writer)),
            Some((day, writer))
        );
    }

    #[test]
    fn a_publication_key_decodes_to_its_time_and_writer() {
        let publication = WindowPublication {
            campaign: CampaignKey {
                advertiser_id: AdvertiserId::new(Uuid::new_v4()),
                campaign_id: CampaignId::new(Uuid::new_v4()),
            },
            window_start: "2026-11-26T10:00:40Z".parse().expect("time"),
            published_at: "2026-11-26T10:01:02.345Z".parse().expect("time"),
            writer: ProcessId::random(),
            users: Vec::new(),
        };
        assert_eq!(
            decode_publication_key(&publication_key(&publication)),
            Some((publication.published_at, publication.writer))
        );
    }
}

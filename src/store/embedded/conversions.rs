//! Conversions in the embedded store: copies under (advertiser, conversion id, arrival), the due
//! lists under (day, advertiser, due time) with the day's directory of them, one decision per conversion (written only where none is: the
//! commit thread checks and writes in one step), and decided conversions under the
//! advertiser's day and bucket and under the credited campaign's day. Values are small
//! postcard records.

use super::committer::{Guarded, Removals};
use super::engine::{Table, corrupt};
use super::{EmbeddedStore, keys, subject_keys};
use crate::domain::conversion::money::{Currency, Money};
use crate::domain::conversion::{
    Action, Attribution, AttributionKind, Conversion, ConversionId, DecidedConversion,
    ReceivedConversion, conversion_bucket,
};
use crate::domain::ids::{AdId, AdvertiserId, CampaignId, CampaignKey, ImpressionId, UserId};
use crate::domain::privacy::SubjectConversion;
use crate::domain::slices::Span;
use crate::domain::time::{Day, EventTime};
use crate::store::{
    ConversionRecord, ConversionStore, DueConversion, DueLane, DueLaneState, StoreError,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use uuid::Uuid;

/// A conversion and, once decided, its attribution, as one record.
#[derive(Serialize, Deserialize)]
struct StoredConversion {
    advertiser: Uuid,
    id: String,
    action: String,
    timestamp: i64,
    click_id: Option<Uuid>,
    impression_id: Option<Uuid>,
    user_id: Option<Uuid>,
    value: Option<(String, i64)>,
    received: i64,
    copy: Uuid,
    attribution: Option<StoredAttribution>,
}

#[derive(Serialize, Deserialize)]
struct StoredAttribution {
    kind: i8,
    campaign: Uuid,
    ad: Uuid,
    impression: Uuid,
    at: i64,
}

fn stored(conversion: &Conversion, received: DateTime<Utc>, copy: Uuid) -> StoredConversion {
    StoredConversion {
        advertiser: conversion.advertiser_id.as_uuid(),
        id: conversion.conversion_id.as_str().to_owned(),
        action: conversion.action.as_str().to_owned(),
        timestamp: conversion.timestamp.instant().timestamp_millis(),
        click_id: conversion.click_id.map(|id| id.as_uuid()),
        impression_id: conversion.impression_id.map(|id| id.as_uuid()),
        user_id: conversion.user_id.map(|id| id.as_uuid()),
        value: conversion
            .value
            .map(|money| (money.currency.code().to_owned(), money.minor)),
        received: received.timestamp_millis(),
        copy,
        attribution: None,
    }
}

fn encode_decided(decided: &DecidedConversion) -> Vec<u8> {
    let mut record = stored(&decided.conversion, decided.received, Uuid::nil());
    record.attribution = decided.attribution.map(|credit| StoredAttribution {
        kind: credit.kind.code(),
        campaign: credit.campaign_id.as_uuid(),
        ad: credit.ad_id.as_uuid(),
        impression: credit.impression_id.as_uuid(),
        at: credit.event_time.timestamp_millis(),
    });
    postcard::to_stdvec(&record).unwrap_or_default()
}

fn decode(value: &[u8]) -> Option<(ReceivedConversion, Option<Attribution>)> {
    let record: StoredConversion = postcard::from_bytes(value).ok()?;
    let value = match record.value {
        None => None,
        Some((code, minor)) => Some(Money::from_minor(Currency::from_code(&code).ok()?, minor)?),
    };
    let conversion = Conversion {
        advertiser_id: AdvertiserId::new(record.advertiser),
        conversion_id: ConversionId::new(&record.id).ok()?,
        action: Action::new(&record.action).ok()?,
        timestamp: EventTime::from_stored(DateTime::from_timestamp_millis(record.timestamp)?),
        click_id: record.click_id.map(ImpressionId::new),
        impression_id: record.impression_id.map(ImpressionId::new),
        user_id: record.user_id.map(UserId::new),
        value,
    };
    let attribution = match record.attribution {
        None => None,
        Some(credit) => Some(Attribution {
            kind: AttributionKind::from_code(credit.kind)?,
            campaign_id: CampaignId::new(credit.campaign),
            ad_id: AdId::new(credit.ad),
            impression_id: ImpressionId::new(credit.impression),
            event_time: DateTime::from_timestamp_millis(credit.at)?,
        }),
    };
    Some((
        ReceivedConversion {
            conversion,
            received: DateTime::from_timestamp_millis(record.received)?,
            copy: record.copy,
        },
        attribution,
    ))
}

fn decode_decided(value: &[u8]) -> Option<DecidedConversion> {
    let (copy, attribution) = decode(value)?;
    Some(DecidedConversion {
        conversion: copy.conversion,
        received: copy.received,
        attribution,
    })
}

/// Advertiser (16), the id's length (1) and the id.
fn conversion_prefix(advertiser: AdvertiserId, id: &ConversionId) -> Vec<u8> {
    let mut key = Vec::with_capacity(16 + 1 + id.as_str().len() + 24);
    key.extend_from_slice(advertiser.as_uuid().as_bytes());
    key.push(id.as_str().len() as u8);
    key.extend_from_slice(id.as_str().as_bytes());
    key
}

fn copy_key(copy: &ReceivedConversion) -> Vec<u8> {
    let conversion = &copy.conversion;
    let mut key = conversion_prefix(conversion.advertiser_id, &conversion.conversion_id);
    key.extend_from_slice(&keys::ordered_i64(copy.received.timestamp_millis()));
    key.extend_from_slice(copy.copy.as_bytes());
    key
}

/// The UTC day a due instant is listed under.
fn due_day(due: &DueConversion) -> Day {
    Day::new(due.due.date_naive())
}

/// An advertiser's due list of a day: the day (4), the advertiser (16).
fn due_lane_key(day: Day, advertiser: AdvertiserId) -> Vec<u8> {
    let mut key = keys::day_bytes(day).to_vec();
    key.extend_from_slice(advertiser.as_uuid().as_bytes());
    key
}

/// Beside a due list's key in the directory, the key of where it was taken through.
const DECIDED_THROUGH: u8 = 1;

/// An entry of an advertiser's due list: its list's key, the due time (8), the id.
fn due_key(due: &DueConversion) -> Vec<u8> {
    let mut key = due_lane_key(due_day(due), due.advertiser_id);
    key.extend_from_slice(&keys::ordered_i64(due.due.timestamp_millis()));
    key.extend_from_slice(due.conversion_id.as_str().as_bytes());
    key
}

fn decode_due(key: &[u8]) -> Option<DueConversion> {
    let due = keys::decode_ordered_i64(key.get(20..28)?)?;
    Some(DueConversion {
        due: DateTime::from_timestamp_millis(due)?,
        advertiser_id: AdvertiserId::new(Uuid::from_slice(key.get(4..20)?).ok()?),
        conversion_id: ConversionId::new(std::str::from_utf8(key.get(28..)?).ok()?).ok()?,
    })
}

/// An entry of the shared list releases before format 7 wrote: the due time's UTC day (4),
/// the due time (8), the advertiser (16), the id.
fn shared_due_key(due: &DueConversion) -> Vec<u8> {
    let mut key = keys::day_bytes(due_day(due)).to_vec();
    key.extend_from_slice(&keys::ordered_i64(due.due.timestamp_millis()));
    key.extend_from_slice(due.advertiser_id.as_uuid().as_bytes());
    key.extend_from_slice(due.conversion_id.as_str().as_bytes());
    key
}

fn decode_shared_due(key: &[u8]) -> Option<DueConversion> {
    let due = keys::decode_ordered_i64(key.get(4..12)?)?;
    Some(DueConversion {
        due: DateTime::from_timestamp_millis(due)?,
        advertiser_id: AdvertiserId::new(Uuid::from_slice(key.get(12..28)?).ok()?),
        conversion_id: ConversionId::new(std::str::from_utf8(key.get(28..)?).ok()?).ok()?,
    })
}

/// A directory row: a list's key (20 bytes), or that key and [`DECIDED_THROUGH`] with the
/// entry's key as its value.
fn decode_lanes(rows: &[(impl AsRef<[u8]>, impl AsRef<[u8]>)]) -> Option<Vec<DueLaneState>> {
    let mut lanes: Vec<DueLaneState> = Vec::new();
    for (key, value) in rows {
        let key = key.as_ref();
        let advertiser_id = AdvertiserId::new(Uuid::from_slice(key.get(4..20)?).ok()?);
        if lanes
            .last()
            .is_none_or(|lane| lane.advertiser_id != advertiser_id)
        {
            lanes.push(DueLaneState {
                advertiser_id,
                listed_through: None,
                decided_through: None,
            });
        }
        if key.get(20) == Some(&DECIDED_THROUGH) {
            let lane = lanes.last_mut()?;
            lane.decided_through = Some(decode_due(value.as_ref())?);
        }
    }
    Some(lanes)
}

fn advertiser_day_prefix(advertiser: AdvertiserId, day: Day, bucket: u16) -> Vec<u8> {
    let mut key = advertiser.as_uuid().as_bytes().to_vec();
    key.extend_from_slice(&keys::day_bytes(day));
    key.extend_from_slice(&bucket.to_be_bytes());
    key
}

fn campaign_day_prefix(campaign: CampaignKey, day: Day) -> Vec<u8> {
    let mut key = campaign.advertiser_id.as_uuid().as_bytes().to_vec();
    key.extend_from_slice(campaign.campaign_id.as_uuid().as_bytes());
    key.extend_from_slice(&keys::day_bytes(day));
    key
}

/// A decided conversion's clustering part: its time (8) and id.
fn decided_suffix(key: &mut Vec<u8>, conversion: &Conversion) {
    key.extend_from_slice(&keys::ordered_i64(conversion.timestamp.epoch_millis()));
    key.extend_from_slice(conversion.conversion_id.as_str().as_bytes());
}

/// Every row of a conversion as `record` found it: its copies, its decision, its decided rows
/// and its subject-index entries (the directory lines may lead to other events: they stay).
/// The campaign a decided conversion is counted for, and when: what writing or erasing it
/// changes.
pub(super) fn credited_at(decided: &DecidedConversion) -> Option<(CampaignKey, DateTime<Utc>)> {
    let inner = &decided.conversion;
    decided.campaign_id().map(|campaign_id| {
        let campaign = CampaignKey {
            advertiser_id: inner.advertiser_id,
            campaign_id,
        };
        (campaign, inner.timestamp.instant())
    })
}

pub(super) fn conversion_removals(record: &ConversionRecord) -> Removals {
    let mut removals = Removals::new();
    let mut conversions: Vec<&Conversion> = Vec::new();
    for copy in &record.copies {
        removals.push((Table::ConversionCopy, copy_key(copy)));
        conversions.push(&copy.conversion);
    }
    if let Some(decided) = &record.decision {
        let inner = &decided.conversion;
        removals.push((
            Table::ConversionDecision,
            conversion_prefix(inner.advertiser_id, &inner.conversion_id),
        ));
        let mut key = advertiser_day_prefix(
            inner.advertiser_id,
            inner.day(),
            conversion_bucket(&inner.conversion_id),
        );
        decided_suffix(&mut key, inner);
        removals.push((Table::Conversion, key));
        if let Some(campaign_id) = decided.campaign_id() {
            let campaign = CampaignKey {
                advertiser_id: inner.advertiser_id,
                campaign_id,
            };
            let mut key = campaign_day_prefix(campaign, inner.day());
            decided_suffix(&mut key, inner);
            removals.push((Table::CampaignConversion, key));
        }
        conversions.push(inner);
    }
    for entry in conversions.into_iter().filter_map(SubjectConversion::of) {
        removals.push((
            Table::SubjectConversion,
            subject_keys::subject_conversion_key(&entry),
        ));
    }
    removals
}

/// The rows of the decided conversion stored as `value` in its day's list, read back for a
/// retention sweep: its copies and decision are keyed by conversion, so no day range holds
/// them. `None` for a value that does not decode (the sweep removes the list row alone).
pub(super) async fn expired_conversion_removals(
    store: &EmbeddedStore,
    value: &[u8],
) -> Result<Option<Removals>, StoreError> {
    let Some(decided) = decode_decided(value) else {
        return Ok(None);
    };
    let conversion = &decided.conversion;
    let mut record = store
        .conversion_record(conversion.advertiser_id, &conversion.conversion_id)
        .await?;
    // Without its decision on record, the list row says where the credited campaign's row is.
    record.decision.get_or_insert(decided);
    Ok(Some(conversion_removals(&record)))
}

fn keep_any(_: &[u8]) -> bool {
    true
}

impl EmbeddedStore {
    async fn decoded_conversions(
        &self,
        prefix: Vec<u8>,
        table: Table,
        context: &'static str,
    ) -> Result<Vec<DecidedConversion>, StoreError> {
        self.scan(table, prefix, None, context)
            .await?
            .iter()
            .map(|(_, value)| decode_decided(value).ok_or_else(|| corrupt(context)))
            .collect()
    }
}

#[async_trait]
impl ConversionStore for EmbeddedStore {
    async fn write_conversion_copies(
        &self,
        copies: &[ReceivedConversion],
        due: &[DueConversion],
    ) -> Result<(), StoreError> {
        let mut rows: Vec<_> = copies
            .iter()
            .map(|copy| {
                let record = stored(&copy.conversion, copy.received, copy.copy);
                (
                    Table::ConversionCopy,
                    copy_key(copy),
                    postcard::to_stdvec(&record).unwrap_or_default(),
                )
            })
            .collect();
        let lanes: BTreeSet<Vec<u8>> = due
            .iter()
            .map(|entry| due_lane_key(due_day(entry), entry.advertiser_id))
            .collect();
        rows.extend(
            lanes
                .into_iter()
                .map(|lane| (Table::ConversionDueAdvertiser, lane, Vec::new())),
        );
        rows.extend(
            due.iter()
                .map(|entry| (Table::ConversionDueByAdvertiser, due_key(entry), Vec::new())),
        );
        // In the copies' commit: a conversion is findable by its user exactly when stored.
        for entry in copies
            .iter()
            .filter_map(|copy| SubjectConversion::of(&copy.conversion))
        {
            rows.push((
                Table::SubjectWeek,
                subject_keys::subject_week_key(&entry.line()),
                Vec::new(),
            ));
            rows.push((
                Table::SubjectConversion,
                subject_keys::subject_conversion_key(&entry),
                Vec::new(),
            ));
        }
        self.write("writing conversions", rows).await
    }

    /// Without the latest due time listed: reading a list that holds nothing new is one
    /// range read in this process, cheaper than keeping that time up to date.
    async fn due_lanes(&self, day: Day) -> Result<Vec<DueLaneState>, StoreError> {
        const CONTEXT: &str = "reading the due lists";
        let start = keys::day_bytes(day).to_vec();
        let end = keys::day_bytes(day.next()).to_vec();
        let rows = self
            .scan_range(Table::ConversionDueAdvertiser, start, Some(end), CONTEXT)
            .await?;
        decode_lanes(&rows).ok_or_else(|| corrupt(CONTEXT))
    }

    async fn due_conversions(
        &self,
        day: Day,
        lane: DueLane,
        after: Option<&DueConversion>,
        until: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<DueConversion>, StoreError> {
        const CONTEXT: &str = "reading due conversions";
        let (table, prefix, key_of, decode): (_, _, fn(&DueConversion) -> Vec<u8>, _) = match lane {
            DueLane::Advertiser(advertiser) => (
                Table::ConversionDueByAdvertiser,
                due_lane_key(day, advertiser),
                due_key,
                decode_due as fn(&[u8]) -> Option<DueConversion>,
            ),
            DueLane::Shared => (
                Table::ConversionDue,
                keys::day_bytes(day).to_vec(),
                shared_due_key,
                decode_shared_due as fn(&[u8]) -> Option<DueConversion>,
            ),
        };
        let start = match after {
            // Just past `after`'s key.
            Some(after) => {
                let mut key = key_of(after);
                key.push(0);
                key
            }
            None => prefix.clone(),
        };
        let mut end = prefix;
        end.extend_from_slice(&keys::ordered_i64(
            until.timestamp_millis().saturating_add(1),
        ));
        if start >= end {
            return Ok(Vec::new());
        }
        let rows = self
            .scan_range_at_most(table, start, Some(end), limit, CONTEXT)
            .await?;
        rows.iter()
            .map(|(key, _)| decode(key).ok_or_else(|| corrupt(CONTEXT)))
            .collect()
    }

    async fn remove_due(&self, lane: DueLane, taken: &[DueConversion]) -> Result<(), StoreError> {
        let Some(last) = taken.last() else {
            return Ok(());
        };
        let (table, key_of): (_, fn(&DueConversion) -> Vec<u8>) = match lane {
            DueLane::Advertiser(_) => (Table::ConversionDueByAdvertiser, due_key),
            DueLane::Shared => (Table::ConversionDue, shared_due_key),
        };
        let removals = taken.iter().map(|entry| (table, key_of(entry))).collect();
        let mut rows = Vec::new();
        if let DueLane::Advertiser(advertiser) = lane {
            let mut key = due_lane_key(due_day(last), advertiser);
            key.push(DECIDED_THROUGH);
            rows.push((Table::ConversionDueAdvertiser, key, due_key(last)));
        }
        self.committer
            .commit_replacing("removing due conversions", removals, rows)
            .await
    }

    async fn conversion_record(
        &self,
        advertiser: AdvertiserId,
        id: &ConversionId,
    ) -> Result<ConversionRecord, StoreError> {
        const CONTEXT: &str = "reading a conversion";
        let prefix = conversion_prefix(advertiser, id);
        let copies = self
            .scan(Table::ConversionCopy, prefix.clone(), None, CONTEXT)
            .await?
            .iter()
            // A longer id sharing this prefix has another length byte, so every row is ours.
            .map(|(_, value)| {
                decode(value)
                    .map(|(copy, _)| copy)
                    .ok_or_else(|| corrupt(CONTEXT))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let decision = self
            .blocking(move |tables| {
                tables
                    .get(Table::ConversionDecision)
                    .get(&prefix)
                    .map_err(|error| super::engine::engine_error(CONTEXT, error))
            })
            .await?
            .map(|value| decode_decided(&value).ok_or_else(|| corrupt(CONTEXT)))
            .transpose()?;
        Ok(ConversionRecord { copies, decision })
    }

    async fn decide_conversion(
        &self,
        decided: &DecidedConversion,
    ) -> Result<DecidedConversion, StoreError> {
        let conversion = &decided.conversion;
        let key = conversion_prefix(conversion.advertiser_id, &conversion.conversion_id);
        self.committer
            .commit_guarded(
                "deciding a conversion",
                Vec::new(),
                vec![Guarded {
                    table: Table::ConversionDecision,
                    key,
                    value: encode_decided(decided),
                    keeps: keep_any,
                }],
            )
            .await?;
        self.conversion_record(conversion.advertiser_id, &conversion.conversion_id)
            .await?
            .decision
            .ok_or_else(|| corrupt("reading a decision back"))
    }

    async fn write_decided(&self, decided: &[DecidedConversion]) -> Result<(), StoreError> {
        let mut rows = Vec::with_capacity(decided.len() * 2);
        for conversion in decided {
            let value = encode_decided(conversion);
            let inner = &conversion.conversion;
            let mut key = advertiser_day_prefix(
                inner.advertiser_id,
                inner.day(),
                conversion_bucket(&inner.conversion_id),
            );
            decided_suffix(&mut key, inner);
            rows.push((Table::Conversion, key, value.clone()));
            if let Some(campaign_id) = conversion.campaign_id() {
                let campaign = CampaignKey {
                    advertiser_id: inner.advertiser_id,
                    campaign_id,
                };
                let mut key = campaign_day_prefix(campaign, inner.day());
                decided_suffix(&mut key, inner);
                rows.push((Table::CampaignConversion, key, value));
            }
        }
        self.write("writing decided conversions", rows).await?;
        self.changed(decided.iter().filter_map(credited_at));
        Ok(())
    }

    async fn read_advertiser_conversions(
        &self,
        advertiser: AdvertiserId,
        day: Day,
        bucket: u16,
    ) -> Result<Vec<DecidedConversion>, StoreError> {
        self.decoded_conversions(
            advertiser_day_prefix(advertiser, day, bucket),
            Table::Conversion,
            "reading an advertiser's conversions",
        )
        .await
    }

    async fn read_campaign_conversions(
        &self,
        campaign: CampaignKey,
        day: Day,
        within: Span,
    ) -> Result<Vec<DecidedConversion>, StoreError> {
        const CONTEXT: &str = "reading a campaign's conversions";
        // Keys run oldest first by the conversion's time, then its id.
        let at = |instant: DateTime<Utc>| {
            let mut key = campaign_day_prefix(campaign, day);
            key.extend_from_slice(&keys::ordered_i64(instant.timestamp_millis()));
            key
        };
        self.scan_range(
            Table::CampaignConversion,
            at(within.from),
            Some(at(within.to)),
            CONTEXT,
        )
        .await?
        .iter()
        .map(|(_, value)| decode_decided(value).ok_or_else(|| corrupt(CONTEXT)))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::embedded::Fsync;

    fn credited(campaign: CampaignKey, id: &str, at: DateTime<Utc>) -> DecidedConversion {
        DecidedConversion {
            conversion: Conversion {
                advertiser_id: campaign.advertiser_id,
                conversion_id: ConversionId::new(id).expect("an id"),
                action: Action::new("purchase").expect("an action"),
                timestamp: EventTime::from_stored(at),
                click_id: None,
                impression_id: Some(ImpressionId::new(Uuid::from_u128(9))),
                user_id: None,
                value: None,
            },
            received: at,
            attribution: Some(Attribution {
                kind: AttributionKind::PostView,
                campaign_id: campaign.campaign_id,
                ad_id: AdId::new(Uuid::from_u128(8)),
                impression_id: ImpressionId::new(Uuid::from_u128(9)),
                event_time: at,
            }),
        }
    }

    /// A poll of today's newest seconds reads their conversions, not the day's: the read is a
    /// range of the time-ordered keys, its start included and its end not.
    #[tokio::test]
    async fn a_campaigns_conversions_are_read_by_time_within_the_span() {
        let folder = tempfile::tempdir().expect("temp dir");
        let store = EmbeddedStore::open_for_test(folder.path(), Fsync::Always);
        let campaign = CampaignKey {
            advertiser_id: AdvertiserId::new(Uuid::from_u128(1)),
            campaign_id: CampaignId::new(Uuid::from_u128(2)),
        };
        let at = |text: &str| -> DateTime<Utc> { text.parse().expect("an instant") };
        let span = Span {
            from: at("2026-11-28T10:00:00Z"),
            to: at("2026-11-28T10:00:02Z"),
        };
        let decided = [
            credited(campaign, "before", at("2026-11-28T09:59:59.999Z")),
            credited(campaign, "at-start", span.from),
            credited(campaign, "inside", at("2026-11-28T10:00:01.999Z")),
            credited(campaign, "at-end", span.to),
            credited(campaign, "z-after", at("2026-11-28T23:00:00Z")),
        ];
        store.write_decided(&decided).await.expect("written");
        let day = Day::new(span.from.date_naive());
        let ids = |read: Vec<DecidedConversion>| -> Vec<String> {
            read.iter()
                .map(|decided| decided.conversion.conversion_id.as_str().to_owned())
                .collect()
        };
        let within = store
            .read_campaign_conversions(campaign, day, span)
            .await
            .expect("read");
        assert_eq!(ids(within), ["at-start", "inside"]);
        let whole = store
            .read_campaign_conversions(campaign, day, Span::of_day(day))
            .await
            .expect("read");
        assert_eq!(
            ids(whole),
            ["before", "at-start", "inside", "at-end", "z-after"]
        );
    }

    fn due(advertiser: u128, at: &str, id: &str) -> DueConversion {
        DueConversion {
            due: at.parse().expect("an instant"),
            advertiser_id: AdvertiserId::new(Uuid::from_u128(advertiser)),
            conversion_id: ConversionId::new(id).expect("an id"),
        }
    }

    #[test]
    fn due_entries_read_back_from_either_lists_keys() {
        let entry = due(7, "2026-11-28T23:59:59.999Z", "order-17");
        assert_eq!(decode_due(&due_key(&entry)), Some(entry.clone()));
        assert_eq!(
            decode_shared_due(&shared_due_key(&entry)),
            Some(entry.clone())
        );
        // Listed under its own UTC day, its advertiser's list, by due time.
        let later = due(7, "2026-11-28T23:59:59.999Z", "order-18");
        let other = due(6, "2026-11-28T23:59:59.999Z", "order-1");
        assert!(due_key(&entry) < due_key(&later));
        assert!(due_key(&other) < due_key(&entry));
        assert!(due_key(&entry).starts_with(&due_lane_key(
            Day::new("2026-11-28".parse().expect("a date")),
            entry.advertiser_id
        )));
    }

    #[test]
    fn the_directory_gives_each_list_once_with_where_it_was_taken_through() {
        let day = Day::new("2026-11-28".parse().expect("a date"));
        let (a, b) = (
            AdvertiserId::new(Uuid::from_u128(1)),
            AdvertiserId::new(Uuid::from_u128(2)),
        );
        let taken = due(1, "2026-11-28T10:00:00Z", "order-1");
        let mut through = due_lane_key(day, a);
        through.push(DECIDED_THROUGH);
        let rows = vec![
            (due_lane_key(day, a), Vec::new()),
            (through, due_key(&taken)),
            (due_lane_key(day, b), Vec::new()),
        ];
        let lanes = decode_lanes(&rows).expect("decoded");
        assert_eq!(
            lanes,
            [
                DueLaneState {
                    advertiser_id: a,
                    listed_through: None,
                    decided_through: Some(taken),
                },
                DueLaneState {
                    advertiser_id: b,
                    listed_through: None,
                    decided_through: None,
                },
            ]
        );
    }
}

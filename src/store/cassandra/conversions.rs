//! Conversions on Cassandra (`migrations/0015_conversions.cql`): `conversion_copy` (a
//! partition per conversion, a row per copy received), the due lists (`due_lists`),
//! `conversion_decision` (one row per
//! conversion, written with a lightweight transaction so the first decision wins on every
//! process), and the decided conversions by advertiser day and bucket (`conversion`) and by
//! credited campaign and day (`campaign_conversion`).
//!
//! The decision and the two decided tables keep the same columns, read by one row type; a
//! copy keeps the same conversion cells. Optional cells are written unset, never null, so no
//! write leaves a tombstone.

use super::CassandraStore;
use super::config::KeyspaceName;
use super::errors::decode_error;
use super::event_writes::set_or_unset;
use super::statements::{execute_each, failed, prepare_all, read_all, read_one};
use crate::domain::conversion::money::{Currency, Money};
use crate::domain::conversion::{
    Action, Attribution, AttributionKind, Conversion, ConversionId, DecidedConversion,
    ReceivedConversion, conversion_bucket,
};
use crate::domain::ids::{AdId, AdvertiserId, CampaignId, CampaignKey, ImpressionId, UserId};
use crate::domain::slices::Span;
use crate::domain::time::{Day, EventTime};
use crate::store::error::Message;
use crate::store::{
    ConversionRecord, ConversionStore, DueConversion, DueLane, DueLaneState, StoreError,
};
use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::{Consistency, SerialConsistency};
use scylla::value::{MaybeUnset, Row};
use scylla::{DeserializeRow, SerializeRow};
use uuid::Uuid;

/// Rows written at once by one call.
const ROWS_IN_FLIGHT: usize = 64;

/// A conversion's cells, in every table that keeps one, in this order.
const CONVERSION_COLUMNS: &str =
    "received, action, timestamp, click_id, impression_id, user_id, value_minor, currency";
/// What a decision credits, except its campaign (a partition key column of
/// `campaign_conversion`, bound on its own elsewhere).
const CREDIT_COLUMNS: &str = "kind, ad_id, credited_impression, credited_at";

pub(crate) struct ConversionStatements {
    insert_copy: PreparedStatement,
    select_copies: PreparedStatement,
    /// `INSERT … IF NOT EXISTS`, with serial consistency `SERIAL`.
    decide: PreparedStatement,
    select_decision: PreparedStatement,
    /// The same read at consistency `SERIAL`: it sees the decision a lost transaction met.
    select_decision_serial: PreparedStatement,
    insert_conversion: PreparedStatement,
    select_conversions: PreparedStatement,
    insert_campaign_conversion: PreparedStatement,
    select_campaign_conversions: PreparedStatement,
}

/// `count` bind markers.
fn markers(count: usize) -> String {
    vec!["?"; count].join(", ")
}

impl ConversionStatements {
    pub(crate) async fn prepare(
        session: &Session,
        keyspace: &KeyspaceName,
    ) -> Result<Self, StoreError> {
        let decided_columns =
            format!("conversion_id, {CONVERSION_COLUMNS}, campaign_id, {CREDIT_COLUMNS}");
        let [
            insert_copy,
            select_copies,
            mut decide,
            select_decision,
            insert_conversion,
            select_conversions,
            insert_campaign_conversion,
            select_campaign_conversions,
        ] = prepare_all(
            session,
            [
                format!(
                    "INSERT INTO {keyspace}.conversion_copy (advertiser_id, conversion_id, copy_id, \
                     {CONVERSION_COLUMNS}) VALUES ({}) USING TTL ?",
                    markers(11)
                ),
                format!(
                    "SELECT copy_id, {CONVERSION_COLUMNS} FROM {keyspace}.conversion_copy \
                     WHERE advertiser_id = ? AND conversion_id = ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.conversion_decision (advertiser_id, conversion_id, \
                     {CONVERSION_COLUMNS}, campaign_id, {CREDIT_COLUMNS}) VALUES ({}) IF NOT EXISTS \
                     USING TTL ?",
                    markers(15)
                ),
                format!(
                    "SELECT {decided_columns} FROM {keyspace}.conversion_decision \
                     WHERE advertiser_id = ? AND conversion_id = ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.conversion (advertiser_id, day, bucket_id, conversion_id, \
                     {CONVERSION_COLUMNS}, campaign_id, {CREDIT_COLUMNS}) VALUES ({}) USING TTL ?",
                    markers(17)
                ),
                format!(
                    "SELECT {decided_columns} FROM {keyspace}.conversion \
                     WHERE advertiser_id = ? AND day = ? AND bucket_id = ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.campaign_conversion (advertiser_id, campaign_id, day, \
                     conversion_id, {CONVERSION_COLUMNS}, {CREDIT_COLUMNS}) VALUES ({}) USING TTL ?",
                    markers(16)
                ),
                format!(
                    "SELECT {decided_columns} FROM {keyspace}.campaign_conversion \
                     WHERE advertiser_id = ? AND campaign_id = ? AND day = ? \
                     AND timestamp >= ? AND timestamp < ?"
                ),
            ],
        )
        .await?;
        // SERIAL, not the driver's default LOCAL_SERIAL: with processes in several datacentres,
        // two local Paxos rounds could each record a decision. Retrying the transaction is
        // harmless (a retry that meets its own first attempt's row reads it back), so it stays
        // marked idempotent.
        decide.set_serial_consistency(Some(SerialConsistency::Serial));
        let mut select_decision_serial = select_decision.clone();
        select_decision_serial.set_consistency(Consistency::Serial);
        Ok(Self {
            insert_copy,
            select_copies,
            decide,
            select_decision,
            select_decision_serial,
            insert_conversion,
            select_conversions,
            insert_campaign_conversion,
            select_campaign_conversions,
        })
    }
}

/// A conversion's cells ([`CONVERSION_COLUMNS`]) as bound, unset where there is no value.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct ConversionCells<'a> {
    received: DateTime<Utc>,
    action: &'a str,
    timestamp: DateTime<Utc>,
    click_id: MaybeUnset<Uuid>,
    impression_id: MaybeUnset<Uuid>,
    user_id: MaybeUnset<Uuid>,
    value_minor: MaybeUnset<i64>,
    currency: MaybeUnset<&'static str>,
}

impl<'a> ConversionCells<'a> {
    fn of(conversion: &'a Conversion, received: DateTime<Utc>) -> Self {
        Self {
            received,
            action: conversion.action.as_str(),
            timestamp: conversion.timestamp.instant(),
            click_id: set_or_unset(conversion.click_id.map(|id| id.as_uuid())),
            impression_id: set_or_unset(conversion.impression_id.map(|id| id.as_uuid())),
            user_id: set_or_unset(conversion.user_id.map(|id| id.as_uuid())),
            value_minor: set_or_unset(conversion.value.map(|value| value.minor)),
            currency: set_or_unset(conversion.value.map(|value| value.currency.code())),
        }
    }
}

/// What a decision credits ([`CREDIT_COLUMNS`]), all unset when unattributed.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct CreditCells {
    kind: MaybeUnset<i8>,
    ad_id: MaybeUnset<Uuid>,
    credited_impression: MaybeUnset<Uuid>,
    credited_at: MaybeUnset<DateTime<Utc>>,
}

impl CreditCells {
    fn of(attribution: Option<Attribution>) -> Self {
        Self {
            kind: set_or_unset(attribution.map(|credit| credit.kind.code())),
            ad_id: set_or_unset(attribution.map(|credit| credit.ad_id.as_uuid())),
            credited_impression: set_or_unset(
                attribution.map(|credit| credit.impression_id.as_uuid()),
            ),
            credited_at: set_or_unset(attribution.map(|credit| credit.event_time)),
        }
    }
}

/// The bound values of a `conversion_copy` insert.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct CopyValues<'a> {
    advertiser_id: Uuid,
    conversion_id: &'a str,
    copy_id: Uuid,
    #[scylla(flatten)]
    conversion: ConversionCells<'a>,
    ttl: i32,
}

impl<'a> CopyValues<'a> {
    fn new(copy: &'a ReceivedConversion, ttl: i32) -> Self {
        let conversion = &copy.conversion;
        Self {
            advertiser_id: conversion.advertiser_id.as_uuid(),
            conversion_id: conversion.conversion_id.as_str(),
            copy_id: copy.copy,
            conversion: ConversionCells::of(conversion, copy.received),
            ttl,
        }
    }
}

/// The bound values of the `conversion_decision` transaction.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct DecisionValues<'a> {
    advertiser_id: Uuid,
    conversion_id: &'a str,
    #[scylla(flatten)]
    conversion: ConversionCells<'a>,
    campaign_id: MaybeUnset<Uuid>,
    #[scylla(flatten)]
    credit: CreditCells,
    ttl: i32,
}

impl<'a> DecisionValues<'a> {
    fn new(decided: &'a DecidedConversion, ttl: i32) -> Self {
        let conversion = &decided.conversion;
        Self {
            advertiser_id: conversion.advertiser_id.as_uuid(),
            conversion_id: conversion.conversion_id.as_str(),
            conversion: ConversionCells::of(conversion, decided.received),
            campaign_id: set_or_unset(decided.campaign_id().map(|id| id.as_uuid())),
            credit: CreditCells::of(decided.attribution),
            ttl,
        }
    }
}

/// The bound values of a `conversion` insert: the advertiser's day and bucket.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct DayValues<'a> {
    advertiser_id: Uuid,
    day: NaiveDate,
    bucket_id: i16,
    conversion_id: &'a str,
    #[scylla(flatten)]
    conversion: ConversionCells<'a>,
    campaign_id: MaybeUnset<Uuid>,
    #[scylla(flatten)]
    credit: CreditCells,
    ttl: i32,
}

impl<'a> DayValues<'a> {
    fn new(decided: &'a DecidedConversion, ttl: i32) -> Self {
        let conversion = &decided.conversion;
        Self {
            advertiser_id: conversion.advertiser_id.as_uuid(),
            day: conversion.day().date(),
            // Below CONVERSION_BUCKETS (16) by construction.
            bucket_id: conversion_bucket(&conversion.conversion_id) as i16,
            conversion_id: conversion.conversion_id.as_str(),
            conversion: ConversionCells::of(conversion, decided.received),
            campaign_id: set_or_unset(decided.campaign_id().map(|id| id.as_uuid())),
            credit: CreditCells::of(decided.attribution),
            ttl,
        }
    }
}

/// The bound values of a `campaign_conversion` insert: the credited campaign's day.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct CampaignDayValues<'a> {
    advertiser_id: Uuid,
    campaign_id: Uuid,
    day: NaiveDate,
    conversion_id: &'a str,
    #[scylla(flatten)]
    conversion: ConversionCells<'a>,
    #[scylla(flatten)]
    credit: CreditCells,
    ttl: i32,
}

impl<'a> CampaignDayValues<'a> {
    fn new(decided: &'a DecidedConversion, campaign: CampaignId, ttl: i32) -> Self {
        let conversion = &decided.conversion;
        Self {
            advertiser_id: conversion.advertiser_id.as_uuid(),
            campaign_id: campaign.as_uuid(),
            day: conversion.day().date(),
            conversion_id: conversion.conversion_id.as_str(),
            conversion: ConversionCells::of(conversion, decided.received),
            credit: CreditCells::of(decided.attribution),
            ttl,
        }
    }
}

/// A conversion's cells as read back, before they are checked.
struct StoredCells {
    action: Option<String>,
    timestamp: Option<DateTime<Utc>>,
    click_id: Option<Uuid>,
    impression_id: Option<Uuid>,
    user_id: Option<Uuid>,
    value_minor: Option<i64>,
    currency: Option<String>,
}

/// A value read back: both cells or neither.
fn value_of(minor: Option<i64>, currency: Option<&str>) -> Result<Option<Money>, String> {
    match (minor, currency) {
        (None, None) => Ok(None),
        (Some(minor), Some(code)) => {
            let currency =
                Currency::from_code(code).map_err(|_| format!("unknown currency {code:?}"))?;
            Money::from_minor(currency, minor)
                .map(Some)
                .ok_or_else(|| format!("negative value {minor}"))
        }
        _ => Err("a value without its currency, or a currency without a value".to_owned()),
    }
}

/// The conversion `id` of `advertiser` whose cells were read back.
fn conversion_of(
    advertiser: AdvertiserId,
    id: &str,
    cells: StoredCells,
) -> Result<Conversion, String> {
    let conversion_id = ConversionId::new(id).map_err(|why| format!("conversion id {why}"))?;
    let action = cells.action.ok_or("no action")?;
    let action = Action::new(&action).map_err(|why| format!("action {why}"))?;
    let timestamp = cells.timestamp.ok_or("no timestamp")?;
    if cells.click_id.is_none() && cells.impression_id.is_none() && cells.user_id.is_none() {
        return Err("names neither an impression nor a user".to_owned());
    }
    Ok(Conversion {
        advertiser_id: advertiser,
        conversion_id,
        action,
        timestamp: EventTime::from_stored(timestamp),
        click_id: cells.click_id.map(ImpressionId::new),
        impression_id: cells.impression_id.map(ImpressionId::new),
        user_id: cells.user_id.map(UserId::new),
        value: value_of(cells.value_minor, cells.currency.as_deref())?,
    })
}

/// What a decision credits, as read back: nothing when `kind` is null.
struct StoredCredit {
    kind: Option<i8>,
    campaign_id: Option<Uuid>,
    ad_id: Option<Uuid>,
    credited_impression: Option<Uuid>,
    credited_at: Option<DateTime<Utc>>,
}

fn attribution_of(credit: StoredCredit) -> Result<Option<Attribution>, String> {
    let Some(code) = credit.kind else {
        return Ok(None);
    };
    let kind =
        AttributionKind::from_code(code).ok_or_else(|| format!("unknown attribution {code}"))?;
    let missing = || format!("a {} attribution without its credited event", kind.name());
    Ok(Some(Attribution {
        kind,
        campaign_id: CampaignId::new(credit.campaign_id.ok_or_else(missing)?),
        ad_id: AdId::new(credit.ad_id.ok_or_else(missing)?),
        impression_id: ImpressionId::new(credit.credited_impression.ok_or_else(missing)?),
        event_time: credit.credited_at.ok_or_else(missing)?,
    }))
}

/// A row of `conversion_copy`.
#[derive(DeserializeRow)]
struct StoredCopy {
    copy_id: Uuid,
    received: DateTime<Utc>,
    action: Option<String>,
    timestamp: Option<DateTime<Utc>>,
    click_id: Option<Uuid>,
    impression_id: Option<Uuid>,
    user_id: Option<Uuid>,
    value_minor: Option<i64>,
    currency: Option<String>,
}

impl StoredCopy {
    fn into_copy(self, advertiser: AdvertiserId, id: &str) -> Result<ReceivedConversion, String> {
        let cells = StoredCells {
            action: self.action,
            timestamp: self.timestamp,
            click_id: self.click_id,
            impression_id: self.impression_id,
            user_id: self.user_id,
            value_minor: self.value_minor,
            currency: self.currency,
        };
        Ok(ReceivedConversion {
            conversion: conversion_of(advertiser, id, cells)?,
            received: self.received,
            copy: self.copy_id,
        })
    }
}

/// A row of `conversion_decision`, `conversion` or `campaign_conversion` (the same columns).
#[derive(DeserializeRow)]
struct StoredDecided {
    conversion_id: String,
    received: Option<DateTime<Utc>>,
    action: Option<String>,
    timestamp: Option<DateTime<Utc>>,
    click_id: Option<Uuid>,
    impression_id: Option<Uuid>,
    user_id: Option<Uuid>,
    value_minor: Option<i64>,
    currency: Option<String>,
    campaign_id: Option<Uuid>,
    kind: Option<i8>,
    ad_id: Option<Uuid>,
    credited_impression: Option<Uuid>,
    credited_at: Option<DateTime<Utc>>,
}

impl StoredDecided {
    fn into_decided(self, advertiser: AdvertiserId) -> Result<DecidedConversion, String> {
        let received = self.received.ok_or("no received time")?;
        let cells = StoredCells {
            action: self.action,
            timestamp: self.timestamp,
            click_id: self.click_id,
            impression_id: self.impression_id,
            user_id: self.user_id,
            value_minor: self.value_minor,
            currency: self.currency,
        };
        let credit = StoredCredit {
            kind: self.kind,
            campaign_id: self.campaign_id,
            ad_id: self.ad_id,
            credited_impression: self.credited_impression,
            credited_at: self.credited_at,
        };
        Ok(DecidedConversion {
            conversion: conversion_of(advertiser, &self.conversion_id, cells)?,
            received,
            attribution: attribution_of(credit)?,
        })
    }
}

/// A row that does not decode: the schema and this build disagree, or the row is damaged.
fn corrupt(context: &'static str, what: &str, why: String) -> StoreError {
    // Ids are at most 64 characters, so the message stays short.
    decode_error(context, Message(format!("{what}: {why}")))
}

fn decode_decided(
    rows: Vec<StoredDecided>,
    advertiser: AdvertiserId,
    context: &'static str,
) -> Result<Vec<DecidedConversion>, StoreError> {
    rows.into_iter()
        .map(|row| {
            let id = row.conversion_id.clone();
            row.into_decided(advertiser)
                .map_err(|why| corrupt(context, &format!("conversion {id:.64}"), why))
        })
        .collect()
}

impl CassandraStore {
    async fn conversion_statements(&self) -> Result<&ConversionStatements, StoreError> {
        Ok(&self.prepared().await?.conversions)
    }
}

#[async_trait]
impl ConversionStore for CassandraStore {
    async fn write_conversion_copies(
        &self,
        copies: &[ReceivedConversion],
        due: &[DueConversion],
    ) -> Result<(), StoreError> {
        let statements = self.conversion_statements().await?;
        // First: a stored conversion is never out of an erasure's reach.
        let conversions: Vec<_> = copies.iter().map(|copy| &copy.conversion).collect();
        self.write_subject_conversions(&conversions).await?;
        let copies_written = execute_each(
            &self.session,
            &statements.insert_copy,
            copies,
            ROWS_IN_FLIGHT,
            // Every row of a conversion expires with its own UTC day, as raw events do.
            |copy| CopyValues::new(copy, self.raw_ttl(copy.conversion.day())),
            "writing conversion copies",
        );
        futures::try_join!(copies_written, self.list_due(due))?;
        Ok(())
    }

    async fn due_lanes(&self, day: Day) -> Result<Vec<DueLaneState>, StoreError> {
        self.due_lanes_of(day).await
    }

    async fn due_conversions(
        &self,
        day: Day,
        lane: DueLane,
        after: Option<&DueConversion>,
        until: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<DueConversion>, StoreError> {
        self.due_entries(day, lane, after, until, limit).await
    }

    async fn remove_due(&self, lane: DueLane, taken: &[DueConversion]) -> Result<(), StoreError> {
        self.unlist_due(lane, taken).await
    }

    async fn conversion_record(
        &self,
        advertiser: AdvertiserId,
        id: &ConversionId,
    ) -> Result<ConversionRecord, StoreError> {
        const CONTEXT: &str = "reading a conversion";
        let statements = self.conversion_statements().await?;
        let key = (advertiser.as_uuid(), id.as_str());
        let copies = read_all::<StoredCopy>(&self.session, &statements.select_copies, key, CONTEXT);
        let decision =
            read_one::<StoredDecided>(&self.session, &statements.select_decision, key, CONTEXT);
        let (copies, decision) = futures::try_join!(copies, decision)?;
        let what = || format!("conversion {id}");
        let copies = copies
            .into_iter()
            .map(|row| {
                row.into_copy(advertiser, id.as_str())
                    .map_err(|why| corrupt(CONTEXT, &what(), why))
            })
            .collect::<Result<_, _>>()?;
        let decision = decision
            .map(|row| {
                row.into_decided(advertiser)
                    .map_err(|why| corrupt(CONTEXT, &what(), why))
            })
            .transpose()?;
        Ok(ConversionRecord { copies, decision })
    }

    async fn decide_conversion(
        &self,
        decided: &DecidedConversion,
    ) -> Result<DecidedConversion, StoreError> {
        const CONTEXT: &str = "deciding a conversion";
        let statements = self.conversion_statements().await?;
        let conversion = &decided.conversion;
        let rows = self
            .session
            .execute_unpaged(
                &statements.decide,
                DecisionValues::new(decided, self.raw_ttl(decided.conversion.day())),
            )
            .await
            .map_err(failed(CONTEXT))?
            .into_rows_result()
            .map_err(|error| decode_error(CONTEXT, error))?;
        // The transaction answers `[applied]` first, then (when not applied) the row it met,
        // whatever columns the table has by then: read untyped, only `[applied]` is used.
        let applied_at = rows
            .column_specs()
            .iter()
            .position(|column| column.name() == "[applied]");
        let row = rows
            .first_row::<Row>()
            .map_err(|error| decode_error(CONTEXT, error))?;
        let applied = applied_at
            .and_then(|index| row.columns.get(index)?.as_ref()?.as_boolean())
            .ok_or_else(|| {
                decode_error(
                    CONTEXT,
                    Message("the transaction answered no [applied] column".into()),
                )
            })?;
        if applied {
            return Ok(decided.clone());
        }
        // Another decision came first (another process's, or this call's own first attempt
        // when the driver retried it): read the recorded one through Paxos, so it is the
        // committed winner even if its commit has not reached a quorum yet.
        let key = (
            conversion.advertiser_id.as_uuid(),
            conversion.conversion_id.as_str(),
        );
        let recorded: Option<StoredDecided> = read_one(
            &self.session,
            &statements.select_decision_serial,
            key,
            CONTEXT,
        )
        .await?;
        let recorded = recorded.ok_or_else(|| {
            StoreError::internal_message(format!(
                "{CONTEXT}: the decision recorded for conversion {} could not be read back",
                conversion.conversion_id
            ))
        })?;
        recorded
            .into_decided(conversion.advertiser_id)
            .map_err(|why| {
                corrupt(
                    CONTEXT,
                    &format!("conversion {}", conversion.conversion_id),
                    why,
                )
            })
    }

    async fn write_decided(&self, decided: &[DecidedConversion]) -> Result<(), StoreError> {
        let statements = self.conversion_statements().await?;
        let credited: Vec<(&DecidedConversion, CampaignId)> = decided
            .iter()
            .filter_map(|decided| Some((decided, decided.campaign_id()?)))
            .collect();
        let by_day = execute_each(
            &self.session,
            &statements.insert_conversion,
            decided,
            ROWS_IN_FLIGHT,
            |decided| DayValues::new(decided, self.raw_ttl(decided.conversion.day())),
            "writing decided conversions",
        );
        let by_campaign = execute_each(
            &self.session,
            &statements.insert_campaign_conversion,
            &credited,
            ROWS_IN_FLIGHT,
            |(decided, campaign)| {
                CampaignDayValues::new(decided, *campaign, self.raw_ttl(decided.conversion.day()))
            },
            "writing campaigns' conversions",
        );
        futures::try_join!(by_day, by_campaign)?;
        Ok(())
    }

    async fn read_advertiser_conversions(
        &self,
        advertiser: AdvertiserId,
        day: Day,
        bucket: u16,
    ) -> Result<Vec<DecidedConversion>, StoreError> {
        const CONTEXT: &str = "reading an advertiser's conversions";
        let Ok(bucket) = i16::try_from(bucket) else {
            // No conversion is ever written to a bucket past CONVERSION_BUCKETS.
            return Ok(Vec::new());
        };
        let statements = self.conversion_statements().await?;
        let rows: Vec<StoredDecided> = read_all(
            &self.session,
            &statements.select_conversions,
            (advertiser.as_uuid(), day.date(), bucket),
            CONTEXT,
        )
        .await?;
        decode_decided(rows, advertiser, CONTEXT)
    }

    async fn read_campaign_conversions(
        &self,
        campaign: CampaignKey,
        day: Day,
        within: Span,
    ) -> Result<Vec<DecidedConversion>, StoreError> {
        const CONTEXT: &str = "reading a campaign's conversions";
        let statements = self.conversion_statements().await?;
        let rows: Vec<StoredDecided> = read_all(
            &self.session,
            &statements.select_campaign_conversions,
            (
                campaign.advertiser_id.as_uuid(),
                campaign.campaign_id.as_uuid(),
                day.date(),
                within.from,
                within.to,
            ),
            CONTEXT,
        )
        .await?;
        decode_decided(rows, campaign.advertiser_id, CONTEXT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().expect("a time")
    }

    fn stored<T>(cell: MaybeUnset<T>) -> Option<T> {
        match cell {
            MaybeUnset::Set(value) => Some(value),
            MaybeUnset::Unset => None,
        }
    }

    /// What a row holds after `cells` were written: unset cells read back as null.
    fn read_back(cells: ConversionCells<'_>) -> StoredCells {
        StoredCells {
            action: Some(cells.action.to_owned()),
            timestamp: Some(cells.timestamp),
            click_id: stored(cells.click_id),
            impression_id: stored(cells.impression_id),
            user_id: stored(cells.user_id),
            value_minor: stored(cells.value_minor),
            currency: stored(cells.currency).map(str::to_owned),
        }
    }

    fn credit_read_back(campaign: Option<Uuid>, cells: CreditCells) -> StoredCredit {
        StoredCredit {
            kind: stored(cells.kind),
            campaign_id: campaign,
            ad_id: stored(cells.ad_id),
            credited_impression: stored(cells.credited_impression),
            credited_at: stored(cells.credited_at),
        }
    }

    fn conversion(value: Option<Money>, user: Option<u128>) -> Conversion {
        Conversion {
            advertiser_id: AdvertiserId::new(Uuid::from_u128(1)),
            conversion_id: ConversionId::new("order-17").expect("valid"),
            action: Action::new("purchase").expect("valid"),
            timestamp: EventTime::from_stored(at("2026-11-28T12:00:00.123Z")),
            click_id: None,
            impression_id: Some(ImpressionId::new(Uuid::from_u128(2))),
            user_id: user.map(|id| UserId::new(Uuid::from_u128(id))),
            value,
        }
    }

    #[test]
    fn a_conversion_and_its_decision_read_back_as_written() {
        let kwd = Currency::from_code("KWD").expect("a currency");
        for (value, user, attribution) in [
            (None, None, None),
            (
                Some(Money::from_minor(kwd, 1125).expect("valid")),
                Some(3),
                Some(Attribution {
                    kind: AttributionKind::PostView,
                    campaign_id: CampaignId::new(Uuid::from_u128(4)),
                    ad_id: AdId::new(Uuid::from_u128(5)),
                    impression_id: ImpressionId::new(Uuid::from_u128(2)),
                    event_time: at("2026-11-28T11:00:00Z"),
                }),
            ),
        ] {
            let decided = DecidedConversion {
                conversion: conversion(value, user),
                received: at("2026-11-28T12:00:01Z"),
                attribution,
            };
            let values = DecisionValues::new(&decided, 0);
            let advertiser = AdvertiserId::new(values.advertiser_id);
            let id = values.conversion_id.to_owned();
            let campaign = stored(values.campaign_id);
            let credit = attribution_of(credit_read_back(campaign, values.credit));
            let read = conversion_of(advertiser, &id, read_back(values.conversion));
            assert_eq!(read.as_ref(), Ok(&decided.conversion));
            assert_eq!(credit, Ok(decided.attribution));
        }
    }

    #[test]
    fn cells_that_make_no_conversion_are_refused() {
        let advertiser = AdvertiserId::new(Uuid::from_u128(1));
        let named = conversion(None, Some(3));
        let cells = || read_back(ConversionCells::of(&named, at("2026-11-28T12:00:01Z")));
        assert!(conversion_of(advertiser, "order-17", cells()).is_ok());
        assert!(conversion_of(advertiser, "order 17", cells()).is_err());
        let mut no_action = cells();
        no_action.action = None;
        assert!(conversion_of(advertiser, "order-17", no_action).is_err());
        let mut no_key = cells();
        (no_key.impression_id, no_key.user_id) = (None, None);
        assert!(conversion_of(advertiser, "order-17", no_key).is_err());
        let mut half_value = cells();
        half_value.value_minor = Some(100);
        assert!(conversion_of(advertiser, "order-17", half_value).is_err());
        assert!(value_of(Some(100), Some("XAU")).is_err());
        assert!(value_of(Some(-1), Some("EUR")).is_err());
        assert_eq!(value_of(None, None), Ok(None));

        let credit = |kind| StoredCredit {
            kind,
            campaign_id: Some(Uuid::from_u128(4)),
            ad_id: Some(Uuid::from_u128(5)),
            credited_impression: Some(Uuid::from_u128(2)),
            credited_at: Some(at("2026-11-28T11:00:00Z")),
        };
        assert_eq!(attribution_of(credit(None)), Ok(None));
        assert!(attribution_of(credit(Some(9))).is_err());
        let mut no_campaign = credit(Some(1));
        no_campaign.campaign_id = None;
        assert!(attribution_of(no_campaign).is_err());
    }
}

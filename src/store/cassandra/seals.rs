//! The day index and seal states on Cassandra, for campaigns (`campaign_day`,
//! `campaign_seal`) and sites (`site_day`, `site_seal`) alike: each owner kind's statements
//! differ only in table and key columns, so one code path binds an owner's key as values.

use super::CassandraStore;
use super::config::KeyspaceName;
use super::errors::decode_error;
use super::statements::{execute, prepare_all, read_all};
use crate::domain::beacon::SiteId;
use crate::domain::ids::{AdvertiserId, CampaignId, CampaignKey};
use crate::domain::owner::{Listing, Owner, OwnerDays, OwnerKind};
use crate::domain::sealing::LateMark;
use crate::domain::time::Day;
use crate::store::{SealState, SealStore, StoreError};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use scylla::DeserializeRow;
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::{CqlDate, CqlTimestamp, CqlValue};
use uuid::Uuid;

/// One owner kind's seal statements.
struct SealTable {
    update_late: PreparedStatement,
    update_sealed: PreparedStatement,
    select_seal: PreparedStatement,
}

impl SealTable {
    async fn prepare(session: &Session, table: String, key: &str) -> Result<Self, StoreError> {
        let [update_late, update_sealed, select_seal] = prepare_all(
            session,
            [
                format!("UPDATE {table} SET late_at = ? WHERE {key}"),
                format!("UPDATE {table} USING TIMESTAMP ? SET sealed_from = ? WHERE {key}"),
                format!("SELECT sealed_from, late_at FROM {table} WHERE {key}"),
            ],
        )
        .await?;
        Ok(Self {
            update_late,
            update_sealed,
            select_seal,
        })
    }
}

pub(crate) struct SealStatements {
    campaign_seals: SealTable,
    site_seals: SealTable,
    insert_late_index: PreparedStatement,
    select_late_index: PreparedStatement,
    insert_campaign_day: PreparedStatement,
    select_campaign_days: PreparedStatement,
    insert_site_day: PreparedStatement,
    select_site_days: PreparedStatement,
}

impl SealStatements {
    pub(crate) async fn prepare(
        session: &Session,
        keyspace: &KeyspaceName,
    ) -> Result<Self, StoreError> {
        let (campaign_seals, site_seals, day_index) = futures::try_join!(
            SealTable::prepare(
                session,
                format!("{keyspace}.campaign_seal"),
                "advertiser_id = ? AND campaign_id = ? AND day = ?",
            ),
            SealTable::prepare(
                session,
                format!("{keyspace}.site_seal"),
                "site = ? AND day = ?"
            ),
            prepare_all(
                session,
                [
                    format!(
                        "INSERT INTO {keyspace}.campaign_day (day, advertiser_id, campaign_id) VALUES (?, ?, ?)"
                    ),
                    format!(
                        "SELECT advertiser_id, campaign_id FROM {keyspace}.campaign_day WHERE day = ?"
                    ),
                    format!(
                        "INSERT INTO {keyspace}.site_day (day, site) VALUES (?, ?) USING TTL ?"
                    ),
                    format!("SELECT site FROM {keyspace}.site_day WHERE day = ?"),
                    format!(
                        "INSERT INTO {keyspace}.late_day (marked_on, owner, day, late_at) VALUES (?, ?, ?, ?)"
                    ),
                    format!(
                        "SELECT owner, day, late_at FROM {keyspace}.late_day WHERE marked_on = ?"
                    ),
                ],
            ),
        )?;
        let [
            insert_campaign_day,
            select_campaign_days,
            insert_site_day,
            select_site_days,
            insert_late_index,
            select_late_index,
        ] = day_index;
        Ok(Self {
            campaign_seals,
            site_seals,
            insert_late_index,
            select_late_index,
            insert_campaign_day,
            select_campaign_days,
            insert_site_day,
            select_site_days,
        })
    }

    fn table(&self, owner: &Owner) -> &SealTable {
        match owner {
            Owner::Campaign(_) => &self.campaign_seals,
            Owner::Site(_) => &self.site_seals,
        }
    }
}

/// An owner-day's key columns, in the order the seal statements bind them.
fn owner_day_values(owner: &Owner, day: Day) -> Vec<CqlValue> {
    let date = CqlValue::Date(CqlDate::from(day.date()));
    match owner {
        Owner::Campaign(campaign) => vec![
            CqlValue::Uuid(campaign.advertiser_id.as_uuid()),
            CqlValue::Uuid(campaign.campaign_id.as_uuid()),
            date,
        ],
        Owner::Site(site) => vec![CqlValue::Text(site.as_str().to_owned()), date],
    }
}

fn timestamp(at: DateTime<Utc>) -> CqlValue {
    CqlValue::Timestamp(CqlTimestamp::from(at))
}

#[derive(DeserializeRow)]
struct StoredSeal {
    sealed_from: Option<DateTime<Utc>>,
    late_at: Option<DateTime<Utc>>,
}

#[derive(DeserializeRow)]
struct StoredLateMark {
    owner: String,
    day: chrono::NaiveDate,
    late_at: DateTime<Utc>,
}

#[derive(DeserializeRow)]
struct StoredCampaignDay {
    advertiser_id: Uuid,
    campaign_id: Uuid,
}

/// Marks an owner-day sealed from `read_started`, written `USING TIMESTAMP` of that instant
/// so that of two seals the one whose read started later wins. Called once a rollup's rows
/// are all written.
pub(crate) async fn mark_sealed(
    store: &CassandraStore,
    owner: &Owner,
    day: Day,
    read_started: DateTime<Utc>,
) -> Result<(), StoreError> {
    let statements = &store.prepared().await?.seals;
    let mut values = vec![
        CqlValue::BigInt(read_started.timestamp_micros()),
        timestamp(read_started),
    ];
    values.extend(owner_day_values(owner, day));
    execute(
        &store.session,
        &statements.table(owner).update_sealed,
        values,
        "sealing a day",
    )
    .await
}

#[async_trait]
impl SealStore for CassandraStore {
    async fn mark_day(&self, owner: &Owner, day: Day) -> Result<(), StoreError> {
        const CONTEXT: &str = "writing the day index";
        let statements = &self.prepared().await?.seals;
        match owner {
            Owner::Campaign(campaign) => {
                let values = (
                    day.date(),
                    campaign.advertiser_id.as_uuid(),
                    campaign.campaign_id.as_uuid(),
                );
                execute(
                    &self.session,
                    &statements.insert_campaign_day,
                    values,
                    CONTEXT,
                )
                .await
            }
            Owner::Site(site) => {
                let values = (day.date(), site.as_str(), self.raw_ttl(day));
                execute(&self.session, &statements.insert_site_day, values, CONTEXT).await
            }
        }?;
        self.note_listing(owner, day).await
    }

    async fn listed_owners(&self, listing: Listing) -> Result<Vec<OwnerDays>, StoreError> {
        self.read_listing(listing).await
    }

    async fn owners_of_day(&self, kind: OwnerKind, day: Day) -> Result<Vec<Owner>, StoreError> {
        const CONTEXT: &str = "reading the day index";
        let statements = &self.prepared().await?.seals;
        match kind {
            OwnerKind::Campaign => {
                let rows: Vec<StoredCampaignDay> = read_all(
                    &self.session,
                    &statements.select_campaign_days,
                    (day.date(),),
                    CONTEXT,
                )
                .await?;
                Ok(rows
                    .into_iter()
                    .map(|row| {
                        Owner::Campaign(CampaignKey {
                            advertiser_id: AdvertiserId::new(row.advertiser_id),
                            campaign_id: CampaignId::new(row.campaign_id),
                        })
                    })
                    .collect())
            }
            OwnerKind::Site => {
                let rows: Vec<(String,)> = read_all(
                    &self.session,
                    &statements.select_site_days,
                    (day.date(),),
                    CONTEXT,
                )
                .await?;
                rows.into_iter()
                    .map(|(site,)| {
                        SiteId::parse(&site).map(Owner::Site).map_err(|message| {
                            decode_error(CONTEXT, crate::store::error::Message(message))
                        })
                    })
                    .collect()
            }
        }
    }

    async fn mark_late(
        &self,
        owner: &Owner,
        day: Day,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        const CONTEXT: &str = "marking a late event";
        let statements = &self.prepared().await?.seals;
        let mut values = vec![timestamp(at)];
        values.extend(owner_day_values(owner, day));
        let index_values = (at.date_naive(), owner.to_key(), day.date(), at);
        futures::try_join!(
            execute(
                &self.session,
                &statements.table(owner).update_late,
                values,
                CONTEXT,
            ),
            execute(
                &self.session,
                &statements.insert_late_index,
                index_values,
                CONTEXT,
            ),
        )
        .map(|_| ())
    }

    async fn late_marks(&self, since: Day) -> Result<Vec<LateMark>, StoreError> {
        const CONTEXT: &str = "reading the late index";
        let statements = &self.prepared().await?.seals;
        let today = Utc::now().date_naive();
        let days: Vec<chrono::NaiveDate> = since
            .date()
            .iter_days()
            .take_while(|day| *day <= today)
            .collect();
        let partitions = futures::future::try_join_all(days.iter().map(|marked_on| {
            read_all::<StoredLateMark>(
                &self.session,
                &statements.select_late_index,
                (*marked_on,),
                CONTEXT,
            )
        }))
        .await?;
        let mut latest: std::collections::BTreeMap<(Owner, Day), LateMark> = Default::default();
        for row in partitions.into_iter().flatten() {
            let owner = Owner::from_key(&row.owner).ok_or_else(|| {
                decode_error(CONTEXT, crate::store::error::Message(row.owner.clone()))
            })?;
            let day = Day::new(row.day);
            let slot = latest.entry((owner.clone(), day)).or_insert(LateMark {
                owner,
                day,
                late_at: row.late_at,
            });
            slot.late_at = slot.late_at.max(row.late_at);
        }
        Ok(latest.into_values().collect())
    }

    async fn seal_state(&self, owner: &Owner, day: Day) -> Result<SealState, StoreError> {
        let statements = &self.prepared().await?.seals;
        let rows: Vec<StoredSeal> = read_all(
            &self.session,
            &statements.table(owner).select_seal,
            owner_day_values(owner, day),
            "reading a seal",
        )
        .await?;
        Ok(rows
            .into_iter()
            .next()
            .map(|row| SealState {
                sealed_from: row.sealed_from,
                late_at: row.late_at,
            })
            .unwrap_or_default())
    }
}

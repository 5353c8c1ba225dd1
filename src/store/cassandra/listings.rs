//! What the dashboard lists, on Cassandra: `owner_listing` (each owner's first and last days,
//! written without a read by the timestamps that make the earliest and the latest day win)
//! and `site_feature_visits`. See `migrations/0010_listings.cql`.

use super::CassandraStore;
use super::config::KeyspaceName;
use super::errors::decode_error;
use super::statements::{execute, execute_each, prepare_all, read_all};
use crate::domain::beacon::SiteId;
use crate::domain::owner::{Listing, Owner, OwnerDays};
use crate::domain::time::Day;
use crate::store::error::Message;
use crate::store::{FeatureVisits, StoreError};
use chrono::{Datelike, NaiveDate};
use scylla::DeserializeRow;
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;

/// first_day's write timestamp is this minus the day's number: the earliest day wins.
const FIRST_DAY_TIMESTAMPS: i64 = 1 << 50;
const FEATURE_ROWS_IN_FLIGHT: usize = 64;

pub(crate) struct ListingStatements {
    write_first_day: PreparedStatement,
    write_last_day: PreparedStatement,
    select_listing: PreparedStatement,
    insert_feature: PreparedStatement,
    select_features: PreparedStatement,
}

impl ListingStatements {
    pub(crate) async fn prepare(
        session: &Session,
        keyspace: &KeyspaceName,
    ) -> Result<Self, StoreError> {
        let [
            write_first_day,
            write_last_day,
            select_listing,
            insert_feature,
            select_features,
        ] = prepare_all(
            session,
            [
                format!(
                    "UPDATE {keyspace}.owner_listing USING TIMESTAMP ? SET first_day = ? \
                     WHERE listing = ? AND owner = ?"
                ),
                format!(
                    "UPDATE {keyspace}.owner_listing USING TIMESTAMP ? SET last_day = ? \
                     WHERE listing = ? AND owner = ?"
                ),
                format!(
                    "SELECT owner, first_day, last_day FROM {keyspace}.owner_listing \
                     WHERE listing = ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.site_feature_visits (site, day, feature, value, visits) \
                     VALUES (?, ?, ?, ?, ?) USING TTL ?"
                ),
                format!(
                    "SELECT feature, value, visits FROM {keyspace}.site_feature_visits \
                     WHERE site = ? AND day = ?"
                ),
            ],
        )
        .await?;
        Ok(Self {
            write_first_day,
            write_last_day,
            select_listing,
            insert_feature,
            select_features,
        })
    }
}

#[derive(DeserializeRow)]
struct StoredListing {
    owner: String,
    first_day: Option<NaiveDate>,
    last_day: Option<NaiveDate>,
}

#[derive(DeserializeRow)]
struct StoredFeature {
    feature: String,
    value: String,
    visits: i64,
}

/// Days since the epoch, the order the timestamps follow.
fn day_number(day: Day) -> i64 {
    i64::from(day.date().num_days_from_ce())
}

impl CassandraStore {
    pub(super) async fn note_listing(&self, owner: &Owner, day: Day) -> Result<(), StoreError> {
        const CONTEXT: &str = "writing the owner listing";
        let statements = &self.prepared().await?.listings;
        let listing = Listing::of(owner).to_key();
        let owner = owner.to_key();
        let number = day_number(day);
        futures::try_join!(
            execute(
                &self.session,
                &statements.write_first_day,
                (FIRST_DAY_TIMESTAMPS - number, day.date(), &listing, &owner),
                CONTEXT,
            ),
            execute(
                &self.session,
                &statements.write_last_day,
                (number, day.date(), &listing, &owner),
                CONTEXT,
            ),
        )?;
        Ok(())
    }

    pub(super) async fn read_listing(
        &self,
        listing: Listing,
    ) -> Result<Vec<OwnerDays>, StoreError> {
        const CONTEXT: &str = "reading the owner listing";
        let statements = &self.prepared().await?.listings;
        let rows: Vec<StoredListing> = read_all(
            &self.session,
            &statements.select_listing,
            (listing.to_key(),),
            CONTEXT,
        )
        .await?;
        rows.into_iter()
            .map(|row| {
                let undecodable = || {
                    decode_error(
                        CONTEXT,
                        Message(format!("listed owner {} does not decode", row.owner)),
                    )
                };
                let owner = Owner::from_key(&row.owner).ok_or_else(undecodable)?;
                let (Some(first), Some(last)) = (row.first_day, row.last_day) else {
                    return Err(undecodable());
                };
                Ok(OwnerDays {
                    owner,
                    first_day: Day::new(first),
                    last_day: Day::new(last),
                })
            })
            .collect()
    }

    pub(super) async fn write_features(
        &self,
        site: &SiteId,
        day: Day,
        values: &[FeatureVisits],
    ) -> Result<(), StoreError> {
        let statements = &self.prepared().await?.listings;
        // Aggregates of the day, so they expire with its rollups (`--retain-aggregates`).
        let ttl = self.aggregate_ttl(day);
        execute_each(
            &self.session,
            &statements.insert_feature,
            values,
            FEATURE_ROWS_IN_FLIGHT,
            |entry| {
                (
                    site.as_str(),
                    day.date(),
                    entry.feature.as_str(),
                    entry.value.as_str(),
                    i64::try_from(entry.visits).unwrap_or(i64::MAX),
                    ttl,
                )
            },
            "writing a site-day's feature values",
        )
        .await
    }

    pub(super) async fn read_features(
        &self,
        site: &SiteId,
        day: Day,
    ) -> Result<Vec<FeatureVisits>, StoreError> {
        let statements = &self.prepared().await?.listings;
        let rows: Vec<StoredFeature> = read_all(
            &self.session,
            &statements.select_features,
            (site.as_str(), day.date()),
            "reading a site-day's feature values",
        )
        .await?;
        Ok(rows
            .into_iter()
            .map(|row| FeatureVisits {
                feature: row.feature,
                value: row.value,
                visits: u64::try_from(row.visits).unwrap_or(0),
            })
            .collect())
    }
}

//! The prepared statements of personal data on Cassandra (`migrations/0018_privacy.cql`,
//! `0019_visitors.cql`): the subject directory and the visitor index, the deletes of one
//! subject's rows by their keys, and erasure records.
//! Shared by [`super::subjects`] and [`super::erasures`].

use super::config::KeyspaceName;
use super::event_statements::FULL_COLUMNS;
use super::statements::{EVENT_PARTITION, prepare_all};
use crate::store::StoreError;
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::{Consistency, SerialConsistency};

/// The one partition of `erasure_pending` and `erased_subject`: erasures are few.
pub(crate) const SHARD: i16 = 0;

/// The name of the subject-hash key in `privacy_key`.
pub(crate) const SUBJECT_HASH_KEY: &str = "subject_hash";

/// The key of one row of an event table, after its partition: its time and its impression.
const EVENT_ROW: &str = "timestamp = ? AND impression_id = ?";

/// The columns of an erasure record, in the order of its insert and of `StoredErasure`.
pub(crate) const ERASURE_COLUMNS: &str =
    "subject_kind, user_id, site, guid, subject_hash, scope, requested_at, status, completed_at";

/// The columns of `erasure_count`, in the order of its insert and of `StoredCounts`.
pub(crate) const COUNT_COLUMNS: &str = "impressions, clicks, view_reports, conversions, visits";

pub(crate) struct SubjectStatements {
    /// The subject directory by week (`migrations/0022_subject_lines_by_week.cql`), written
    /// `USING TTL ?`, and the weeks that hold lines.
    pub(crate) insert_subject_line: PreparedStatement,
    pub(crate) select_subject_lines: PreparedStatement,
    pub(crate) delete_subject_line: PreparedStatement,
    pub(crate) insert_line_week: PreparedStatement,
    pub(crate) select_line_weeks: PreparedStatement,
    /// The directory as 0018 made it, by a bucket of the user only: read and deleted, no
    /// longer written.
    pub(crate) select_legacy_lines: PreparedStatement,
    pub(crate) delete_legacy_line: PreparedStatement,
    /// One `event_index` row by its whole key.
    pub(crate) delete_index_entry: PreparedStatement,
    /// A range delete: every `event_index` row of one key in one partition.
    pub(crate) delete_index_key: PreparedStatement,
    pub(crate) select_impression_at: PreparedStatement,
    /// The deletes of one impression copy's rows in its partition, all bound alike (partition,
    /// time, impression), sent as one batch: the full row, the thin row, the copies-index row
    /// and (a range delete) the view reports of that copy.
    pub(crate) delete_impression: PreparedStatement,
    pub(crate) delete_impression_summary: PreparedStatement,
    pub(crate) delete_impression_copy: PreparedStatement,
    pub(crate) delete_view_reports: PreparedStatement,
    /// The copy's row among its campaign-day's duplicates, if the slicer recorded one.
    pub(crate) delete_duplicate: PreparedStatement,
    pub(crate) delete_click: PreparedStatement,
    /// A click row's user agent, by the click's partition, time and impression.
    pub(crate) select_click_agent: PreparedStatement,
    /// A partition delete: an impression's whole click index.
    pub(crate) delete_clicks_of: PreparedStatement,
    /// A record as given, `USING TIMESTAMP ?` so the done form always overwrites the request.
    pub(crate) insert_erasure: PreparedStatement,
    pub(crate) select_erasure: PreparedStatement,
    pub(crate) insert_pending: PreparedStatement,
    pub(crate) select_pending: PreparedStatement,
    pub(crate) delete_pending: PreparedStatement,
    pub(crate) insert_erased_subject: PreparedStatement,
    pub(crate) select_erased_subjects: PreparedStatement,
    /// The impressions an erasure found (`migrations/0023_erased_impressions.cql`).
    pub(crate) insert_erased_impression: PreparedStatement,
    pub(crate) select_erased_impressions: PreparedStatement,
    /// `INSERT … IF NOT EXISTS`, with serial consistency `SERIAL`.
    pub(crate) settle_counts: PreparedStatement,
    pub(crate) select_counts: PreparedStatement,
    /// The same read at consistency `SERIAL`: it sees the counts a lost transaction met.
    pub(crate) select_counts_serial: PreparedStatement,
    /// `INSERT … IF NOT EXISTS`, with serial consistency `SERIAL`.
    pub(crate) insert_key: PreparedStatement,
    /// Read at consistency `SERIAL`, after a lost transaction.
    pub(crate) select_key_serial: PreparedStatement,
    /// The visitor index (`migrations/0019_visitors.cql`), written `USING TTL ?`.
    pub(crate) insert_visitor_day: PreparedStatement,
    pub(crate) select_visitor_days: PreparedStatement,
    /// `USING TIMESTAMP ?`: the erasure's request.
    pub(crate) delete_visitor_day: PreparedStatement,
    /// One beacon's row by its whole primary key.
    pub(crate) delete_visit: PreparedStatement,
    /// A day key: `INSERT … IF NOT EXISTS USING TTL ?`, with serial consistency `SERIAL`.
    pub(crate) insert_day_key: PreparedStatement,
    /// A user's conversions (`migrations/0021_subject_conversions.cql`), written `USING TTL ?`.
    pub(crate) insert_subject_conversion: PreparedStatement,
    pub(crate) select_subject_conversions: PreparedStatement,
    pub(crate) delete_subject_conversion: PreparedStatement,
    /// A partition delete: every copy of one conversion.
    pub(crate) delete_conversion_copies: PreparedStatement,
    pub(crate) delete_conversion_decision: PreparedStatement,
    /// A decided conversion's row in its advertiser's day, and in its campaign's day.
    pub(crate) delete_decided: PreparedStatement,
    pub(crate) delete_campaign_decided: PreparedStatement,
}

impl SubjectStatements {
    pub(crate) async fn prepare(
        session: &Session,
        keyspace: &KeyspaceName,
    ) -> Result<Self, StoreError> {
        let [
            insert_subject_line,
            select_subject_lines,
            delete_subject_line,
            insert_line_week,
            select_line_weeks,
            select_legacy_lines,
            delete_legacy_line,
            delete_index_entry,
            delete_index_key,
            select_impression_at,
            delete_impression,
            delete_impression_summary,
            delete_impression_copy,
            delete_view_reports,
            delete_duplicate,
            delete_click,
            select_click_agent,
            delete_clicks_of,
            insert_erasure,
            select_erasure,
            insert_pending,
            select_pending,
            delete_pending,
            insert_erased_subject,
            select_erased_subjects,
            insert_erased_impression,
            select_erased_impressions,
            mut settle_counts,
            select_counts,
            mut insert_key,
            mut select_key_serial,
            insert_visitor_day,
            select_visitor_days,
            delete_visitor_day,
            delete_visit,
            mut insert_day_key,
            insert_subject_conversion,
            select_subject_conversions,
            delete_subject_conversion,
            delete_conversion_copies,
            delete_conversion_decision,
            delete_decided,
            delete_campaign_decided,
        ] = prepare_all(
            session,
            [
                format!(
                    "INSERT INTO {keyspace}.subject_line (week, bucket, user_id, advertiser_id) \
                     VALUES (?, ?, ?, ?) USING TTL ?"
                ),
                format!(
                    "SELECT advertiser_id FROM {keyspace}.subject_line \
                     WHERE week = ? AND bucket = ? AND user_id = ?"
                ),
                format!(
                    "DELETE FROM {keyspace}.subject_line \
                     WHERE week = ? AND bucket = ? AND user_id = ? AND advertiser_id = ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.subject_line_week (shard, week) VALUES (?, ?) \
                     USING TTL ?"
                ),
                format!("SELECT week FROM {keyspace}.subject_line_week WHERE shard = ?"),
                format!(
                    "SELECT advertiser_id, week FROM {keyspace}.subject_week \
                     WHERE bucket = ? AND user_id = ?"
                ),
                format!(
                    "DELETE FROM {keyspace}.subject_week \
                     WHERE bucket = ? AND user_id = ? AND advertiser_id = ? AND week = ?"
                ),
                format!(
                    "DELETE FROM {keyspace}.event_index WHERE advertiser_id = ? AND week = ? \
                     AND bucket_id = ? AND key_kind = ? AND key_id = ? AND timestamp = ? \
                     AND kind = ? AND impression_id = ? AND campaign_id = ? AND received = ?"
                ),
                format!(
                    "DELETE FROM {keyspace}.event_index WHERE advertiser_id = ? AND week = ? \
                     AND bucket_id = ? AND key_kind = ? AND key_id = ?"
                ),
                format!(
                    "SELECT {FULL_COLUMNS} FROM {keyspace}.impression \
                     WHERE {EVENT_PARTITION} AND {EVENT_ROW}"
                ),
                format!("DELETE FROM {keyspace}.impression WHERE {EVENT_PARTITION} AND {EVENT_ROW}"),
                format!(
                    "DELETE FROM {keyspace}.impression_summary WHERE {EVENT_PARTITION} AND {EVENT_ROW}"
                ),
                // Clustered by (impression_id, timestamp): the same two cells, bound alike.
                format!(
                    "DELETE FROM {keyspace}.impression_copy WHERE {EVENT_PARTITION} AND {EVENT_ROW}"
                ),
                // A clustering prefix of (timestamp, impression_id, report_id, received).
                format!(
                    "DELETE FROM {keyspace}.view_report WHERE {EVENT_PARTITION} AND {EVENT_ROW}"
                ),
                format!(
                    "DELETE FROM {keyspace}.slice_duplicate WHERE advertiser_id = ? \
                     AND campaign_id = ? AND day = ? AND {EVENT_ROW}"
                ),
                format!("DELETE FROM {keyspace}.click WHERE {EVENT_PARTITION} AND {EVENT_ROW}"),
                format!(
                    "SELECT user_agent FROM {keyspace}.click WHERE {EVENT_PARTITION} AND {EVENT_ROW}"
                ),
                format!(
                    "DELETE FROM {keyspace}.click_by_impression \
                     WHERE advertiser_id = ? AND campaign_id = ? AND impression_id = ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.erasure (id, {ERASURE_COLUMNS}) \
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
                ),
                format!("SELECT {ERASURE_COLUMNS} FROM {keyspace}.erasure WHERE id = ?"),
                format!(
                    "INSERT INTO {keyspace}.erasure_pending (shard, id) VALUES (?, ?) \
                     USING TIMESTAMP ?"
                ),
                format!("SELECT id FROM {keyspace}.erasure_pending WHERE shard = ?"),
                format!(
                    "DELETE FROM {keyspace}.erasure_pending USING TIMESTAMP ? \
                     WHERE shard = ? AND id = ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.erased_subject (shard, subject_hash, requested_at, id, \
                     scope) VALUES (?, ?, ?, ?, ?)"
                ),
                format!(
                    "SELECT subject_hash, requested_at, id, scope FROM {keyspace}.erased_subject \
                     WHERE shard = ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.erased_impression (id, impression_hash) VALUES (?, ?)"
                ),
                format!("SELECT impression_hash FROM {keyspace}.erased_impression WHERE id = ?"),
                format!(
                    "INSERT INTO {keyspace}.erasure_count (id, {COUNT_COLUMNS}) \
                     VALUES (?, ?, ?, ?, ?, ?) IF NOT EXISTS"
                ),
                format!("SELECT {COUNT_COLUMNS} FROM {keyspace}.erasure_count WHERE id = ?"),
                format!("INSERT INTO {keyspace}.privacy_key (name, key) VALUES (?, ?) IF NOT EXISTS"),
                format!("SELECT key FROM {keyspace}.privacy_key WHERE name = ?"),
                format!(
                    "INSERT INTO {keyspace}.visitor_day (site, guid, day) VALUES (?, ?, ?) \
                     USING TTL ?"
                ),
                format!("SELECT day FROM {keyspace}.visitor_day WHERE site = ? AND guid = ?"),
                format!(
                    "DELETE FROM {keyspace}.visitor_day USING TIMESTAMP ? \
                     WHERE site = ? AND guid = ? AND day = ?"
                ),
                format!(
                    "DELETE FROM {keyspace}.visit WHERE site = ? AND day = ? AND bucket_id = ? \
                     AND timestamp = ? AND guid = ? AND features = ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.privacy_key (name, key) VALUES (?, ?) IF NOT EXISTS \
                     USING TTL ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.subject_conversion (advertiser_id, week, user_id, \
                     conversion_id) VALUES (?, ?, ?, ?) USING TTL ?"
                ),
                format!(
                    "SELECT conversion_id FROM {keyspace}.subject_conversion \
                     WHERE advertiser_id = ? AND week = ? AND user_id = ?"
                ),
                format!(
                    "DELETE FROM {keyspace}.subject_conversion WHERE advertiser_id = ? \
                     AND week = ? AND user_id = ? AND conversion_id = ?"
                ),
                format!(
                    "DELETE FROM {keyspace}.conversion_copy \
                     WHERE advertiser_id = ? AND conversion_id = ?"
                ),
                format!(
                    "DELETE FROM {keyspace}.conversion_decision \
                     WHERE advertiser_id = ? AND conversion_id = ?"
                ),
                format!(
                    "DELETE FROM {keyspace}.conversion WHERE advertiser_id = ? AND day = ? \
                     AND bucket_id = ? AND timestamp = ? AND conversion_id = ?"
                ),
                format!(
                    "DELETE FROM {keyspace}.campaign_conversion WHERE advertiser_id = ? \
                     AND campaign_id = ? AND day = ? AND timestamp = ? AND conversion_id = ?"
                ),
            ],
        )
        .await?;
        // SERIAL, not the driver's default LOCAL_SERIAL: with processes in several datacentres,
        // two local Paxos rounds could each record their counts or key. A retried transaction
        // that meets its own first attempt's row reads it back, so both stay idempotent.
        settle_counts.set_serial_consistency(Some(SerialConsistency::Serial));
        insert_key.set_serial_consistency(Some(SerialConsistency::Serial));
        insert_day_key.set_serial_consistency(Some(SerialConsistency::Serial));
        let mut select_counts_serial = select_counts.clone();
        select_counts_serial.set_consistency(Consistency::Serial);
        select_key_serial.set_consistency(Consistency::Serial);
        Ok(Self {
            insert_subject_line,
            select_subject_lines,
            delete_subject_line,
            insert_line_week,
            select_line_weeks,
            select_legacy_lines,
            delete_legacy_line,
            delete_index_entry,
            delete_index_key,
            select_impression_at,
            delete_impression,
            delete_impression_summary,
            delete_impression_copy,
            delete_view_reports,
            delete_duplicate,
            delete_click,
            select_click_agent,
            delete_clicks_of,
            insert_erasure,
            select_erasure,
            insert_pending,
            select_pending,
            delete_pending,
            insert_erased_subject,
            select_erased_subjects,
            insert_erased_impression,
            select_erased_impressions,
            settle_counts,
            select_counts,
            select_counts_serial,
            insert_key,
            select_key_serial,
            insert_visitor_day,
            select_visitor_days,
            delete_visitor_day,
            delete_visit,
            insert_day_key,
            insert_subject_conversion,
            select_subject_conversions,
            delete_subject_conversion,
            delete_conversion_copies,
            delete_conversion_decision,
            delete_decided,
            delete_campaign_decided,
        })
    }
}

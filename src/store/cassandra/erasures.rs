//! Erasure records on Cassandra (`migrations/0018_privacy.cql`): the record (`erasure`), its
//! place in the pending list (`erasure_pending`), its erased subject (`erased_subject`), its
//! settled counts (`erasure_count`, a lightweight transaction: the first counts win) and the
//! store's key for subject hashes (`privacy_key`, the same way).
//!
//! The record is written only by plain inserts, each `USING TIMESTAMP` of its own instant:
//! the request's at `requested_at`, the done form strictly later, so the done form (its
//! subject null) replaces the request whatever the clocks of the processes that wrote them,
//! and a late retry of the request can never bring the subject back.

use super::errors::decode_error;
use super::event_writes::set_or_unset;
use super::statements::{execute, failed, read_all, read_one, transaction_applied};
use super::subject_statements::{SHARD, SUBJECT_HASH_KEY, SubjectStatements};
use crate::domain::beacon::{Guid, SiteId};
use crate::domain::ids::{AdvertiserId, UserId};
use crate::domain::privacy::{
    ErasedCounts, ErasedSubject, ErasureId, ErasureRecord, ErasureStatus, PrivacyKey, Subject,
    SubjectHash,
};
use crate::domain::time::Day;
use crate::store::StoreError;
use crate::store::error::Message;
use chrono::{DateTime, Utc};
use scylla::client::session::Session;
use scylla::statement::batch::{Batch, BatchType};
use scylla::value::MaybeUnset;
use scylla::{DeserializeRow, SerializeRow};
use uuid::Uuid;

/// How `erasure.subject_kind` names a [`Subject::User`].
const USER: &str = "user";
/// How `erasure.subject_kind` names a [`Subject::Visitor`].
const VISITOR: &str = "visitor";

/// The bound values of an `erasure` insert, in the statement's order.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct ErasureValues<'a> {
    id: Uuid,
    subject_kind: MaybeUnset<&'static str>,
    /// `Set(None)` writes null: how the done form removes the subject.
    user_id: MaybeUnset<Option<Uuid>>,
    site: MaybeUnset<Option<&'a str>>,
    guid: MaybeUnset<Option<&'a str>>,
    subject_hash: &'a [u8],
    scope: MaybeUnset<Uuid>,
    requested_at: DateTime<Utc>,
    status: &'static str,
    completed_at: MaybeUnset<DateTime<Utc>>,
    written_at: i64,
}

impl<'a> ErasureValues<'a> {
    /// The record as requested, written at its request's instant.
    fn requested(record: &'a ErasureRecord) -> Self {
        let (kind, user, visitor) = match &record.subject {
            Some(Subject::User(user)) => (MaybeUnset::Set(USER), Some(user.as_uuid()), None),
            Some(Subject::Visitor { site, guid }) => (
                MaybeUnset::Set(VISITOR),
                None,
                Some((site.as_str(), guid.as_str())),
            ),
            None => (MaybeUnset::Unset, None, None),
        };
        Self {
            id: record.id.as_uuid(),
            subject_kind: kind,
            user_id: set_or_unset(user.map(Some)),
            site: set_or_unset(visitor.map(|(site, _)| Some(site))),
            guid: set_or_unset(visitor.map(|(_, guid)| Some(guid))),
            subject_hash: record.subject_hash.as_bytes(),
            scope: set_or_unset(record.scope.map(|scope| scope.as_uuid())),
            requested_at: record.requested_at,
            status: record.status.name(),
            completed_at: set_or_unset(record.completed_at),
            written_at: record.requested_at.timestamp_micros(),
        }
    }

    /// The done form: the subject null and the status done whatever `record` says, since a
    /// finished erasure must never keep its subject in the clear; written after the request.
    fn done(record: &'a ErasureRecord) -> Self {
        Self {
            subject_kind: MaybeUnset::Unset,
            user_id: MaybeUnset::Set(None),
            site: MaybeUnset::Set(None),
            guid: MaybeUnset::Set(None),
            status: ErasureStatus::Done.name(),
            written_at: done_at(record),
            ..Self::requested(record)
        }
    }
}

/// The write time of the done form: its completion, and in any case after the request, which
/// another process (another clock) may have written.
fn done_at(record: &ErasureRecord) -> i64 {
    let requested = record.requested_at.timestamp_micros();
    record
        .completed_at
        .map_or(requested, |at| at.timestamp_micros())
        .max(requested.saturating_add(1))
}

/// A row of `erasure`.
#[derive(DeserializeRow)]
struct StoredErasure {
    subject_kind: Option<String>,
    user_id: Option<Uuid>,
    site: Option<String>,
    guid: Option<String>,
    subject_hash: Option<Vec<u8>>,
    scope: Option<Uuid>,
    requested_at: Option<DateTime<Utc>>,
    status: Option<String>,
    completed_at: Option<DateTime<Utc>>,
}

impl StoredErasure {
    fn into_record(
        self,
        id: ErasureId,
        erased: Option<ErasedCounts>,
    ) -> Result<ErasureRecord, String> {
        let subject = match (
            self.subject_kind.as_deref(),
            self.user_id,
            self.site,
            self.guid,
        ) {
            (_, None, None, None) => None,
            (Some(USER), Some(user), None, None) => Some(Subject::User(UserId::new(user))),
            (Some(VISITOR), None, Some(site), Some(guid)) => Some(Subject::Visitor {
                site: SiteId::parse(&site).map_err(|why| format!("its site {why}"))?,
                guid: Guid::parse(&guid).map_err(|why| format!("its guid {why}"))?,
            }),
            (kind, ..) => return Err(format!("a subject of unknown kind {kind:?}")),
        };
        let status = self.status.ok_or("no status")?;
        Ok(ErasureRecord {
            id,
            subject,
            subject_hash: hash_of(self.subject_hash)?,
            scope: self.scope.map(AdvertiserId::new),
            requested_at: self.requested_at.ok_or("no request time")?,
            status: ErasureStatus::from_name(&status)
                .ok_or_else(|| format!("unknown status {status:.32}"))?,
            completed_at: self.completed_at,
            erased,
        })
    }
}

fn hash_of(bytes: Option<Vec<u8>>) -> Result<SubjectHash, String> {
    let bytes = bytes.ok_or("no subject hash")?;
    let bytes = <[u8; 32]>::try_from(bytes.as_slice())
        .map_err(|_| format!("a subject hash of {} bytes", bytes.len()))?;
    Ok(SubjectHash::new(bytes))
}

/// A row of `erasure_count`.
#[derive(DeserializeRow)]
struct StoredCounts {
    impressions: Option<i64>,
    clicks: Option<i64>,
    view_reports: Option<i64>,
    conversions: Option<i64>,
    visits: Option<i64>,
}

impl From<StoredCounts> for ErasedCounts {
    fn from(row: StoredCounts) -> Self {
        let count = |count: Option<i64>| u64::try_from(count.unwrap_or_default()).unwrap_or(0);
        Self {
            impressions: count(row.impressions),
            clicks: count(row.clicks),
            view_reports: count(row.view_reports),
            conversions: count(row.conversions),
            visits: count(row.visits),
        }
    }
}

/// A row of `erased_subject`.
#[derive(DeserializeRow)]
struct StoredErasedSubject {
    subject_hash: Vec<u8>,
    requested_at: DateTime<Utc>,
    id: Uuid,
    scope: Option<Uuid>,
}

/// A row that does not decode: the schema and this build disagree, or the row is damaged.
fn corrupt(context: &'static str, why: String) -> StoreError {
    decode_error(context, Message(why))
}

/// Record, pending entry and erased subject in one logged batch: all three are stored, or
/// (on a failure the caller sees) none, or all three once the batch log replays.
pub(crate) async fn create(
    session: &Session,
    statements: &SubjectStatements,
    record: &ErasureRecord,
) -> Result<(), StoreError> {
    let mut batch = Batch::new(BatchType::Logged);
    // Plain inserts of fixed values at fixed timestamps: a repeat is the same write.
    batch.set_is_idempotent(true);
    batch.append_statement(statements.insert_erasure.clone());
    batch.append_statement(statements.insert_pending.clone());
    batch.append_statement(statements.insert_erased_subject.clone());
    let id = record.id.as_uuid();
    let values = (
        ErasureValues::requested(record),
        (SHARD, id, record.requested_at.timestamp_micros()),
        (
            SHARD,
            record.subject_hash.as_bytes().as_slice(),
            record.requested_at,
            id,
            set_or_unset(record.scope.map(|scope| scope.as_uuid())),
        ),
    );
    session
        .batch(&batch, values)
        .await
        .map(|_| ())
        .map_err(failed("recording an erasure"))
}

pub(crate) async fn read(
    session: &Session,
    statements: &SubjectStatements,
    id: ErasureId,
) -> Result<Option<ErasureRecord>, StoreError> {
    const CONTEXT: &str = "reading an erasure";
    let key = (id.as_uuid(),);
    let (record, counts) = futures::try_join!(
        read_one::<StoredErasure>(session, &statements.select_erasure, key, CONTEXT),
        read_one::<StoredCounts>(session, &statements.select_counts, key, CONTEXT),
    )?;
    record
        .map(|row| {
            row.into_record(id, counts.map(ErasedCounts::from))
                .map_err(|why| corrupt(CONTEXT, format!("erasure {id}: {why}")))
        })
        .transpose()
}

pub(crate) async fn pending(
    session: &Session,
    statements: &SubjectStatements,
) -> Result<Vec<ErasureId>, StoreError> {
    let rows: Vec<(Uuid,)> = read_all(
        session,
        &statements.select_pending,
        (SHARD,),
        "reading pending erasures",
    )
    .await?;
    Ok(rows.into_iter().map(|(id,)| ErasureId::new(id)).collect())
}

pub(crate) async fn settle_counts(
    session: &Session,
    statements: &SubjectStatements,
    id: ErasureId,
    counts: ErasedCounts,
) -> Result<ErasedCounts, StoreError> {
    const CONTEXT: &str = "settling an erasure's counts";
    let stored = |count: u64| i64::try_from(count).unwrap_or(i64::MAX);
    let values = (
        id.as_uuid(),
        stored(counts.impressions),
        stored(counts.clicks),
        stored(counts.view_reports),
        stored(counts.conversions),
        stored(counts.visits),
    );
    let result = session
        .execute_unpaged(&statements.settle_counts, values)
        .await
        .map_err(failed(CONTEXT))?;
    if transaction_applied(result, CONTEXT)? {
        return Ok(counts);
    }
    // Counts came first (another process's, or this call's own first attempt when the driver
    // retried it): read them through Paxos, so they are the committed winner even if their
    // commit has not reached a quorum yet.
    let recorded: Option<StoredCounts> = read_one(
        session,
        &statements.select_counts_serial,
        (id.as_uuid(),),
        CONTEXT,
    )
    .await?;
    recorded.map(ErasedCounts::from).ok_or_else(|| {
        StoreError::internal_message(format!(
            "{CONTEXT}: the counts recorded for erasure {id} could not be read back"
        ))
    })
}

pub(crate) async fn finish(
    session: &Session,
    statements: &SubjectStatements,
    record: &ErasureRecord,
) -> Result<(), StoreError> {
    const CONTEXT: &str = "finishing an erasure";
    // The job settles its counts before it deletes anything; settling the done form's counts
    // here too (a no-op when settled) makes sure a done record never reads without them.
    if let Some(counts) = record.erased {
        settle_counts(session, statements, record.id, counts).await?;
    }
    let done = ErasureValues::done(record);
    let written_at = done.written_at;
    execute(session, &statements.insert_erasure, done, CONTEXT).await?;
    // Only once the done form is stored: a crash in between leaves the erasure pending, and
    // the job finishes it again.
    execute(
        session,
        &statements.delete_pending,
        (written_at, SHARD, record.id.as_uuid()),
        CONTEXT,
    )
    .await
}

pub(crate) async fn erased_subjects(
    session: &Session,
    statements: &SubjectStatements,
) -> Result<Vec<ErasedSubject>, StoreError> {
    const CONTEXT: &str = "reading erased subjects";
    let rows: Vec<StoredErasedSubject> = read_all(
        session,
        &statements.select_erased_subjects,
        (SHARD,),
        CONTEXT,
    )
    .await?;
    rows.into_iter()
        .map(|row| {
            Ok(ErasedSubject {
                id: ErasureId::new(row.id),
                subject_hash: hash_of(Some(row.subject_hash))
                    .map_err(|why| corrupt(CONTEXT, why))?,
                scope: row.scope.map(AdvertiserId::new),
                requested_at: row.requested_at,
            })
        })
        .collect()
}

/// Impression hashes a batch at a time: unlogged, one partition (the erasure's).
const HASHES_PER_BATCH: usize = 100;

pub(crate) async fn record_impressions(
    session: &Session,
    statements: &SubjectStatements,
    id: ErasureId,
    hashes: &[SubjectHash],
) -> Result<(), StoreError> {
    for chunk in hashes.chunks(HASHES_PER_BATCH) {
        let mut batch = Batch::new(BatchType::Unlogged);
        // Plain inserts of fixed values: a repeat is the same write.
        batch.set_is_idempotent(true);
        let values: Vec<(Uuid, &[u8])> = chunk
            .iter()
            .map(|hash| {
                batch.append_statement(statements.insert_erased_impression.clone());
                (id.as_uuid(), hash.as_bytes().as_slice())
            })
            .collect();
        session
            .batch(&batch, values)
            .await
            .map_err(failed("recording an erasure's impressions"))?;
    }
    Ok(())
}

pub(crate) async fn impressions(
    session: &Session,
    statements: &SubjectStatements,
    id: ErasureId,
) -> Result<Vec<SubjectHash>, StoreError> {
    const CONTEXT: &str = "reading an erasure's impressions";
    let rows: Vec<(Vec<u8>,)> = read_all(
        session,
        &statements.select_erased_impressions,
        (id.as_uuid(),),
        CONTEXT,
    )
    .await?;
    rows.into_iter()
        .map(|(hash,)| hash_of(Some(hash)).map_err(|why| corrupt(CONTEXT, why)))
        .collect()
}

pub(crate) async fn privacy_key(
    session: &Session,
    statements: &SubjectStatements,
    candidate: &PrivacyKey,
) -> Result<PrivacyKey, StoreError> {
    const CONTEXT: &str = "storing the privacy key";
    let result = session
        .execute_unpaged(
            &statements.insert_key,
            (SUBJECT_HASH_KEY, candidate.as_bytes().as_slice()),
        )
        .await
        .map_err(failed(CONTEXT))?;
    if transaction_applied(result, CONTEXT)? {
        return Ok(candidate.clone());
    }
    stored_key(session, statements, SUBJECT_HASH_KEY, CONTEXT).await
}

/// A day's key for the hashes of Global Privacy Control beacons (`gpc_day:2026-11-28`),
/// stored once with a lightweight transaction that lets it expire after `ttl` seconds.
pub(crate) async fn day_key(
    session: &Session,
    statements: &SubjectStatements,
    day: Day,
    candidate: &PrivacyKey,
    ttl: i32,
) -> Result<PrivacyKey, StoreError> {
    const CONTEXT: &str = "storing a day key";
    let name = format!("gpc_day:{}", day.date());
    let result = session
        .execute_unpaged(
            &statements.insert_day_key,
            (name.as_str(), candidate.as_bytes().as_slice(), ttl),
        )
        .await
        .map_err(failed(CONTEXT))?;
    if transaction_applied(result, CONTEXT)? {
        return Ok(candidate.clone());
    }
    stored_key(session, statements, &name, CONTEXT).await
}

/// A key stored under `name`, after a lost transaction: another process stored its key first
/// (or this call's first attempt did), so the committed one is read through Paxos.
async fn stored_key(
    session: &Session,
    statements: &SubjectStatements,
    name: &str,
    context: &'static str,
) -> Result<PrivacyKey, StoreError> {
    let stored: Option<(Option<Vec<u8>>,)> =
        read_one(session, &statements.select_key_serial, (name,), context).await?;
    let bytes = stored.and_then(|(key,)| key).ok_or_else(|| {
        StoreError::internal_message(format!("{context}: no key could be read back"))
    })?;
    let bytes = <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| {
        // The length only: the key is a secret.
        corrupt(context, format!("a stored key of {} bytes", bytes.len()))
    })?;
    Ok(PrivacyKey::new(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> ErasureRecord {
        let at = |text: &str| text.parse::<DateTime<Utc>>().expect("time");
        let mut record = ErasureRecord::requested(
            Subject::User(UserId::new(Uuid::from_u128(7))),
            SubjectHash::new([3; 32]),
            None,
            at("2026-11-28T12:00:00Z"),
        );
        record.completed_at = Some(at("2026-11-28T11:00:00Z"));
        record
    }

    #[test]
    fn the_done_form_is_written_after_the_request_whatever_the_clocks() {
        let record = record();
        let requested = ErasureValues::requested(&record).written_at;
        // Completed by a process whose clock is an hour behind the requester's.
        assert!(ErasureValues::done(&record).written_at > requested);
        let later = ErasureRecord {
            completed_at: Some(record.requested_at + chrono::Duration::minutes(5)),
            ..record.clone()
        };
        assert_eq!(
            ErasureValues::done(&later).written_at,
            (record.requested_at + chrono::Duration::minutes(5)).timestamp_micros()
        );
    }

    #[test]
    fn the_done_form_writes_the_subject_null_and_the_status_done() {
        let record = record();
        let done = ErasureValues::done(&record);
        assert!(matches!(done.user_id, MaybeUnset::Set(None)));
        assert_eq!(done.status, "done");
        assert!(matches!(
            ErasureValues::requested(&record).user_id,
            MaybeUnset::Set(Some(_))
        ));
    }

    #[test]
    fn stored_rows_decode_and_damaged_ones_are_refused() {
        let row = |kind: Option<&str>, user: Option<u128>, hash: Vec<u8>| StoredErasure {
            subject_kind: kind.map(str::to_owned),
            user_id: user.map(Uuid::from_u128),
            site: None,
            guid: None,
            subject_hash: Some(hash),
            scope: None,
            requested_at: Some(record().requested_at),
            status: Some("pending".to_owned()),
            completed_at: None,
        };
        let id = record().id;
        let decoded = row(Some("user"), Some(7), vec![3; 32])
            .into_record(id, None)
            .expect("decodes");
        assert_eq!(decoded.subject, record().subject);
        // The done form: kind kept, subject gone.
        let done = row(Some("user"), None, vec![3; 32])
            .into_record(id, None)
            .expect("decodes");
        assert_eq!(done.subject, None);
        assert!(
            row(Some("robot"), Some(7), vec![3; 32])
                .into_record(id, None)
                .is_err()
        );
        assert!(
            row(Some("user"), Some(7), vec![3; 31])
                .into_record(id, None)
                .is_err()
        );
    }

    #[test]
    fn a_visitor_record_names_site_and_guid_until_done() {
        let visitor = Subject::Visitor {
            site: SiteId::parse("shop.example").expect("site"),
            guid: Guid::parse("visitor 1").expect("guid"),
        };
        let record = ErasureRecord::requested(
            visitor.clone(),
            SubjectHash::new([3; 32]),
            None,
            "2026-11-28T12:00:00Z".parse().expect("time"),
        );
        let requested = ErasureValues::requested(&record);
        assert!(matches!(
            requested.site,
            MaybeUnset::Set(Some("shop.example"))
        ));
        assert!(matches!(requested.guid, MaybeUnset::Set(Some("visitor 1"))));
        assert!(matches!(requested.user_id, MaybeUnset::Unset));
        let done = ErasureValues::done(&record);
        assert!(matches!(done.site, MaybeUnset::Set(None)));
        assert!(matches!(done.guid, MaybeUnset::Set(None)));
        let stored = StoredErasure {
            subject_kind: Some("visitor".to_owned()),
            user_id: None,
            site: Some("shop.example".to_owned()),
            guid: Some("visitor 1".to_owned()),
            subject_hash: Some(vec![3; 32]),
            scope: None,
            requested_at: Some(record.requested_at),
            status: Some("pending".to_owned()),
            completed_at: None,
        };
        let decoded = stored.into_record(record.id, None).expect("decodes");
        assert_eq!(decoded.subject, Some(visitor));
    }
}

//! Beacons and live unique-visitor sketches in the embedded store.

use super::committer::{Appended, Merged, Removals, log_records};
use super::engine::{Table, corrupt};
use super::{EmbeddedStore, rows, site_keys};
use crate::domain::beacon::{Beacon, Features, Guid, VisitPartition};
use crate::domain::privacy::VisitorDay;
use crate::domain::time::EventTime;
use crate::store::{SketchBatch, SketchPartition, SketchRow, StoreError, VisitRow, VisitStore};
use async_trait::async_trait;

#[async_trait]
impl VisitStore for EmbeddedStore {
    async fn write_visits(
        &self,
        partition: &VisitPartition,
        visits: &[Beacon],
        visitors: &[VisitorDay],
    ) -> Result<(), StoreError> {
        let prefix = site_keys::visit_prefix(partition);
        // In the beacons' commit: an entry is durable exactly when its beacons are.
        let entries = visitors
            .iter()
            .map(|entry| {
                let key = site_keys::visitor_day_key(&entry.site, entry.guid.as_str(), entry.day);
                (Table::VisitorDay, key, Vec::new())
            })
            .collect();
        let records = visits
            .iter()
            .map(|visit| Appended {
                table: Table::VisitLog,
                prefix: prefix.clone(),
                record: visit_record(visit),
            })
            .collect();
        self.committer
            .commit_appended_with("writing beacons", entries, records)
            .await
    }

    async fn read_visits(&self, partition: &VisitPartition) -> Result<Vec<VisitRow>, StoreError> {
        self.visits_of(partition, false).await
    }

    async fn read_visits_with_agents(
        &self,
        partition: &VisitPartition,
    ) -> Result<Vec<VisitRow>, StoreError> {
        self.visits_of(partition, true).await
    }

    async fn write_sketches(&self, batches: &[SketchBatch]) -> Result<(), StoreError> {
        let rows = batches
            .iter()
            .flat_map(|(partition, rows)| {
                rows.iter().map(move |row| {
                    (
                        Table::VisitSketch,
                        site_keys::sketch_key(partition, row.hour, row.writer),
                        row.sketch.clone(),
                    )
                })
            })
            .collect();
        self.write("writing sketches", rows).await
    }

    async fn read_sketches(
        &self,
        partition: &SketchPartition,
    ) -> Result<Vec<SketchRow>, StoreError> {
        const CONTEXT: &str = "reading sketches";
        let prefix = site_keys::sketch_prefix(partition);
        let prefix_len = prefix.len();
        let rows = self.scan(Table::VisitSketch, prefix, None, CONTEXT).await?;
        rows.iter()
            .map(|(key, value)| {
                let (hour, writer) = site_keys::decode_sketch_key(key, prefix_len)
                    .ok_or_else(|| corrupt(CONTEXT))?;
                Ok(SketchRow {
                    hour,
                    writer,
                    sketch: value.to_vec(),
                    // Not kept: one process writes this folder, in order.
                    captured_at: 0,
                })
            })
            .collect()
    }
}

impl EmbeddedStore {
    /// Deletes beacons of one partition by their identities: the row of each written by
    /// format 3, and their records in the logs, each log row rewritten without them in the
    /// commit thread (a row left empty goes).
    pub(super) async fn erase_visit_rows(
        &self,
        partition: &VisitPartition,
        visits: &[VisitRow],
    ) -> Result<(), StoreError> {
        const CONTEXT: &str = "erasing beacons";
        if visits.is_empty() {
            return Ok(());
        }
        let prefix = site_keys::visit_prefix(partition);
        let identities: std::collections::HashSet<Vec<u8>> = visits
            .iter()
            .map(|visit| {
                site_keys::visit_identity(
                    visit.timestamp.instant(),
                    visit.guid.as_str(),
                    &visit.features.combination_key(),
                )
            })
            .collect();
        let removals: Removals = identities
            .iter()
            .map(|identity| {
                let mut key = prefix.clone();
                key.extend_from_slice(identity);
                (Table::Visit, key)
            })
            .collect();
        // The identities to take out, in the logs' own record layout.
        let mut erased = Vec::new();
        for identity in &identities {
            let len = u32::try_from(identity.len()).unwrap_or(u32::MAX);
            erased.extend_from_slice(&len.to_be_bytes());
            erased.extend_from_slice(identity);
        }
        let logs = self.scan(Table::VisitLog, prefix, None, CONTEXT).await?;
        let mut merged = Vec::new();
        for (key, log) in &logs {
            let holds = log_records(log).any(|record| {
                record
                    .and_then(decode_visit_record)
                    .is_some_and(|(identity, _)| identities.contains(identity))
            });
            if holds {
                merged.push(Merged {
                    table: Table::VisitLog,
                    key: key.to_vec(),
                    value: erased.clone(),
                    merge: without_records,
                });
            }
        }
        self.committer
            .commit_removing(CONTEXT, removals, merged)
            .await
    }
}

/// A log row without the beacons whose identities `erased` lists (as log records). A row
/// that does not decode is kept as it is: damaging it further would lose other beacons.
fn without_records(stored: Option<&[u8]>, erased: &[u8]) -> Vec<u8> {
    let Some(stored) = stored else {
        return Vec::new();
    };
    let erased: std::collections::HashSet<&[u8]> = log_records(erased).flatten().collect();
    let mut kept = Vec::with_capacity(stored.len());
    for record in log_records(stored) {
        let Some((record, (identity, _))) =
            record.and_then(|record| Some((record, decode_visit_record(record)?)))
        else {
            return stored.to_vec();
        };
        if erased.contains(identity) {
            continue;
        }
        let len = u32::try_from(record.len()).unwrap_or(u32::MAX);
        kept.extend_from_slice(&len.to_be_bytes());
        kept.extend_from_slice(record);
    }
    kept
}

/// Leaves one copy of each beacon, in identity order (time, guid, features: what the key of a
/// format 3 row holds after its partition). A beacon sent twice (a retry) is one beacon, and
/// it is valid if any copy is: a later copy replaces an earlier one unless it would turn a
/// valid beacon invalid, as the guarded write of one row per beacon did. `copies` come in the
/// order they were written.
fn one_copy_each(copies: &mut Vec<(&[u8], &[u8])>) {
    // Stable: the copies of one beacon stay in the order they were written.
    copies.sort_by(|a, b| a.0.cmp(b.0));
    copies.dedup_by(|later, kept| {
        if later.0 != kept.0 {
            return false;
        }
        if !rows::visit_is_valid(kept.1) || rows::visit_is_valid(later.1) {
            kept.1 = later.1;
        }
        true
    });
}

impl EmbeddedStore {
    /// Every beacon of one partition, with its user agent if `with_agents` (decoded either
    /// way: it is the traffic part's tail).
    async fn visits_of(
        &self,
        partition: &VisitPartition,
        with_agents: bool,
    ) -> Result<Vec<VisitRow>, StoreError> {
        const CONTEXT: &str = "reading beacons";
        let prefix = site_keys::visit_prefix(partition);
        let prefix_len = prefix.len();
        let single_rows = self
            .scan(Table::Visit, prefix.clone(), None, CONTEXT)
            .await?;
        let logs = self.scan(Table::VisitLog, prefix, None, CONTEXT).await?;
        // Every stored copy, in the order written: format 3 rows first, then the logs in key
        // order, which is the order of the commits that wrote them.
        let mut copies: Vec<(&[u8], &[u8])> = Vec::with_capacity(single_rows.len());
        for (key, value) in &single_rows {
            let identity = key.get(prefix_len..).ok_or_else(|| corrupt(CONTEXT))?;
            copies.push((identity, &value[..]));
        }
        for (_, log) in &logs {
            for record in log_records(log) {
                copies.push(
                    record
                        .and_then(decode_visit_record)
                        .ok_or_else(|| corrupt(CONTEXT))?,
                );
            }
        }
        one_copy_each(&mut copies);
        copies
            .into_iter()
            .map(|(identity, traffic)| {
                let (at, guid, features) =
                    site_keys::decode_visit_key(identity, 0).ok_or_else(|| corrupt(CONTEXT))?;
                let (invalid, user_agent) =
                    rows::decode_traffic_suffix(traffic).ok_or_else(|| corrupt(CONTEXT))?;
                Ok(VisitRow {
                    timestamp: EventTime::from_stored(at),
                    guid: Guid::from_stored(guid.to_owned()),
                    features: Features::from_combination_key(features)
                        .ok_or_else(|| corrupt(CONTEXT))?,
                    invalid,
                    user_agent: user_agent.filter(|_| with_agents),
                })
            })
            .collect()
    }
}

/// A beacon in a log row: the length of its identity, the identity (as in
/// [`site_keys::visit_identity`]), then its traffic part ([`rows::traffic_suffix`]).
fn visit_record(visit: &Beacon) -> Vec<u8> {
    let identity = site_keys::visit_identity(
        visit.timestamp.instant(),
        visit.guid.as_str(),
        &visit.features.combination_key(),
    );
    let traffic = rows::traffic_suffix(visit.invalid, visit.user_agent.as_ref());
    let mut record = Vec::with_capacity(2 + identity.len() + traffic.len());
    // An identity is a timestamp, a guid and features bounded by validation: far below 64 KiB.
    let len = u16::try_from(identity.len()).unwrap_or(u16::MAX);
    record.extend_from_slice(&len.to_be_bytes());
    record.extend_from_slice(&identity);
    record.extend_from_slice(&traffic);
    record
}

/// [`visit_record`] back: the identity and the traffic part.
fn decode_visit_record(record: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = record.split_first_chunk::<2>()?;
    rest.split_at_checked(usize::from(u16::from_be_bytes(*len)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::beacon::SiteId;
    use crate::domain::bucket::BucketCount;
    use crate::domain::time::Day;
    use crate::domain::traffic::InvalidReason;
    use crate::store::embedded::Fsync;
    use chrono::{DateTime, Utc};

    fn partition() -> VisitPartition {
        VisitPartition {
            site: SiteId::parse("example.com").expect("valid"),
            day: Day::new("2026-11-01".parse().expect("date")),
            bucket: BucketCount::ONE.ids().next().expect("bucket 0"),
        }
    }

    fn beacon(guid: &str, second: i64, invalid: Option<InvalidReason>) -> Beacon {
        let at: DateTime<Utc> = "2026-11-01T10:00:00Z".parse().expect("time");
        Beacon {
            site: partition().site,
            guid: Guid::parse(guid).expect("valid guid"),
            timestamp: EventTime::from_epoch_millis(
                (at.timestamp() + second) * 1000,
                at + chrono::Duration::hours(1),
            )
            .expect("valid time"),
            features: Features::new([("page".to_owned(), "/a".to_owned())].into())
                .expect("valid features"),
            user_agent: None,
            invalid,
        }
    }

    fn summary(rows: &[VisitRow]) -> Vec<(String, bool)> {
        rows.iter()
            .map(|row| (row.guid.as_str().to_owned(), row.invalid.is_none()))
            .collect()
    }

    /// Beacons of a format 3 folder (a row each) and of this one (a row per commit) read as one
    /// list in time order, each beacon once, valid if any copy is.
    #[tokio::test]
    async fn beacons_of_both_layouts_read_once_each_and_a_valid_copy_wins() {
        let folder = tempfile::tempdir().expect("temp dir");
        let store = EmbeddedStore::open_for_test(folder.path(), Fsync::Never);
        let partition = partition();
        let bot = Some(InvalidReason::BotUserAgent);
        // As format 3 wrote them: one row per beacon.
        let old = [beacon("old", 1, None), beacon("retried", 2, None)];
        let rows = old
            .iter()
            .map(|visit| {
                let key = site_keys::visit_key(
                    &partition,
                    visit.timestamp.instant(),
                    visit.guid.as_str(),
                    &visit.features.combination_key(),
                );
                (Table::Visit, key, rows::traffic_suffix(None, None))
            })
            .collect();
        store.write("format 3 rows", rows).await.expect("written");
        for visits in [
            vec![beacon("retried", 2, bot), beacon("new", 3, bot)],
            vec![beacon("new", 3, None), beacon("later", 4, bot)],
            vec![beacon("new", 3, bot)],
        ] {
            store
                .write_visits(&partition, &visits, &[])
                .await
                .expect("stored");
        }
        let read = store.read_visits(&partition).await.expect("read");
        assert_eq!(
            summary(&read),
            vec![
                ("old".to_owned(), true),
                ("retried".to_owned(), true),
                ("new".to_owned(), true),
                ("later".to_owned(), false),
            ]
        );
        assert_eq!(read[3].invalid, bot);
    }

    /// A visitor's beacons go from the format 3 rows and from the log rows that hold them,
    /// each log row keeping its other beacons; a log row left empty goes. Its index entries
    /// are written in the beacons' commit, and deleted.
    #[tokio::test]
    async fn erasing_beacons_takes_them_out_of_their_log_rows_only() {
        use crate::domain::privacy::VisitorDay;
        use crate::store::SubjectStore;
        let folder = tempfile::tempdir().expect("temp dir");
        let store = EmbeddedStore::open_for_test(folder.path(), Fsync::Never);
        let partition = partition();
        let old = beacon("erased", 1, None);
        let key = site_keys::visit_key(
            &partition,
            old.timestamp.instant(),
            old.guid.as_str(),
            &old.features.combination_key(),
        );
        store
            .write(
                "format 3 rows",
                vec![(Table::Visit, key, rows::traffic_suffix(None, None))],
            )
            .await
            .expect("written");
        let entry = |guid: &str| VisitorDay {
            site: partition.site.clone(),
            guid: Guid::parse(guid).expect("guid"),
            day: partition.day,
        };
        store
            .write_visits(
                &partition,
                &[beacon("erased", 2, None), beacon("kept", 3, None)],
                &[entry("erased"), entry("kept")],
            )
            .await
            .expect("stored");
        store
            .write_visits(&partition, &[beacon("erased", 4, None)], &[])
            .await
            .expect("stored");
        let erased = entry("erased");
        assert_eq!(
            store
                .read_visitor_days(&erased.site, &erased.guid)
                .await
                .expect("read"),
            vec![partition.day]
        );
        let found: Vec<VisitRow> = store
            .read_visits(&partition)
            .await
            .expect("read")
            .into_iter()
            .filter(|row| row.guid.as_str() == "erased")
            .collect();
        assert_eq!(found.len(), 3);

        store
            .erase_visits(&partition, &found)
            .await
            .expect("erased");
        store.erase_visits(&partition, &found).await.expect("again");
        store
            .delete_visitor_days(std::slice::from_ref(&erased), chrono::Utc::now())
            .await
            .expect("deleted");

        let read = store.read_visits(&partition).await.expect("read");
        assert_eq!(summary(&read), vec![("kept".to_owned(), true)]);
        let logs = store
            .scan(
                Table::VisitLog,
                site_keys::visit_prefix(&partition),
                None,
                "test",
            )
            .await
            .expect("scanned");
        assert_eq!(
            logs.len(),
            1,
            "the log row that held only erased beacons is gone"
        );
        assert!(
            store
                .read_visitor_days(&erased.site, &erased.guid)
                .await
                .expect("read")
                .is_empty()
        );
        let kept = entry("kept");
        assert_eq!(
            store
                .read_visitor_days(&kept.site, &kept.guid)
                .await
                .expect("read"),
            vec![partition.day]
        );
    }
}

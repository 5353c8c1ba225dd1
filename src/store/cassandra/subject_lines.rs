//! The subject directory on Cassandra (`migrations/0022_subject_lines_by_week.cql`): which
//! advertiser-weeks hold event-index entries or conversions of a user. A line lives in the
//! partition of its (week, bucket of the user), so a partition holds one week's lines of
//! 1/1024 of the users whatever the retention; the weeks that hold lines are listed apart, so
//! a user's lines are one clustering slice per week, read at once.

use super::CassandraStore;
use super::statements::{execute_each, read_all, write_partition};
use super::subject_statements::SHARD;
use crate::domain::conversion::index::Week;
use crate::domain::ids::{AdvertiserId, UserId};
use crate::domain::privacy::SubjectWeek;
use crate::store::StoreError;
use futures::{StreamExt, TryStreamExt};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Mutex;
use uuid::Uuid;

/// Buckets of a week's lines. A user's lines of a week are a clustering slice of one of them,
/// so one flush's lines, of thousands of users, are a few hundred batched writes rather than
/// one write per user; at 10 million distinct users a week a partition holds about 10,000
/// lines (a few hundred KB).
const SUBJECT_BUCKETS: u64 = 1024;
/// Lines in one unlogged batch at most, and batches (or reads) in flight.
const LINES_PER_BATCH: usize = 100;
const IN_FLIGHT: usize = 32;

fn bucket_of(user: UserId) -> i16 {
    // Below 1024, so it fits.
    (xxhash_rust::xxh3::xxh3_64(user.as_uuid().as_bytes()) % SUBJECT_BUCKETS) as i16
}

/// A line's key, as bound: its partition (week, bucket), then user and advertiser.
fn line_key(line: &SubjectWeek) -> (i32, i16, Uuid, Uuid) {
    (
        line.week.get(),
        bucket_of(line.user_id),
        line.user_id.as_uuid(),
        line.advertiser_id.as_uuid(),
    )
}

/// The weeks this process has listed in `subject_line_week`, so that it lists each once.
/// A week's row expires with its lines, after which no line of that week is written again
/// (its events are past retention and refused), so remembering it for the process's life is
/// safe; it holds one number per week the process wrote lines for.
#[derive(Default)]
pub(super) struct ListedWeeks(Mutex<HashSet<Week>>);

impl ListedWeeks {
    fn missing(&self, weeks: impl Iterator<Item = Week>) -> BTreeSet<Week> {
        let listed = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        weeks.filter(|week| !listed.contains(week)).collect()
    }

    fn remember(&self, weeks: &BTreeSet<Week>) {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .extend(weeks.iter().copied());
    }
}

/// Lines grouped by partition, at most [`LINES_PER_BATCH`] a group.
fn line_batches(lines: &[SubjectWeek]) -> Vec<Vec<&SubjectWeek>> {
    let mut by_partition: HashMap<(Week, i16), Vec<&SubjectWeek>> = HashMap::new();
    for line in lines {
        by_partition
            .entry((line.week, bucket_of(line.user_id)))
            .or_default()
            .push(line);
    }
    by_partition
        .into_values()
        .flat_map(|group| {
            group
                .chunks(LINES_PER_BATCH)
                .map(<[&SubjectWeek]>::to_vec)
                .collect::<Vec<_>>()
        })
        .collect()
}

impl CassandraStore {
    /// Adds `lines`: the weeks they name are listed first, so no line is ever unreachable.
    /// Each line, and each week's row, expires with the last day of its week: no sooner than
    /// the entries it leads to, which expire with their own days.
    pub(super) async fn write_subject_lines(
        &self,
        lines: &[SubjectWeek],
    ) -> Result<(), StoreError> {
        if lines.is_empty() {
            return Ok(());
        }
        let statements = &self.prepared().await?.subjects;
        let unlisted = self
            .listed_weeks
            .missing(lines.iter().map(|line| line.week));
        let weeks: Vec<Week> = unlisted.iter().copied().collect();
        execute_each(
            &self.session,
            &statements.insert_line_week,
            &weeks,
            IN_FLIGHT,
            |week| (SHARD, week.get(), self.raw_ttl(week.last_day())),
            "listing the subject directory's weeks",
        )
        .await?;
        self.listed_weeks.remember(&unlisted);
        let session = &*self.session;
        let writes: Vec<_> = line_batches(lines)
            .into_iter()
            .map(|batch| {
                let rows = batch
                    .into_iter()
                    .map(|line| {
                        let (week, bucket, user, advertiser) = line_key(line);
                        let ttl = self.raw_ttl(line.week.last_day());
                        (week, bucket, user, advertiser, ttl)
                    })
                    .collect();
                write_partition(
                    session,
                    &statements.insert_subject_line,
                    rows,
                    "writing the subject directory",
                )
            })
            .collect();
        futures::stream::iter(writes)
            .buffer_unordered(IN_FLIGHT)
            .try_collect::<()>()
            .await
    }

    /// Every line of `user`: one slice per week that holds lines, read at once, and the
    /// slice of the directory as migration 0018 kept it.
    pub(super) async fn read_subject_lines(
        &self,
        user: UserId,
    ) -> Result<Vec<SubjectWeek>, StoreError> {
        let statements = &self.prepared().await?.subjects;
        let weeks: Vec<i32> = read_all(
            &self.session,
            &statements.select_line_weeks,
            (SHARD,),
            "reading the subject directory's weeks",
        )
        .await?
        .into_iter()
        .map(|(week,): (i32,)| week)
        .collect();
        let bucket = bucket_of(user);
        let session = &*self.session;
        let by_week = futures::stream::iter(weeks)
            .map(|week| async move {
                let advertisers: Vec<(Uuid,)> = read_all(
                    session,
                    &statements.select_subject_lines,
                    (week, bucket, user.as_uuid()),
                    "reading the subject directory",
                )
                .await?;
                Ok::<_, StoreError>(
                    advertisers
                        .into_iter()
                        .map(move |(advertiser,)| (AdvertiserId::new(advertiser), Week::new(week))),
                )
            })
            .buffer_unordered(IN_FLIGHT)
            .try_collect::<Vec<_>>();
        let legacy = read_all::<(Uuid, i32)>(
            session,
            &statements.select_legacy_lines,
            (bucket, user.as_uuid()),
            "reading the subject directory of migration 0018",
        );
        let (by_week, legacy) = futures::try_join!(by_week, legacy)?;
        let lines: BTreeSet<SubjectWeek> = by_week
            .into_iter()
            .flatten()
            .chain(
                legacy
                    .into_iter()
                    .map(|(advertiser, week)| (AdvertiserId::new(advertiser), Week::new(week))),
            )
            .map(|(advertiser_id, week)| SubjectWeek {
                user_id: user,
                advertiser_id,
                week,
            })
            .collect();
        Ok(lines.into_iter().collect())
    }

    /// Deletes `lines` where they are kept now and where migration 0018 kept them.
    pub(super) async fn delete_subject_lines(
        &self,
        lines: &[SubjectWeek],
    ) -> Result<(), StoreError> {
        let statements = &self.prepared().await?.subjects;
        execute_each(
            &self.session,
            &statements.delete_subject_line,
            lines,
            IN_FLIGHT,
            line_key,
            "deleting from the subject directory",
        )
        .await?;
        execute_each(
            &self.session,
            &statements.delete_legacy_line,
            lines,
            IN_FLIGHT,
            |line| {
                (
                    bucket_of(line.user_id),
                    line.user_id.as_uuid(),
                    line.advertiser_id.as_uuid(),
                    line.week.get(),
                )
            },
            "deleting from the subject directory of migration 0018",
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(user: u128, advertiser: u128, week: i32) -> SubjectWeek {
        SubjectWeek {
            user_id: UserId::new(Uuid::from_u128(user)),
            advertiser_id: AdvertiserId::new(Uuid::from_u128(advertiser)),
            week: Week::new(week),
        }
    }

    #[test]
    fn a_batch_holds_the_lines_of_one_week_and_bucket() {
        let lines: Vec<SubjectWeek> = (0..250)
            .map(|advertiser| line(7, advertiser, 2_900))
            .chain([line(7, 1, 2_901)])
            .collect();
        let batches = line_batches(&lines);
        assert_eq!(
            batches.len(),
            4,
            "250 lines of one partition, then 1 of another"
        );
        for batch in &batches {
            assert!(batch.len() <= LINES_PER_BATCH);
            let partition = (batch[0].week, bucket_of(batch[0].user_id));
            assert!(
                batch
                    .iter()
                    .all(|line| (line.week, bucket_of(line.user_id)) == partition)
            );
        }
    }

    #[test]
    fn a_week_is_listed_once() {
        let listed = ListedWeeks::default();
        let missing = listed.missing([Week::new(1), Week::new(2), Week::new(1)].into_iter());
        assert_eq!(missing.len(), 2);
        listed.remember(&missing);
        assert!(listed.missing([Week::new(2)].into_iter()).is_empty());
        assert_eq!(listed.missing([Week::new(3)].into_iter()).len(), 1);
    }
}

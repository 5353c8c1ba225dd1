//! One user's billable window counted by several server processes (a load balancer sent the
//! user's impressions to more than one): each process publishes the users whose window it
//! counted, and once the window has closed it gives up ("cedes") those an earlier publication
//! of a listed process already holds, so that across the processes sharing a store each window
//! counts once (docs/DESIGN.md, "Delivery and freshness"). A process that saw no other listed
//! at its last comparison (a second) publishes nothing: there is no one to compare with.
//!
//! Errs high, never low. Publications are ranked alike by every process: kept ones first, then
//! by (time, writer), so exactly one process keeps each window; a process gives a window up
//! only to a process still listed. While any process repairs a gone one's counts ("the day's
//! total less the others' rows as read"), no process gives anything up: what it counted until
//! the repair is over it keeps, and publishes as kept, so that the processes that did not count
//! it before the repair give it up instead. Whenever a rule holds a window back (a publication
//! not yet visible, a writer that has left or only just arrived, two kept publications, a full
//! ledger), it counts
//! twice until its day is sealed, which stops a campaign early.

use crate::domain::ids::{CampaignKey, UserId};
use crate::domain::process::{ProcessId, ProcessReport};
use crate::domain::time::Day;
use crate::store::WindowPublication;
use chrono::{DateTime, TimeDelta, Utc};
use std::collections::{HashMap, HashSet};

/// How long after a window closes, or after this process's latest publication of it, the
/// window is compared: every process's publications of it are stored by then (each publishes
/// about four times a second).
pub const GRACE: TimeDelta = TimeDelta::seconds(2);
/// How long after its first comparison a window is compared again, for what was kept: a
/// publication ranked before this process's may have taken longer than [`GRACE`] to be stored
/// (a slow or failing node), and the process that stored it may have kept the window too.
pub const RECHECK: TimeDelta = TimeDelta::seconds(30);
/// Users remembered for comparison, across campaigns (about 40 bytes each). Past it, windows
/// are counted without being published: they may count twice until their day is sealed.
pub const MAX_ENTRIES: usize = 1_000_000;

/// One campaign's billable window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WindowKey {
    pub campaign: CampaignKey,
    pub start: DateTime<Utc>,
}

/// A user whose window this process counted, and where that count sits: the day counter and
/// the keyed hash it is remembered under there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub user: UserId,
    pub day: Day,
    pub key: u64,
}

/// Entries of one window published at one time.
#[derive(Debug, Clone)]
pub struct Published {
    pub at: DateTime<Utc>,
    pub entries: Vec<Entry>,
    /// Set once compared: when what was kept is compared again, for the last time.
    recheck_at: Option<DateTime<Utc>>,
}

impl Published {
    pub fn new(at: DateTime<Utc>, entries: Vec<Entry>) -> Self {
        Self {
            at,
            entries,
            recheck_at: None,
        }
    }

    fn ready(&self, closes: DateTime<Utc>, now: DateTime<Utc>) -> bool {
        match self.recheck_at {
            None => self.at.max(closes) + GRACE <= now,
            Some(recheck_at) => recheck_at <= now,
        }
    }
}

/// Entries taken for one publication: stored, those to compare join the published ones;
/// refused, they go back to wait for the next.
#[derive(Debug, Default)]
pub struct PublicationBatch {
    at: Option<DateTime<Utc>>,
    epoch: u64,
    compare: Vec<(WindowKey, Vec<Entry>)>,
    kept: HashMap<WindowKey, Vec<UserId>>,
}

impl PublicationBatch {
    pub fn is_empty(&self) -> bool {
        self.compare.is_empty() && self.kept.is_empty()
    }

    /// The rows to store, as `writer`: one per window, kept if anything of it is.
    pub fn publications(&self, writer: ProcessId) -> Vec<WindowPublication> {
        let Some(at) = self.at else {
            return Vec::new();
        };
        let row = |window: &WindowKey, keeps: bool, users: Vec<UserId>| WindowPublication {
            campaign: window.campaign,
            window_start: window.start,
            published_at: at,
            writer,
            keeps,
            users,
        };
        let mut rows: HashMap<WindowKey, WindowPublication> = self
            .kept
            .iter()
            .map(|(window, users)| (*window, row(window, true, users.clone())))
            .collect();
        for (window, entries) in &self.compare {
            let users = entries.iter().map(|entry| entry.user);
            match rows.get_mut(window) {
                Some(kept) => kept.users.extend(users),
                None => {
                    rows.insert(*window, row(window, false, users.collect()));
                }
            }
        }
        rows.into_values().collect()
    }
}

/// What this process counted in windows of days not yet sealed, until it is compared.
#[derive(Debug, Default)]
pub struct WindowLedger {
    /// Counted since the last publication, to be compared once published.
    unpublished: HashMap<WindowKey, Vec<Entry>>,
    /// Counted while a repair ran, or before one and not compared yet: published as kept,
    /// never given up.
    kept: HashMap<WindowKey, Vec<UserId>>,
    /// Published, waiting to be compared.
    published: HashMap<WindowKey, Vec<Published>>,
    entries: usize,
    last_published_at: Option<DateTime<Utc>>,
    /// Whether a repair runs: nothing is given up.
    fenced: bool,
    /// Changed whenever a repair begins: a publication taken before is never compared.
    epoch: u64,
}

impl WindowLedger {
    /// Remembers a user counted in `window`; false when the ledger is full (not remembered).
    pub fn note(&mut self, window: WindowKey, entry: Entry) -> bool {
        if self.entries >= MAX_ENTRIES {
            return false;
        }
        if self.fenced {
            self.kept.entry(window).or_default().push(entry.user);
        } else {
            self.unpublished.entry(window).or_default().push(entry);
        }
        self.entries += 1;
        true
    }

    /// A repair runs: everything counted so far, and until [`unfence`](Self::unfence), is kept.
    pub fn fence(&mut self) {
        if self.fenced {
            return;
        }
        self.fenced = true;
        self.epoch += 1;
        for (window, entries) in self.unpublished.drain() {
            let users = entries.iter().map(|entry| entry.user);
            self.kept.entry(window).or_default().extend(users);
        }
        let compared_never: usize = self
            .published
            .drain()
            .flat_map(|(_, publications)| publications)
            .map(|publication| publication.entries.len())
            .sum();
        self.entries -= compared_never.min(self.entries);
    }

    /// No repair runs (any more): what is counted from now on is compared again.
    pub fn unfence(&mut self) {
        self.fenced = false;
    }

    /// Takes what waits to be published, stamped `now` to the millisecond (after any earlier
    /// publication of this process, whatever its clock did).
    pub fn take_unpublished(&mut self, now: DateTime<Utc>) -> PublicationBatch {
        if self.unpublished.is_empty() && self.kept.is_empty() {
            return PublicationBatch::default();
        }
        let millis = now.timestamp_millis();
        let after_last = self
            .last_published_at
            .map_or(i64::MIN, |last| last.timestamp_millis() + 1);
        let at = DateTime::from_timestamp_millis(millis.max(after_last)).unwrap_or(now);
        self.last_published_at = Some(at);
        PublicationBatch {
            at: Some(at),
            epoch: self.epoch,
            compare: self.unpublished.drain().collect(),
            kept: std::mem::take(&mut self.kept),
        }
    }

    /// The batch was stored: what is to be compared waits for it, unless a repair began since
    /// it was taken (then it is kept).
    pub fn published(&mut self, batch: PublicationBatch) {
        let Some(at) = batch.at else { return };
        let comparable = batch.epoch == self.epoch && !self.fenced;
        let mut done: usize = batch.kept.values().map(Vec::len).sum();
        for (window, entries) in batch.compare {
            if comparable && !batch.kept.contains_key(&window) {
                self.published
                    .entry(window)
                    .or_default()
                    .push(Published::new(at, entries));
            } else {
                done += entries.len();
            }
        }
        self.entries -= done.min(self.entries);
    }

    /// The batch could not be stored: it goes out with the next one (kept, if a repair began).
    pub fn restore(&mut self, batch: PublicationBatch) {
        let comparable = batch.epoch == self.epoch && !self.fenced;
        for (window, users) in batch.kept {
            self.kept.entry(window).or_default().extend(users);
        }
        for (window, entries) in batch.compare {
            if comparable {
                self.unpublished.entry(window).or_default().extend(entries);
            } else {
                let users = entries.iter().map(|entry| entry.user);
                self.kept.entry(window).or_default().extend(users);
            }
        }
    }

    /// The windows with publications to compare at `now` (closed, published [`GRACE`] ago,
    /// or due again), with those publications.
    pub fn due(&self, now: DateTime<Utc>, length: TimeDelta) -> Vec<(WindowKey, Vec<Published>)> {
        self.published
            .iter()
            .filter_map(|(window, publications)| {
                let ready: Vec<Published> = publications
                    .iter()
                    .filter(|publication| publication.ready(window.start + length, now))
                    .cloned()
                    .collect();
                (!ready.is_empty()).then_some((*window, ready))
            })
            .collect()
    }

    /// Records `window`'s `compared` publications compared at `now`, `given_up` their users
    /// given up: compared for the first time, what was kept is compared again after
    /// [`RECHECK`]; compared again, the publication is forgotten.
    pub fn settle(
        &mut self,
        window: WindowKey,
        compared: &[Published],
        given_up: &[(DateTime<Utc>, Entry)],
        now: DateTime<Utc>,
    ) {
        let Some(publications) = self.published.get_mut(&window) else {
            return;
        };
        let mut forgotten = 0;
        for publication in publications.iter_mut() {
            let Some(seen) = compared.iter().find(|seen| seen.at == publication.at) else {
                continue;
            };
            if seen.recheck_at.is_some() {
                forgotten += publication.entries.len();
                publication.entries.clear();
                continue;
            }
            let before = publication.entries.len();
            publication.entries.retain(|entry| {
                !given_up.iter().any(|(at, given)| {
                    *at == seen.at && given.key == entry.key && given.day == entry.day
                })
            });
            forgotten += before - publication.entries.len();
            publication.recheck_at = Some(now + RECHECK);
        }
        publications.retain(|publication| !publication.entries.is_empty());
        if publications.is_empty() {
            self.published.remove(&window);
        }
        self.entries -= forgotten.min(self.entries);
    }

    /// Users given up whose row could not be stored in time, counted again: compared again
    /// at the next pass after `at`.
    pub fn compare_again(
        &mut self,
        window: WindowKey,
        given_up: Vec<(DateTime<Utc>, Entry)>,
        at: DateTime<Utc>,
    ) {
        let publications = self.published.entry(window).or_default();
        for (published_at, entry) in given_up {
            match publications
                .iter_mut()
                .find(|publication| publication.at == published_at)
            {
                Some(publication) => publication.entries.push(entry),
                None => publications.push(Published {
                    at: published_at,
                    entries: vec![entry],
                    recheck_at: Some(at),
                }),
            }
            self.entries += 1;
        }
    }
}

/// How every process ranks publications of a window: kept ones first, then by time and writer.
fn rank(keeps: bool, at: DateTime<Utc>, writer: ProcessId) -> (bool, DateTime<Utc>, ProcessId) {
    (!keeps, at, writer)
}

/// Which of `mine` (this process's publications of one window, to compare) a publication of a
/// process in `cede_to` ranked before it already counts: those this process gives up.
pub fn ceded(
    publications: &[WindowPublication],
    me: ProcessId,
    mine: &[Published],
    cede_to: &HashSet<ProcessId>,
) -> Vec<(DateTime<Utc>, Entry)> {
    let mut first: HashMap<UserId, (bool, DateTime<Utc>, ProcessId)> = HashMap::new();
    for publication in publications
        .iter()
        .filter(|publication| publication.writer != me && cede_to.contains(&publication.writer))
    {
        let rank = rank(
            publication.keeps,
            publication.published_at,
            publication.writer,
        );
        for user in &publication.users {
            first
                .entry(*user)
                .and_modify(|held| *held = (*held).min(rank))
                .or_insert(rank);
        }
    }
    mine.iter()
        .flat_map(|publication| {
            let mine = rank(false, publication.at, me);
            let first = &first;
            publication
                .entries
                .iter()
                .filter(move |entry| first.get(&entry.user).is_some_and(|held| *held < mine))
                .map(move |entry| (publication.at, *entry))
        })
        .collect()
}

/// The processes this one may give windows up to: every other listed one, or none at all
/// while any process (this one included) repairs a gone one's counts.
pub fn cede_targets(reports: &[ProcessReport], me: ProcessId) -> Option<HashSet<ProcessId>> {
    if reports.iter().any(|report| report.repairing) {
        return None;
    }
    Some(
        reports
            .iter()
            .filter(|report| report.id != me)
            .map(|report| report.id)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::{AdvertiserId, CampaignId};
    use uuid::Uuid;

    fn campaign() -> CampaignKey {
        CampaignKey {
            advertiser_id: AdvertiserId::new(Uuid::new_v4()),
            campaign_id: CampaignId::new(Uuid::new_v4()),
        }
    }

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().expect("time")
    }

    fn entry(user: UserId) -> Entry {
        Entry {
            user,
            day: Day::new("2026-11-26".parse().expect("date")),
            key: 7,
        }
    }

    fn users<const N: usize>() -> [UserId; N] {
        std::array::from_fn(|_| UserId::new(Uuid::new_v4()))
    }

    fn publication(
        writer: ProcessId,
        published_at: &str,
        keeps: bool,
        users: &[UserId],
    ) -> WindowPublication {
        WindowPublication {
            campaign: campaign(),
            window_start: at("2026-11-26T10:00:00Z"),
            published_at: at(published_at),
            writer,
            keeps,
            users: users.to_vec(),
        }
    }

    fn given_up(
        all: &[WindowPublication],
        me: ProcessId,
        mine: &[Published],
        cede_to: &[ProcessId],
    ) -> Vec<UserId> {
        let cede_to: HashSet<ProcessId> = cede_to.iter().copied().collect();
        ceded(all, me, mine, &cede_to)
            .iter()
            .map(|(_, entry)| entry.user)
            .collect()
    }

    #[test]
    fn the_first_publication_of_a_listed_process_keeps_a_window_and_only_it() {
        let (me, other, gone) = (
            ProcessId::random(),
            ProcessId::random(),
            ProcessId::random(),
        );
        let [shared, mine_only, with_gone, after_me, same_ms] = users();
        let mine = vec![Published::new(
            at("2026-11-26T10:00:30Z"),
            [shared, mine_only, with_gone, after_me, same_ms]
                .map(entry)
                .to_vec(),
        )];
        let theirs = vec![
            publication(other, "2026-11-26T10:00:10Z", false, &[shared]),
            publication(gone, "2026-11-26T10:00:05Z", false, &[with_gone]),
            publication(other, "2026-11-26T10:00:31Z", false, &[after_me]),
            publication(other, "2026-11-26T10:00:30Z", false, &[same_ms]),
        ];
        // Same millisecond: the smaller writer id ranks first.
        let mut expected = vec![shared];
        if other < me {
            expected.push(same_ms);
        }
        assert_eq!(given_up(&theirs, me, &mine, &[other]), expected);

        // The other process, comparing the same rows, gives up exactly what this one keeps.
        let other_mine = vec![
            Published::new(at("2026-11-26T10:00:10Z"), vec![entry(shared)]),
            Published::new(at("2026-11-26T10:00:30Z"), vec![entry(same_ms)]),
            Published::new(at("2026-11-26T10:00:31Z"), vec![entry(after_me)]),
        ];
        let mut all = theirs.clone();
        all.push(publication(
            me,
            "2026-11-26T10:00:30Z",
            false,
            &[shared, mine_only, with_gone, after_me, same_ms],
        ));
        let mut expected = vec![after_me];
        if me < other {
            expected.insert(0, same_ms);
        }
        assert_eq!(given_up(&all, other, &other_mine, &[me]), expected);
    }

    #[test]
    fn a_kept_publication_ranks_before_any_other() {
        let (me, repaired_around) = (ProcessId::random(), ProcessId::random());
        let [user] = users();
        let mine = vec![Published::new(
            at("2026-11-26T10:00:01Z"),
            vec![entry(user)],
        )];
        let kept_later = publication(repaired_around, "2026-11-26T10:00:20Z", true, &[user]);
        assert_eq!(
            given_up(&[kept_later], me, &mine, &[repaired_around]),
            vec![user]
        );
    }

    #[test]
    fn nothing_is_given_up_while_a_repair_runs_nor_to_a_process_no_longer_listed() {
        let (me, other) = (ProcessId::random(), ProcessId::random());
        let report = |id: ProcessId, repairing: bool| ProcessReport {
            id,
            started_at: at("2026-11-26T09:00:00Z"),
            last_report_at: at("2026-11-26T10:00:00Z"),
            repairing,
        };
        assert_eq!(
            cede_targets(&[report(me, false), report(other, false)], me),
            Some(HashSet::from([other]))
        );
        assert_eq!(
            cede_targets(&[report(me, false), report(other, true)], me),
            None
        );
        assert_eq!(cede_targets(&[report(me, true)], me), None);
    }

    #[test]
    fn a_window_is_compared_once_closed_then_once_more_for_what_was_kept() {
        let mut ledger = WindowLedger::default();
        let window = WindowKey {
            campaign: campaign(),
            start: at("2026-11-26T10:00:00Z"),
        };
        let length = TimeDelta::seconds(40);
        let [first, late] = users();
        assert!(ledger.note(window, entry(first)));
        let batch = ledger.take_unpublished(at("2026-11-26T10:00:20Z"));
        assert_eq!(batch.publications(ProcessId::random()).len(), 1);
        ledger.published(batch);
        assert!(ledger.due(at("2026-11-26T10:00:41Z"), length).is_empty());
        let due = ledger.due(at("2026-11-26T10:00:42Z"), length);
        assert_eq!(due.len(), 1);
        // Kept at the first comparison: compared again after RECHECK, then forgotten.
        ledger.settle(window, &due[0].1, &[], at("2026-11-26T10:00:42Z"));
        assert!(ledger.due(at("2026-11-26T10:01:11Z"), length).is_empty());
        let again = ledger.due(at("2026-11-26T10:01:12Z"), length);
        assert_eq!(again[0].1.len(), 1);
        ledger.settle(window, &again[0].1, &[], at("2026-11-26T10:01:12Z"));
        assert_eq!(ledger.entries, 0);

        // A late user published after the window closed waits its own grace; given up, it
        // is done with.
        assert!(ledger.note(window, entry(late)));
        let batch = ledger.take_unpublished(at("2026-11-26T10:05:00Z"));
        ledger.published(batch);
        assert!(ledger.due(at("2026-11-26T10:05:01Z"), length).is_empty());
        let due = ledger.due(at("2026-11-26T10:05:02Z"), length);
        let published = &due[0].1[0];
        let given_up: Vec<(DateTime<Utc>, Entry)> = published
            .entries
            .iter()
            .map(|entry| (published.at, *entry))
            .collect();
        ledger.settle(window, &due[0].1, &given_up, at("2026-11-26T10:05:02Z"));
        assert_eq!(ledger.entries, 0);
        assert!(ledger.due(at("2026-11-26T10:09:00Z"), length).is_empty());

        // Its give-up could not be stored in time: compared again at the next pass.
        ledger.compare_again(window, given_up, at("2026-11-26T10:05:03Z"));
        assert_eq!(ledger.entries, 1);
        let retried = ledger.due(at("2026-11-26T10:05:03Z"), length);
        assert_eq!(retried[0].1[0].entries.len(), 1);
        ledger.settle(window, &retried[0].1, &[], at("2026-11-26T10:05:03Z"));
        assert_eq!(ledger.entries, 0);
    }

    #[test]
    fn what_was_counted_before_or_during_a_repair_is_published_as_kept_and_never_compared() {
        let mut ledger = WindowLedger::default();
        let window = WindowKey {
            campaign: campaign(),
            start: at("2026-11-26T10:00:00Z"),
        };
        let length = TimeDelta::seconds(40);
        let [compared, in_flight, waiting, during, after] = users();
        ledger.note(window, entry(compared));
        let batch = ledger.take_unpublished(at("2026-11-26T10:00:10Z"));
        ledger.published(batch);
        ledger.note(window, entry(in_flight));
        let taken = ledger.take_unpublished(at("2026-11-26T10:00:11Z"));
        ledger.note(window, entry(waiting));

        ledger.fence();
        // Stored after the repair began: kept.
        ledger.published(taken);
        ledger.note(window, entry(during));
        let batch = ledger.take_unpublished(at("2026-11-26T10:00:12Z"));
        let rows = batch.publications(ProcessId::random());
        assert_eq!(rows.len(), 1);
        assert!(rows[0].keeps);
        assert_eq!(rows[0].users, vec![waiting, during]);
        ledger.published(batch);
        assert!(ledger.due(at("2026-11-26T10:01:00Z"), length).is_empty());

        ledger.unfence();
        ledger.note(window, entry(after));
        let batch = ledger.take_unpublished(at("2026-11-26T10:00:13Z"));
        assert!(!batch.publications(ProcessId::random())[0].keeps);
        ledger.published(batch);
        let due = ledger.due(at("2026-11-26T10:01:00Z"), length);
        let compared_now: Vec<UserId> = due[0].1[0].entries.iter().map(|e| e.user).collect();
        assert_eq!(compared_now, vec![after]);
        ledger.settle(window, &due[0].1, &[], at("2026-11-26T10:01:00Z"));
        let again = ledger.due(at("2026-11-26T10:01:30Z"), length);
        ledger.settle(window, &again[0].1, &[], at("2026-11-26T10:01:30Z"));
        assert_eq!(ledger.entries, 0);
    }

    #[test]
    fn publications_of_one_process_are_stamped_in_order() {
        let mut ledger = WindowLedger::default();
        let window = WindowKey {
            campaign: campaign(),
            start: at("2026-11-26T10:00:00Z"),
        };
        let [one, two] = users();
        ledger.note(window, entry(one));
        let first = ledger.take_unpublished(at("2026-11-26T10:00:20Z"));
        ledger.note(window, entry(two));
        // The clock stepped back.
        let second = ledger.take_unpublished(at("2026-11-26T10:00:19Z"));
        assert!(second.at > first.at);
    }
}

//! One user's billable window counted by several server processes (a load balancer sent the
//! user's impressions to more than one): each process publishes the users whose window it
//! counted, and once the window has closed it gives up ("cedes") those a publication ranked
//! before its own already holds, so that across the processes sharing a store each window
//! counts once (docs/DESIGN.md, "Delivery and freshness"). A process that saw no other listed
//! at its last comparison (a second) publishes nothing: there is no one to compare with.
//!
//! Every process ranks a window's publications alike, by (time, writer), so exactly one keeps
//! each user's window: the first-ranked writer never gives it up, whether it still runs, left
//! cleanly (its saved row holds it) or went away (its stored row holds it, and its repair keeps
//! exactly the windows it ranks first in, see [`super::rebuild`]). What is kept at the first
//! comparison is compared once more later, for a publication stored late by a slow node.
//! Whenever a window escapes comparison (a full ledger, a process that only just saw another),
//! it counts twice until its day is sealed, which stops a campaign early.

use crate::domain::ids::{CampaignKey, UserId};
use crate::domain::process::ProcessId;
use crate::domain::time::Day;
use crate::store::WindowPublication;
use chrono::{DateTime, TimeDelta, Utc};
use std::collections::{HashMap, HashSet};

/// How long after a window closes, or after this process's latest publication of it, the
/// window is compared: every process's publications of it are stored by then (each publishes
/// about four times a second).
pub(crate) const GRACE: TimeDelta = TimeDelta::seconds(2);
/// How long after its first comparison a window is compared again, for what was kept: a
/// publication ranked before this process's may have taken longer than [`GRACE`] to be stored
/// (a slow or failing node), and the process that stored it may have kept the window too.
pub(crate) const RECHECK: TimeDelta = TimeDelta::seconds(30);
/// Users remembered for comparison, across campaigns (about 40 bytes each). Past it, windows
/// are counted without being published: they may count twice until their day is sealed.
pub(crate) const MAX_ENTRIES: usize = 1_000_000;

/// One campaign's billable window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct WindowKey {
    pub(crate) campaign: CampaignKey,
    pub(crate) start: DateTime<Utc>,
}

/// A user whose window this process counted, and where that count sits: the day counter and
/// the keyed hash it is remembered under there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Entry {
    pub(crate) user: UserId,
    pub(crate) day: Day,
    pub(crate) key: u64,
}

/// Entries of one window published at one time.
#[derive(Debug, Clone)]
pub(crate) struct Published {
    pub(crate) at: DateTime<Utc>,
    pub(crate) entries: Vec<Entry>,
    /// Set once compared: when what was kept is compared again, for the last time.
    recheck_at: Option<DateTime<Utc>>,
}

impl Published {
    pub(crate) fn new(at: DateTime<Utc>, entries: Vec<Entry>) -> Self {
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

/// Entries taken for one publication: stored, they wait to be compared; refused, they go back
/// to wait for the next.
#[derive(Debug, Default)]
pub(crate) struct PublicationBatch {
    at: Option<DateTime<Utc>>,
    windows: Vec<(WindowKey, Vec<Entry>)>,
}

impl PublicationBatch {
    pub(crate) fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    /// The rows to store, as `writer`: one per window.
    pub(crate) fn publications(&self, writer: ProcessId) -> Vec<WindowPublication> {
        let Some(at) = self.at else {
            return Vec::new();
        };
        self.windows
            .iter()
            .map(|(window, entries)| WindowPublication {
                campaign: window.campaign,
                window_start: window.start,
                published_at: at,
                writer,
                users: entries.iter().map(|entry| entry.user).collect(),
            })
            .collect()
    }
}

/// What this process counted in windows of days not yet sealed, until it is compared.
#[derive(Debug, Default)]
pub(crate) struct WindowLedger {
    /// Counted since the last publication.
    unpublished: HashMap<WindowKey, Vec<Entry>>,
    /// Published, waiting to be compared (or compared again).
    published: HashMap<WindowKey, Vec<Published>>,
    entries: usize,
    last_published_at: Option<DateTime<Utc>>,
}

impl WindowLedger {
    /// Remembers a user counted in `window`; false when the ledger is full (not remembered).
    pub(crate) fn note(&mut self, window: WindowKey, entry: Entry) -> bool {
        if self.entries >= MAX_ENTRIES {
            return false;
        }
        self.unpublished.entry(window).or_default().push(entry);
        self.entries += 1;
        true
    }

    /// Takes what waits to be published, stamped `now` to the millisecond (after any earlier
    /// publication of this process, whatever its clock did).
    pub(crate) fn take_unpublished(&mut self, now: DateTime<Utc>) -> PublicationBatch {
        if self.unpublished.is_empty() {
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
            windows: self.unpublished.drain().collect(),
        }
    }

    /// The batch was stored: its entries wait to be compared.
    pub(crate) fn published(&mut self, batch: PublicationBatch) {
        let Some(at) = batch.at else { return };
        for (window, entries) in batch.windows {
            self.published
                .entry(window)
                .or_default()
                .push(Published::new(at, entries));
        }
    }

    /// The batch could not be stored: it goes out with the next one.
    pub(crate) fn restore(&mut self, batch: PublicationBatch) {
        for (window, entries) in batch.windows {
            self.unpublished.entry(window).or_default().extend(entries);
        }
    }

    /// The windows with publications to compare at `now` (closed, published [`GRACE`] ago,
    /// or due again), with those publications.
    pub(crate) fn due(
        &self,
        now: DateTime<Utc>,
        length: TimeDelta,
    ) -> Vec<(WindowKey, Vec<Published>)> {
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
    pub(crate) fn settle(
        &mut self,
        window: WindowKey,
        compared: &[Published],
        given_up: &[Entry],
        now: DateTime<Utc>,
    ) {
        let Some(publications) = self.published.get_mut(&window) else {
            return;
        };
        // A set, not the slice: a busy window gives up thousands of users at once.
        let given_up: HashSet<&Entry> = given_up.iter().collect();
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
            publication
                .entries
                .retain(|entry| !given_up.contains(entry));
            forgotten += before - publication.entries.len();
            publication.recheck_at = Some(now + RECHECK);
        }
        publications.retain(|publication| !publication.entries.is_empty());
        if publications.is_empty() {
            self.published.remove(&window);
        }
        self.entries -= forgotten.min(self.entries);
    }
}

/// Which of `mine` (this process's publications of one window, to compare) another process
/// holds: the first-ranked of every stored publication and of `mine` is another writer's.
/// This process's own stored publications rank too: one refused by the store yet stored
/// (a timeout) was published again later, and the other processes rank its first copy.
pub(crate) fn ceded(
    publications: &[WindowPublication],
    me: ProcessId,
    mine: &[Published],
) -> Vec<Entry> {
    let first = first_ranked(publications);
    mine.iter()
        .flat_map(|publication| {
            let rank = (publication.at, me);
            let first = &first;
            publication
                .entries
                .iter()
                .filter(move |entry| {
                    first
                        .get(&entry.user)
                        .is_some_and(|held| held.1 != me && *held < rank)
                })
                .copied()
        })
        .collect()
}

/// Each user's first-ranked publication of a window, by (time, writer): the writer that keeps
/// the user's window.
pub(crate) fn first_ranked<'a>(
    publications: impl IntoIterator<Item = &'a WindowPublication>,
) -> HashMap<UserId, (DateTime<Utc>, ProcessId)> {
    let mut first: HashMap<UserId, (DateTime<Utc>, ProcessId)> = HashMap::new();
    for publication in publications {
        let rank = (publication.published_at, publication.writer);
        for user in &publication.users {
            first
                .entry(*user)
                .and_modify(|held| *held = (*held).min(rank))
                .or_insert(rank);
        }
    }
    first
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
            key: user.as_uuid().as_u64_pair().0,
        }
    }

    /// A campaign's window from 10:00:00.
    fn ten_o_clock() -> WindowKey {
        WindowKey {
            campaign: campaign(),
            start: at("2026-11-26T10:00:00Z"),
        }
    }

    fn users<const N: usize>() -> [UserId; N] {
        std::array::from_fn(|_| UserId::new(Uuid::new_v4()))
    }

    fn publication(writer: ProcessId, published_at: &str, users: &[UserId]) -> WindowPublication {
        WindowPublication {
            campaign: campaign(),
            window_start: at("2026-11-26T10:00:00Z"),
            published_at: at(published_at),
            writer,
            users: users.to_vec(),
        }
    }

    fn given_up(all: &[WindowPublication], me: ProcessId, mine: &[Published]) -> Vec<UserId> {
        ceded(all, me, mine)
            .iter()
            .map(|entry| entry.user)
            .collect()
    }

    #[test]
    fn the_first_ranked_publication_keeps_a_window_and_only_it() {
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
            publication(other, "2026-11-26T10:00:10Z", &[shared]),
            // A process no longer running still holds what it ranks first in.
            publication(gone, "2026-11-26T10:00:05Z", &[with_gone]),
            publication(other, "2026-11-26T10:00:31Z", &[after_me]),
            publication(other, "2026-11-26T10:00:30Z", &[same_ms]),
        ];
        // Same millisecond: the smaller writer id ranks first.
        let mut expected = vec![shared, with_gone];
        if other < me {
            expected.push(same_ms);
        }
        assert_eq!(given_up(&theirs, me, &mine), expected);

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
            &[shared, mine_only, with_gone, after_me, same_ms],
        ));
        let mut expected = vec![after_me];
        if me < other {
            expected.insert(0, same_ms);
        }
        assert_eq!(given_up(&all, other, &other_mine), expected);
    }

    #[test]
    fn a_publication_refused_yet_stored_keeps_its_rank_for_its_writer_too() {
        let (me, other) = (ProcessId::random(), ProcessId::random());
        let [user] = users();
        // Mine at :05.250 was reported refused but stored, and went out again at :05.750;
        // the other process published the user in between.
        let stored = vec![
            publication(me, "2026-11-26T10:00:05.250Z", &[user]),
            publication(other, "2026-11-26T10:00:05.500Z", &[user]),
            publication(me, "2026-11-26T10:00:05.750Z", &[user]),
        ];
        let mine = vec![Published::new(
            at("2026-11-26T10:00:05.750Z"),
            vec![entry(user)],
        )];
        let theirs = vec![Published::new(
            at("2026-11-26T10:00:05.500Z"),
            vec![entry(user)],
        )];
        // Exactly one keeps the window: the writer of its first stored copy.
        assert_eq!(given_up(&stored, me, &mine), vec![]);
        assert_eq!(given_up(&stored, other, &theirs), vec![user]);
    }

    #[test]
    fn a_window_is_compared_once_closed_then_once_more_for_what_was_kept() {
        let mut ledger = WindowLedger::default();
        let window = ten_o_clock();
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
        let given = due[0].1[0].entries.clone();
        ledger.settle(window, &due[0].1, &given, at("2026-11-26T10:05:02Z"));
        assert_eq!(ledger.entries, 0);
        assert!(ledger.due(at("2026-11-26T10:09:00Z"), length).is_empty());
    }

    #[test]
    fn a_refused_publication_goes_out_with_the_next() {
        let mut ledger = WindowLedger::default();
        let window = ten_o_clock();
        let [one, two] = users();
        ledger.note(window, entry(one));
        let refused = ledger.take_unpublished(at("2026-11-26T10:00:20Z"));
        ledger.restore(refused);
        ledger.note(window, entry(two));
        let next = ledger.take_unpublished(at("2026-11-26T10:00:21Z"));
        let rows = next.publications(ProcessId::random());
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].users, vec![one, two]);
    }

    #[test]
    fn publications_of_one_process_are_stamped_in_order() {
        let mut ledger = WindowLedger::default();
        let window = ten_o_clock();
        let [one, two] = users();
        ledger.note(window, entry(one));
        let first = ledger.take_unpublished(at("2026-11-26T10:00:20Z"));
        ledger.note(window, entry(two));
        // The clock stepped back.
        let second = ledger.take_unpublished(at("2026-11-26T10:00:19Z"));
        assert!(second.at > first.at);
    }
}

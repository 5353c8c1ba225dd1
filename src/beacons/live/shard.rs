//! One shard of the live sketches: a flat table of sketches found by one precomputed hash of
//! their cell (site, hour, combination), and the queue of those changed since a flush copied
//! them out, so a flush visits only what changed and finds each again without a string compare.
//!
//! A sketch is stored as two rows, each the absolute state of a set of members: its **whole**
//! state under its writer id, and the members it gained since that row was copied under a
//! second writer id (its **recent** row). Readers merge both like any two writers' rows, and a
//! union of sketches never counts a member twice. A flush writes the recent row until the
//! recent rows written since the whole row would add up to more than rewriting the whole row,
//! then the whole row, which empties the recent set: a sketch of size S gaining X members a
//! second is rewritten every √(2S/X) seconds instead of every second (the rent-or-buy rule,
//! within twice the least bytes any schedule writes).

use crate::domain::beacon::SiteId;
use crate::domain::sketch::{BufferedSketch, MemberHash, UniqueSketch};
use crate::domain::time::{Day, HOUR_MILLIS};
use crate::random_id::random_uuid;
use crate::store::SketchPartition;
use chrono::{DateTime, Utc};
use hashbrown::HashTable;
use std::collections::VecDeque;
use std::time::Instant;
use uuid::Uuid;

/// Bytes a recent member is taken to add to its row (the few entries of a recent row lie far
/// apart, so their gaps take more bytes than a long list's).
const RECENT_MEMBER_BYTES: usize = 4;

/// What a sketch is charged against the budget, besides its site and combination text, what
/// the sketch itself holds ([`BufferedSketch::heap_bytes`]) and its recent members: its table slot (at the table's worst
/// load and growth, hence twice), its entry, its place in the flush queue, and the allocator's
/// rounding of the entry and its two texts.
pub(crate) const ENTRY_BASE_BYTES: u64 = (2 * std::mem::size_of::<Box<Entry>>()
    + std::mem::size_of::<Entry>()
    + std::mem::size_of::<Queued>()
    + 48) as u64;

/// A sketch's place, borrowed from a beacon.
#[derive(Clone, Copy)]
pub(crate) struct CellRef<'a> {
    pub(crate) site: &'a SiteId,
    /// Hours since the epoch.
    pub(crate) hour: i64,
    pub(crate) combination: &'a str,
}

/// A sketch's place, owned by a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cell {
    pub(crate) site: SiteId,
    /// Hours since the epoch.
    pub(crate) hour: i64,
    pub(crate) combination: String,
}

impl Cell {
    pub(crate) fn hour_start(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(self.hour * HOUR_MILLIS).unwrap_or_default()
    }

    pub(crate) fn partition(&self) -> SketchPartition {
        SketchPartition {
            site: self.site.clone(),
            day: Day::new(self.hour_start().date_naive()),
            combination: self.combination.clone(),
        }
    }
}

pub(crate) struct Entry {
    /// The cell's hash: the table never hashes a key again, and the queue names the entry by it.
    hash: u64,
    site: SiteId,
    hour: i64,
    combination: Box<str>,
    /// Unique to this entry in the process: a sketch dropped and needed again gets a new one.
    writer: Uuid,
    /// The writer id of the recent row.
    recent_writer: Uuid,
    sketch: BufferedSketch,
    /// Members that changed the sketch since the stored whole row was copied, oldest first
    /// (a member may be here twice), while `recent_complete`.
    recent: Vec<MemberHash>,
    /// Whether a whole row is stored and `recent` holds every member it lacks; until then a
    /// flush writes the whole row.
    recent_complete: bool,
    /// Bytes of the recent rows written since the whole row.
    recent_bytes_written: usize,
    /// Bumped by every insert; the state is stored once `flushed` catches up.
    version: u64,
    flushed: u64,
    pub(crate) touched: Instant,
    /// What this entry is charged against the budget.
    pub(crate) charged: u64,
    /// In the shard's queue: changed since a flush last copied it out.
    queued: bool,
}

impl Entry {
    pub(crate) fn is_dirty(&self) -> bool {
        self.version != self.flushed
    }

    fn is(&self, hash: u64, cell: CellRef<'_>) -> bool {
        self.hash == hash
            && self.hour == cell.hour
            && &self.site == cell.site
            && *self.combination == *cell.combination
    }

    fn charge(&self) -> u64 {
        let recent = self.recent.capacity() * std::mem::size_of::<MemberHash>();
        ENTRY_BASE_BYTES
            + (self.site.as_str().len()
                + self.combination.len()
                + self.sketch.heap_bytes()
                + recent) as u64
    }

    /// Whether the next copy is the recent row: the whole row is stored, and the recent rows
    /// written since, this one included, cost less than writing the whole row again.
    fn recent_row_suffices(&self) -> bool {
        let whole = self.sketch.encoded_len_estimate();
        let recent = self.recent.len() * RECENT_MEMBER_BYTES;
        self.recent_complete
            && self.recent_bytes_written + recent < whole
            // Memory: the recent members' hashes stay under the whole row's size.
            && self.recent.len() * std::mem::size_of::<MemberHash>() < whole
    }

    /// Records that `snapshot`, a copy of this entry, is stored.
    fn stored(&mut self, snapshot: &Snapshot) {
        self.flushed = self.flushed.max(snapshot.version);
        match snapshot.copied {
            Copied::Recent => self.recent_bytes_written += snapshot.bytes.len(),
            Copied::Whole { covers_recent } => {
                if self.recent_complete {
                    // The whole row holds those copied with it; those gained since stay.
                    self.recent.drain(..covers_recent.min(self.recent.len()));
                } else {
                    // Members gained while the row was written were not kept: unless there
                    // were none, the next copy is the whole row again.
                    self.recent_complete = self.version == snapshot.version;
                    self.recent.clear();
                }
                self.recent_bytes_written = 0;
                if self.recent.capacity() > 4 * self.recent.len() + 64 {
                    self.recent.shrink_to_fit();
                }
            }
        }
    }

    /// The copy of the row the next write stores.
    fn copy(&mut self) -> (Uuid, Vec<u8>, Copied) {
        if self.recent_row_suffices() {
            let mut recent = UniqueSketch::new();
            recent.insert_all(&self.recent);
            (self.recent_writer, recent.to_bytes(), Copied::Recent)
        } else {
            let bytes = self.sketch.settled().to_bytes();
            (
                self.writer,
                bytes,
                Copied::Whole {
                    covers_recent: self.recent.len(),
                },
            )
        }
    }
}

/// Which row of a sketch a snapshot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Copied {
    /// The whole state; once stored, the first `covers_recent` recent members (those copied
    /// with it) leave the recent set.
    Whole { covers_recent: usize },
    /// The recent members.
    Recent,
}

/// A queued sketch, named by its hash and writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Queued {
    hash: u64,
    writer: Uuid,
}

/// One changed sketch, copied out for a flush.
pub(crate) struct Snapshot {
    pub(crate) cell: Cell,
    /// The writer id of the row the copy is stored as.
    pub(crate) writer: Uuid,
    /// The sketch copied.
    entry: Queued,
    version: u64,
    copied: Copied,
    pub(crate) bytes: Vec<u8>,
    pub(crate) captured_at: i64,
}

#[derive(Default)]
pub(crate) struct Shard {
    /// Boxed: a new sketch's entry is written to fresh memory, not to a cold table slot three
    /// cache lines wide, and the table moves pointers when it grows.
    sketches: HashTable<Box<Entry>>,
    /// Changed sketches not yet copied out by a flush, oldest change first.
    queue: VecDeque<Queued>,
}

impl Shard {
    /// Counts `members` in the sketch of `cell` (`hash` is its hash), making the sketch if it
    /// is new; returns by how much the shard's charge grew.
    pub(crate) fn record(
        &mut self,
        hash: u64,
        cell: CellRef<'_>,
        members: &[MemberHash],
        now: Instant,
    ) -> u64 {
        let mut grown = 0;
        let entry = match self.sketches.find_mut(hash, |entry| entry.is(hash, cell)) {
            Some(entry) => entry,
            None => {
                let entry = Box::new(Entry {
                    hash,
                    site: cell.site.clone(),
                    hour: cell.hour,
                    combination: cell.combination.into(),
                    writer: random_uuid(),
                    recent_writer: random_uuid(),
                    sketch: BufferedSketch::new(),
                    recent: Vec::new(),
                    recent_complete: false,
                    recent_bytes_written: 0,
                    version: 0,
                    flushed: 0,
                    touched: now,
                    charged: 0,
                    queued: false,
                });
                self.sketches
                    .insert_unique(hash, entry, |entry| entry.hash)
                    .into_mut()
            }
        };
        entry.touched = now;
        let mut changed = false;
        for &member in members {
            // A returning visitor changes nothing that is not stored already.
            if entry.sketch.insert(member) {
                changed = true;
                if entry.recent_complete {
                    entry.recent.push(member);
                }
            }
        }
        if !changed {
            return 0;
        }
        entry.version += 1;
        // Never lowered: turning dense frees a list larger than the registers, and the
        // allocator may keep it a while.
        let charge = entry.charge();
        if charge > entry.charged {
            grown = charge - entry.charged;
            entry.charged = charge;
        }
        if !entry.queued {
            entry.queued = true;
            self.queue.push_back(Queued {
                hash,
                writer: entry.writer,
            });
        }
        grown
    }

    /// How many sketches are queued.
    pub(crate) fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Takes up to `limit` sketches off the front of the queue and copies them out. One
    /// changed while its copy is written is queued again, for a later flush.
    pub(crate) fn snapshot_next(&mut self, limit: usize, captured_at: i64) -> Vec<Snapshot> {
        let taken = self.queue.len().min(limit);
        let mut snapshots = Vec::with_capacity(taken);
        let Self { sketches, queue } = self;
        for named in queue.drain(..taken) {
            let Some(entry) = find_mut(sketches, named) else {
                continue;
            };
            entry.queued = false;
            let (writer, bytes, copied) = entry.copy();
            snapshots.push(Snapshot {
                cell: Cell {
                    site: entry.site.clone(),
                    hour: entry.hour,
                    combination: entry.combination.to_string(),
                },
                writer,
                entry: named,
                version: entry.version,
                copied,
                bytes,
                captured_at,
            });
        }
        snapshots
    }

    /// Records that the snapshots' states are stored.
    pub(crate) fn mark_flushed(&mut self, snapshots: &[Snapshot]) {
        for snapshot in snapshots {
            if let Some(entry) = self.find_mut(snapshot.named()) {
                entry.stored(snapshot);
            }
        }
    }

    /// Queues again the sketches a flush took off the queue and could not store.
    pub(crate) fn requeue(&mut self, names: &[Queued]) {
        for &named in names {
            if let Some(entry) = self.find_mut(named)
                && entry.is_dirty()
                && !entry.queued
            {
                entry.queued = true;
                self.queue.push_back(named);
            }
        }
    }

    /// Drops the stored (not dirty) sketches `evict` picks; returns their charge.
    pub(crate) fn evict(&mut self, mut evict: impl FnMut(&Entry) -> bool) -> u64 {
        let mut released = 0;
        self.sketches.retain(|entry| {
            let drop = !entry.is_dirty() && evict(entry);
            if drop {
                released += entry.charged;
            }
            !drop
        });
        // A table never shrinks by itself: one that held a burst would keep it for good.
        if self.sketches.capacity() > 4 * self.sketches.len() + 64 {
            self.sketches.shrink_to_fit(|entry| entry.hash);
        }
        if self.queue.capacity() > 4 * self.queue.len() + 64 {
            self.queue.shrink_to_fit();
        }
        released
    }

    pub(crate) fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.sketches.iter().map(|entry| &**entry)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.sketches.len()
    }

    /// The whole rows' bytes of every sketch held (tests).
    #[cfg(test)]
    pub(crate) fn whole_bytes(&mut self) -> usize {
        self.sketches
            .iter_mut()
            .map(|entry| entry.sketch.settled().to_bytes().len())
            .sum()
    }

    /// Whether the sketch of `cell` is held (tests).
    #[cfg(test)]
    pub(crate) fn holds(&self, hash: u64, cell: CellRef<'_>) -> bool {
        self.sketches
            .find(hash, |entry| entry.is(hash, cell))
            .is_some()
    }

    fn find_mut(&mut self, named: Queued) -> Option<&mut Entry> {
        find_mut(&mut self.sketches, named)
    }
}

fn find_mut(sketches: &mut HashTable<Box<Entry>>, named: Queued) -> Option<&mut Entry> {
    sketches
        .find_mut(named.hash, |entry| {
            entry.hash == named.hash && entry.writer == named.writer
        })
        .map(|entry| &mut **entry)
}

impl Snapshot {
    pub(crate) fn named(&self) -> Queued {
        self.entry
    }
}

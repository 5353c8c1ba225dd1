//! One shard of the live sketches: a flat table of sketches found by one precomputed hash of
//! their cell (site, hour, combination), and the queue of those changed since a flush copied
//! them out, so a flush visits only what changed and finds each again without a string compare.

use crate::domain::beacon::SiteId;
use crate::domain::sketch::{BufferedSketch, MemberHash};
use crate::domain::time::{Day, HOUR_MILLIS};
use crate::random_id::random_uuid;
use crate::store::SketchPartition;
use chrono::{DateTime, Utc};
use hashbrown::HashTable;
use std::collections::VecDeque;
use std::time::Instant;
use uuid::Uuid;

/// What a sketch is charged against the budget, besides its site and combination text and what
/// the sketch itself holds ([`BufferedSketch::heap_bytes`]): its table slot (at the table's worst
/// load and growth, hence twice), its entry, its place in the flush queue, and the allocator's
/// rounding of the entry and its two texts.
pub const ENTRY_BASE_BYTES: u64 = (2 * std::mem::size_of::<Box<Entry>>()
    + std::mem::size_of::<Entry>()
    + std::mem::size_of::<Queued>()
    + 48) as u64;

/// A sketch's place, borrowed from a beacon.
#[derive(Clone, Copy)]
pub struct CellRef<'a> {
    pub site: &'a SiteId,
    /// Hours since the epoch.
    pub hour: i64,
    pub combination: &'a str,
}

/// A sketch's place, owned by a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    pub site: SiteId,
    /// Hours since the epoch.
    pub hour: i64,
    pub combination: String,
}

impl Cell {
    pub fn hour_start(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(self.hour * HOUR_MILLIS).unwrap_or_default()
    }

    pub fn partition(&self) -> SketchPartition {
        SketchPartition {
            site: self.site.clone(),
            day: Day::new(self.hour_start().date_naive()),
            combination: self.combination.clone(),
        }
    }
}

pub struct Entry {
    /// The cell's hash: the table never hashes a key again, and the queue names the entry by it.
    hash: u64,
    site: SiteId,
    hour: i64,
    combination: Box<str>,
    /// Unique to this entry in the process: a sketch dropped and needed again gets a new one.
    writer: Uuid,
    sketch: BufferedSketch,
    /// Bumped by every insert; the state is stored once `flushed` catches up.
    version: u64,
    flushed: u64,
    pub touched: Instant,
    /// What this entry is charged against the budget.
    pub charged: u64,
    /// In the shard's queue: changed since a flush last copied it out.
    queued: bool,
}

impl Entry {
    pub fn is_dirty(&self) -> bool {
        self.version != self.flushed
    }

    fn is(&self, hash: u64, cell: CellRef<'_>) -> bool {
        self.hash == hash
            && self.hour == cell.hour
            && &self.site == cell.site
            && *self.combination == *cell.combination
    }

    fn charge(&self) -> u64 {
        ENTRY_BASE_BYTES
            + (self.site.as_str().len() + self.combination.len() + self.sketch.heap_bytes()) as u64
    }
}

/// A queued sketch, named by its hash and writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queued {
    hash: u64,
    writer: Uuid,
}

/// One changed sketch, copied out for a flush.
pub struct Snapshot {
    pub cell: Cell,
    pub writer: Uuid,
    hash: u64,
    version: u64,
    pub bytes: Vec<u8>,
    pub captured_at: i64,
}

#[derive(Default)]
pub struct Shard {
    /// Boxed: a new sketch's entry is written to fresh memory, not to a cold table slot three
    /// cache lines wide, and the table moves pointers when it grows.
    sketches: HashTable<Box<Entry>>,
    /// Changed sketches not yet copied out by a flush, oldest change first.
    queue: VecDeque<Queued>,
}

impl Shard {
    /// Counts `member` in the sketch of `cell` (`hash` is its hash), making the sketch if it is
    /// new; returns by how much the shard's charge grew.
    pub fn record(
        &mut self,
        hash: u64,
        cell: CellRef<'_>,
        member: MemberHash,
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
                    sketch: BufferedSketch::new(),
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
        entry.sketch.insert(member);
        entry.version += 1;
        entry.touched = now;
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
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Takes up to `limit` sketches off the front of the queue and copies them out. One
    /// changed while its copy is written is queued again, for a later flush.
    pub fn snapshot_next(&mut self, limit: usize, captured_at: i64) -> Vec<Snapshot> {
        let taken = self.queue.len().min(limit);
        let mut snapshots = Vec::with_capacity(taken);
        let Self { sketches, queue } = self;
        for named in queue.drain(..taken) {
            let Some(entry) = find_mut(sketches, named) else {
                continue;
            };
            entry.queued = false;
            snapshots.push(Snapshot {
                cell: Cell {
                    site: entry.site.clone(),
                    hour: entry.hour,
                    combination: entry.combination.to_string(),
                },
                writer: entry.writer,
                hash: entry.hash,
                version: entry.version,
                bytes: entry.sketch.settled().to_bytes(),
                captured_at,
            });
        }
        snapshots
    }

    /// Records that the snapshots' states are stored.
    pub fn mark_flushed(&mut self, snapshots: &[Snapshot]) {
        for snapshot in snapshots {
            if let Some(entry) = self.find_mut(snapshot.named()) {
                entry.flushed = entry.flushed.max(snapshot.version);
            }
        }
    }

    /// Queues again the sketches a flush took off the queue and could not store.
    pub fn requeue(&mut self, names: &[Queued]) {
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
    pub fn evict(&mut self, mut evict: impl FnMut(&Entry) -> bool) -> u64 {
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

    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.sketches.iter().map(|entry| &**entry)
    }

    pub fn len(&self) -> usize {
        self.sketches.len()
    }

    /// Whether the sketch of `cell` is held (tests).
    #[cfg(test)]
    pub fn holds(&self, hash: u64, cell: CellRef<'_>) -> bool {
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
    pub fn named(&self) -> Queued {
        Queued {
            hash: self.hash,
            writer: self.writer,
        }
    }
}

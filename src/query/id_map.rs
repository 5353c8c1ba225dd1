//! Hash maps of one read's working set, keyed by ids (impressions, users and their windows):
//! every row a read counts passes through several of them, and std's SipHash was a fifth of
//! the time a poll of today spent counting its newest seconds. foldhash (hashbrown's default)
//! is seeded at random per process and per map, so ids a caller chose cannot be aimed at
//! one process's buckets without its seed; the maps live for one read.

use std::collections::{HashMap, HashSet};

pub(crate) type IdMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
pub(crate) type IdSet<K> = HashSet<K, foldhash::fast::RandomState>;

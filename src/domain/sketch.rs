//! Distinct-count sketches: HyperLogLog++ (the `hyperloglogplus` crate) at precision 14, whose
//! sparse form (precision 25) is near-exact for small sets and whose dense form is within
//! ~0.8 % (one standard error) for large ones.
//!
//! Sketches are persisted and merged across processes and releases, so the hash must be fixed:
//! a member is hashed once with xxh3 (a fixed, seedless algorithm) and that 64-bit value is fed
//! to the sketch through a pass-through hasher. The persisted form is the crate's serde state
//! in `postcard`'s compact binary encoding.

use hyperloglogplus::{HyperLogLog, HyperLogLogPlus};
use serde::{Deserialize, Serialize};
use std::hash::{BuildHasher, Hash, Hasher};

const PRECISION: u8 = 14;

/// A member's fixed 64-bit hash: what a sketch records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberHash(u64);

impl MemberHash {
    pub fn of(member: &[u8]) -> Self {
        Self(xxhash_rust::xxh3::xxh3_64(member))
    }
}

impl Hash for MemberHash {
    fn hash<S: Hasher>(&self, state: &mut S) {
        state.write_u64(self.0);
    }
}

/// Hands a [`MemberHash`] to the sketch unchanged.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct PassThrough;

#[derive(Debug, Default)]
pub struct PassThroughHasher(u64);

impl Hasher for PassThroughHasher {
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used by `MemberHash`; anything else is still hashed stably.
        self.0 = xxhash_rust::xxh3::xxh3_64_with_seed(bytes, self.0);
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl BuildHasher for PassThrough {
    type Hasher = PassThroughHasher;

    fn build_hasher(&self) -> PassThroughHasher {
        PassThroughHasher::default()
    }
}

/// Why persisted sketch bytes could not be used.
#[derive(Debug, thiserror::Error)]
#[error("a stored sketch does not decode: {0}")]
pub struct SketchDecodeError(String);

/// A mergeable distinct-count sketch.
#[derive(Debug, Clone)]
pub struct UniqueSketch(HyperLogLogPlus<MemberHash, PassThrough>);

impl Default for UniqueSketch {
    fn default() -> Self {
        Self::new()
    }
}

impl UniqueSketch {
    pub fn new() -> Self {
        // Precision 14 is within the crate's 4..=18.
        match HyperLogLogPlus::new(PRECISION, PassThrough) {
            Ok(sketch) => Self(sketch),
            Err(error) => unreachable!("precision {PRECISION} is valid: {error:?}"),
        }
    }

    pub fn insert(&mut self, member: MemberHash) {
        self.0.insert(&member);
    }

    /// Adds every member of `other`.
    pub fn merge(&mut self, other: &UniqueSketch) {
        // Both sketches have this module's precision, the only thing merge checks.
        let _ = self.0.merge(&other.0);
    }

    /// The estimated number of distinct members, rounded.
    pub fn estimate(&mut self) -> u64 {
        self.0.count().round().max(0.0) as u64
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        // Serializing plain in-memory data into a Vec does not fail.
        postcard::to_stdvec(&self.0).unwrap_or_default()
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self, SketchDecodeError> {
        postcard::from_bytes(bytes)
            .map(Self)
            .map_err(|error| SketchDecodeError(error.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sketch_of(range: std::ops::Range<u64>) -> UniqueSketch {
        let mut sketch = UniqueSketch::new();
        for n in range {
            sketch.insert(MemberHash::of(format!("visitor-{n}").as_bytes()));
        }
        sketch
    }

    #[test]
    fn small_sets_are_counted_within_one() {
        for n in [0u64, 1, 2, 10, 99, 500, 999] {
            let estimate = sketch_of(0..n).estimate();
            assert!(estimate.abs_diff(n) <= 1, "{n} counted as {estimate}");
        }
    }

    #[test]
    fn large_sets_are_within_two_percent() {
        for n in [5_000u64, 50_000, 300_000] {
            let estimate = sketch_of(0..n).estimate();
            let error = estimate.abs_diff(n) as f64 / n as f64;
            assert!(error < 0.02, "{n} counted as {estimate}");
        }
    }

    #[test]
    fn merged_sketches_count_the_union_and_survive_persistence() {
        let mut union = sketch_of(0..30_000);
        let other =
            UniqueSketch::from_bytes(&sketch_of(20_000..50_000).to_bytes()).expect("decodes");
        union.merge(&other);
        union.merge(&sketch_of(0..10).clone());
        let estimate = union.estimate();
        assert!(estimate.abs_diff(50_000) < 1_000, "{estimate}");
        let mut small = sketch_of(0..300);
        small.merge(&UniqueSketch::from_bytes(&sketch_of(200..400).to_bytes()).expect("decodes"));
        assert!(small.estimate().abs_diff(400) <= 1);
    }

    #[test]
    fn the_member_hash_is_fixed_across_releases() {
        // Persisted sketches from older releases must merge with new ones.
        assert_eq!(
            MemberHash::of(b"962e0c3a-6c08-4160-9196-f0050faffe62").0,
            EXPECTED_HASH
        );
    }

    const EXPECTED_HASH: u64 = 5_754_831_061_125_885_856;
}

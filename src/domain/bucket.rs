//! Buckets spread one campaign-day over several partitions so a hot campaign's writes do not
//! all land on the same replicas. An event's bucket is a stable hash of its id: a retried
//! event always lands in the same partition.

use std::fmt;
use xxhash_rust::xxh3::xxh3_64;

/// How many partitions per day a campaign's events are spread over: 1 to 256.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BucketCount(u16);

impl BucketCount {
    pub(crate) const MAX: u16 = 256;
    pub const ONE: Self = Self(1);

    pub fn new(count: u16) -> Result<Self, String> {
        if (1..=Self::MAX).contains(&count) {
            Ok(Self(count))
        } else {
            Err(format!("must be between 1 and {}", Self::MAX))
        }
    }

    pub(crate) fn get(&self) -> u16 {
        self.0
    }

    /// Every bucket id of this count.
    pub fn ids(&self) -> impl Iterator<Item = BucketId> {
        (0..self.0).map(BucketId)
    }

    /// The bucket of the event whose identity is `id`. xxh3 is a fixed, seedless algorithm:
    /// the same id maps to the same bucket in every process and every release.
    pub(crate) fn bucket_of(&self, id: uuid::Uuid) -> BucketId {
        self.bucket_of_bytes(id.as_bytes())
    }

    /// The bucket of an identity given as bytes (a visitor's guid).
    pub(crate) fn bucket_of_bytes(&self, identity: &[u8]) -> BucketId {
        let hash = xxh3_64(identity);
        // The remainder is below self.0 ≤ 256, so it fits.
        BucketId((hash % u64::from(self.0)) as u16)
    }
}

impl fmt::Display for BucketCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// One partition of a campaign-day: 0 to 255.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BucketId(u16);

impl BucketId {
    pub(crate) fn get(&self) -> u16 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_outside_1_to_256_are_refused() {
        assert!(BucketCount::new(0).is_err());
        assert!(BucketCount::new(257).is_err());
        assert_eq!(
            BucketCount::new(256).map(|count| count.ids().count()),
            Ok(256)
        );
    }

    #[test]
    fn the_same_id_always_lands_in_the_same_bucket_and_ids_spread_evenly() {
        let count = BucketCount::new(8).expect("valid");
        let id = uuid::Uuid::parse_str("962e0c3a-6c08-4160-9196-f0050faffe62").expect("uuid");
        assert_eq!(count.bucket_of(id), count.bucket_of(id));
        let mut histogram = [0u32; 8];
        for _ in 0..8000 {
            histogram[usize::from(count.bucket_of(uuid::Uuid::new_v4()).get())] += 1;
        }
        assert!(
            histogram.iter().all(|&n| (800..1200).contains(&n)),
            "{histogram:?}"
        );
    }

    #[test]
    fn bucket_assignment_is_fixed_across_releases() {
        // Changing the hash would move stored events to partitions readers no longer find.
        let id = uuid::Uuid::parse_str("962e0c3a-6c08-4160-9196-f0050faffe62").expect("uuid");
        let buckets: Vec<u16> = [1, 4, 8, 256]
            .into_iter()
            .map(|n| BucketCount::new(n).expect("valid").bucket_of(id).get())
            .collect();
        assert_eq!(buckets, EXPECTED_BUCKETS);
    }

    const EXPECTED_BUCKETS: [u16; 4] = [0, 2, 2, 122];
}

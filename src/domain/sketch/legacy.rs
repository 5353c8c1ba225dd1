//! Sketches as releases before the compact form stored them: the `hyperloglogplus` crate's
//! `HyperLogLogPlus` state (precision 14, the member hash passed through) in `postcard`,
//! mirrored field by field so they decode without the crate, into the state the same members
//! give today. One exception: the crate turned dense from about 5,900 members, this form at
//! 6,144, and a sketch the crate had made dense stays dense (its places are gone).

use super::{
    EXTRA_MASK, MAX_RANK, PRECISION, REGISTERS, Repr, SketchDecodeError, SparseEntry, UniqueSketch,
    raise, sparse_or_dense, take_varint, zeroed_registers,
};
use serde::Deserialize;

/// The first byte of such a sketch: its precision (the hasher stored before it is a unit
/// struct, which takes no bytes).
pub(super) const TAG: u8 = PRECISION as u8;

/// The crate's struct, in its field order (postcard does not store names).
#[derive(Deserialize)]
struct Stored {
    _hasher: (),
    precision: u8,
    _register_counts: (usize, usize, usize),
    /// Codes not yet merged into `sparse`.
    pending: Vec<u32>,
    sparse: StoredSparse,
    registers: Option<StoredRegisters>,
    _phantom: (),
}

/// Sorted codes, each stored as its varint difference from the previous one.
#[derive(Deserialize)]
struct StoredSparse {
    _count: usize,
    _last: u32,
    deltas: Vec<u8>,
}

/// Six-bit registers, five to a word from the low bits up.
#[derive(Deserialize)]
struct StoredRegisters {
    words: Vec<u32>,
    _count: usize,
    _zeros: usize,
}

pub(super) fn decode(bytes: &[u8]) -> Result<UniqueSketch, SketchDecodeError> {
    let fail = |why: &str| SketchDecodeError(format!("an earlier release's sketch: {why}"));
    let stored: Stored = postcard::from_bytes(bytes).map_err(|error| fail(&error.to_string()))?;
    if u32::from(stored.precision) != PRECISION {
        return Err(fail("another precision"));
    }
    let mut codes = stored.pending;
    let mut deltas = stored.sparse.deltas.as_slice();
    let mut previous = 0u32;
    while !deltas.is_empty() {
        let delta = take_varint(&mut deltas).ok_or_else(|| fail("truncated code"))?;
        previous = previous.wrapping_add(delta);
        codes.push(previous);
    }
    let mut entries = codes
        .into_iter()
        .map(|code| entry_of(code).ok_or_else(|| fail("invalid code")))
        .collect::<Result<Vec<_>, _>>()?;
    let Some(words) = stored.registers.map(|registers| registers.words) else {
        entries.sort_unstable();
        // Sorted by index then rank: of one index's entries, keep the last (largest rank).
        entries.dedup_by(|later, earlier| {
            let same_index = later.index() == earlier.index();
            if same_index {
                *earlier = *later;
            }
            same_index
        });
        return Ok(UniqueSketch(sparse_or_dense(entries)));
    };
    if words.len() != REGISTERS.div_ceil(5) {
        return Err(fail("registers of the wrong length"));
    }
    let mut registers = zeroed_registers();
    for (register, value) in registers.iter_mut().zip(
        words
            .iter()
            .flat_map(|word| (0..5).map(move |at| ((word >> (6 * at)) & 0x3f) as u8)),
    ) {
        *register = value;
    }
    if registers.iter().any(|&value| value > MAX_RANK) {
        return Err(fail("register value out of range"));
    }
    // The crate empties its sparse codes when it turns dense; apply any left all the same.
    for entry in &entries {
        raise(&mut registers, entry.register());
    }
    Ok(UniqueSketch(Repr::Dense(registers)))
}

/// The crate's 32-bit code, as an entry: the index at precision 25 and, flagged by the lowest
/// bit only when the index's bits past precision 14 are zero, the rank past it.
fn entry_of(code: u32) -> Option<SparseEntry> {
    let flagged = code & 1 == 1;
    let entry = if flagged {
        SparseEntry::new(code >> 7, ((code >> 1) & 0x3f) as u8)
    } else {
        SparseEntry::new(code >> 1, 0)
    };
    // The crate flags exactly the codes whose extra index bits are zero.
    let well_formed = if flagged {
        (code >> 7) & EXTRA_MASK == 0
    } else {
        code >> 26 == 0
    };
    SparseEntry::decoded(entry.0).filter(|_| well_formed)
}

#[cfg(test)]
mod tests {
    use super::super::MemberHash;
    use super::*;
    use hyperloglogplus::{HyperLogLog, HyperLogLogPlus};
    use std::hash::{BuildHasher, Hasher};

    /// What earlier releases fed the crate: the member hash, unchanged.
    #[derive(Clone, Default, serde::Serialize, serde::Deserialize)]
    struct PassThrough;

    #[derive(Default)]
    struct PassThroughHasher(u64);

    impl Hasher for PassThroughHasher {
        fn write(&mut self, _: &[u8]) {
            unreachable!("only u64 hashes are fed")
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

    fn members(range: std::ops::Range<u64>) -> impl Iterator<Item = MemberHash> {
        range.map(|n| MemberHash::of(format!("visitor-{n}").as_bytes()))
    }

    fn stored_by_the_crate(range: std::ops::Range<u64>) -> Vec<u8> {
        let mut sketch: HyperLogLogPlus<u64, PassThrough> =
            HyperLogLogPlus::new(14, PassThrough).expect("valid precision");
        for member in members(range) {
            sketch.insert(&member.0);
        }
        postcard::to_stdvec(&sketch).expect("serializes")
    }

    fn sketch_of(range: std::ops::Range<u64>) -> UniqueSketch {
        let mut sketch = UniqueSketch::new();
        for member in members(range) {
            sketch.insert(member);
        }
        sketch
    }

    #[test]
    fn an_earlier_release_s_sketch_decodes_to_the_state_its_members_give_now() {
        // Empty, pending codes only, merged sparse codes, sparse in the crate but dense here,
        // and dense in both.
        for n in [0u64, 1, 100, 1_000, 5_000, 50_000] {
            let stored = stored_by_the_crate(0..n);
            assert_eq!(stored[0], TAG);
            let decoded = UniqueSketch::from_bytes(&stored).expect("decodes");
            assert_eq!(
                decoded.to_bytes(),
                sketch_of(0..n).to_bytes(),
                "{n} members"
            );
        }
    }

    #[test]
    fn an_earlier_release_s_sketch_merges_with_new_ones() {
        let mut merged = UniqueSketch::from_bytes(&stored_by_the_crate(0..3_000)).expect("decodes");
        merged.merge(&sketch_of(2_000..20_000));
        assert_eq!(merged.to_bytes(), sketch_of(0..20_000).to_bytes());
    }

    #[test]
    fn counts_are_as_close_to_the_truth_as_the_earlier_releases_were() {
        // Mean relative error over independent member sets, beside the crate's on the same
        // members (`--nocapture` prints the table).
        for n in [1_000u64, 5_000, 12_000, 50_000, 200_000] {
            let trials = 12;
            let (mut crate_error, mut error) = (0.0, 0.0);
            for trial in 0..trials {
                let mut earlier: HyperLogLogPlus<u64, PassThrough> =
                    HyperLogLogPlus::new(14, PassThrough).expect("valid precision");
                let mut sketch = UniqueSketch::new();
                for member in members(trial * 10_000_000..trial * 10_000_000 + n) {
                    earlier.insert(&member.0);
                    sketch.insert(member);
                }
                crate_error += (earlier.count() - n as f64).abs() / (n * trials) as f64;
                error += sketch.estimate().abs_diff(n) as f64 / (n * trials) as f64;
            }
            println!("{n} members: mean error {error:.5}, the crate's {crate_error:.5}");
            assert!(
                error <= crate_error * 1.25 + 0.0005,
                "{n} members: mean error {error}, the crate's {crate_error}"
            );
        }
    }

    #[test]
    fn a_damaged_earlier_sketch_is_refused() {
        let stored = stored_by_the_crate(0..50_000);
        assert!(UniqueSketch::from_bytes(&stored[..stored.len() / 2]).is_err());
        let mut other_precision = stored_by_the_crate(0..10);
        other_precision[0] = 12;
        assert!(UniqueSketch::from_bytes(&other_precision).is_err());
        // A flagged code whose index bits past precision 14 are not zero: the crate never
        // writes one. Precision, three counts, one pending code 0x83 (varint 0x83 0x01), an
        // empty sparse list, no registers.
        let flagged_wrongly = [TAG, 0, 0, 0, 1, 0x83, 0x01, 0, 0, 0, 0];
        assert!(UniqueSketch::from_bytes(&flagged_wrongly).is_err());
        let flagged_rightly = [TAG, 0, 0, 0, 1, 0x83, 0x80, 0x10, 0, 0, 0, 0];
        assert!(UniqueSketch::from_bytes(&flagged_rightly).is_ok());
    }
}

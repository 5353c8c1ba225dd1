//! Distinct-count sketches: HyperLogLog++ at precision 14. A sketch starts sparse (an exact
//! list of its members' places at precision 25, near-exact up to its 6,144 entries) and then
//! turns dense (2^14 registers, ~0.8 % standard error). The dense estimate is Ertl's ("New cardinality estimation algorithms for
//! HyperLogLog sketches", 2017), which needs no empirical bias tables.
//!
//! Sketches are persisted and merged across processes and releases, so the hash must be fixed:
//! a member is hashed once with xxh3 (a fixed, seedless algorithm). The persisted form is a tag
//! byte and either the sparse list, delta- and varint-encoded, or the registers packed six bits
//! each. Sketches stored by earlier releases (the `hyperloglogplus` crate's state in
//! `postcard`) are still read: see [`legacy`].

use smallvec::SmallVec;

mod buffered;
mod legacy;

pub(crate) use buffered::BufferedSketch;

/// Dense registers: 2^14.
const PRECISION: u32 = 14;
/// The sparse list places members at this precision.
const SPARSE_PRECISION: u32 = 25;
const REGISTERS: usize = 1 << PRECISION;
/// The index bits a sparse entry has beyond its register's.
const EXTRA_BITS: u32 = SPARSE_PRECISION - PRECISION;
const EXTRA_MASK: u32 = (1 << EXTRA_BITS) - 1;
/// The most entries (four bytes each) a sparse list holds: one and a half times the registers'
/// memory, for exact counts up to about as many members as the sketches of earlier releases.
const SPARSE_LIMIT: usize = 6 * 1024;
/// Past this many entries a sparse list grows straight to its limit rather than doubling.
const SPARSE_GROWS_TO_LIMIT: usize = 4 * 1024;
/// Entries held without an allocation: most live sketches (a rare feature combination in one
/// hour) never have more members than this.
const INLINE_ENTRIES: usize = 4;
/// The largest register value: one plus the 50 bits a 64-bit hash has past the index.
const MAX_RANK: u8 = (64 - PRECISION + 1) as u8;
/// The largest rank a sparse entry records (past precision 25).
const MAX_SPARSE_RANK: u8 = (64 - SPARSE_PRECISION + 1) as u8;

const TAG_SPARSE: u8 = 1;
const TAG_DENSE: u8 = 2;
/// Dense registers persisted six bits each: four registers in three bytes.
const PACKED_DENSE_BYTES: usize = REGISTERS / 4 * 3;

/// A member's fixed 64-bit hash: what a sketch records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemberHash(u64);

impl MemberHash {
    pub(crate) fn of(member: &[u8]) -> Self {
        Self(xxhash_rust::xxh3::xxh3_64(member))
    }

    /// The dense register this member falls in, and the value it sets there.
    fn register(self) -> (usize, u8) {
        (
            (self.0 >> (64 - PRECISION)) as usize,
            rank_past(self.0, PRECISION),
        )
    }
}

/// One plus the leading zeros of `hash` past its first `bits` bits (at most `65 - bits`).
fn rank_past(hash: u64, bits: u32) -> u8 {
    // The marker bit caps the count where the hash's bits end.
    (((hash << bits) | (1 << (bits - 1))).leading_zeros() + 1) as u8
}

/// A member's place in the sparse list: its index at precision 25 and, only when the index's
/// bits past precision 14 are all zero (so they do not give its register's value), its rank
/// past precision 25. Ordered by index first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct SparseEntry(u32);

impl SparseEntry {
    fn of(member: MemberHash) -> Self {
        let index = (member.0 >> (64 - SPARSE_PRECISION)) as u32;
        Self::new(index, rank_past(member.0, SPARSE_PRECISION))
    }

    /// Drops a rank the index makes redundant, so one member always gives one entry, however
    /// it was recorded.
    fn new(index: u32, rank: u8) -> Self {
        let rank = if index & EXTRA_MASK == 0 { rank } else { 0 };
        Self((index << 6) | u32::from(rank))
    }

    /// An entry read back from storage, if it is one [`SparseEntry::new`] can make.
    fn decoded(raw: u32) -> Option<Self> {
        let entry = Self(raw);
        let valid_rank = if entry.index() & EXTRA_MASK == 0 {
            (1..=MAX_SPARSE_RANK).contains(&entry.rank())
        } else {
            entry.rank() == 0
        };
        (raw >> 31 == 0 && valid_rank).then_some(entry)
    }

    fn index(self) -> u32 {
        self.0 >> 6
    }

    fn rank(self) -> u8 {
        (self.0 & 0x3f) as u8
    }

    /// The dense register this entry falls in, and the value it sets there.
    fn register(self) -> (usize, u8) {
        let extra = self.index() & EXTRA_MASK;
        let rank = if extra == 0 {
            EXTRA_BITS as u8 + self.rank()
        } else {
            ((extra << (32 - EXTRA_BITS)).leading_zeros() + 1) as u8
        };
        ((self.index() >> EXTRA_BITS) as usize, rank)
    }
}

/// Why persisted sketch bytes could not be used.
#[derive(Debug, thiserror::Error)]
#[error("a stored sketch does not decode: {0}")]
pub(crate) struct SketchDecodeError(String);

/// A mergeable distinct-count sketch.
#[derive(Debug, Clone)]
pub(crate) struct UniqueSketch(Repr);

#[derive(Debug, Clone)]
enum Repr {
    /// Sorted by index, one entry per index, at most [`SPARSE_LIMIT`].
    Sparse(SmallVec<[SparseEntry; INLINE_ENTRIES]>),
    Dense(Box<[u8; REGISTERS]>),
}

impl Default for UniqueSketch {
    fn default() -> Self {
        Self::new()
    }
}

impl UniqueSketch {
    pub(crate) fn new() -> Self {
        Self(Repr::Sparse(SmallVec::new()))
    }

    /// Adds `member`; says whether the state changed (a member already recorded, or one whose
    /// register already holds as much, changes nothing, and needs no new copy stored).
    pub(crate) fn insert(&mut self, member: MemberHash) -> bool {
        match &mut self.0 {
            Repr::Dense(registers) => raise(registers, member.register()),
            Repr::Sparse(entries) => {
                let entry = SparseEntry::of(member);
                match position(entries, entry.index()) {
                    Ok(at) => {
                        let raised = entry > entries[at];
                        entries[at] = entries[at].max(entry);
                        raised
                    }
                    Err(_) if entries.len() >= SPARSE_LIMIT => {
                        let mut registers = dense_from(entries);
                        raise(&mut registers, member.register());
                        self.0 = Repr::Dense(registers);
                        true
                    }
                    Err(at) => {
                        if entries.len() == entries.capacity()
                            && entries.len() >= SPARSE_GROWS_TO_LIMIT
                        {
                            entries.reserve_exact(SPARSE_LIMIT - entries.len());
                        }
                        entries.insert(at, entry);
                        true
                    }
                }
            }
        }
    }

    /// Whether no member was ever added (a dense sketch always had some).
    pub(crate) fn is_empty(&self) -> bool {
        matches!(&self.0, Repr::Sparse(entries) if entries.is_empty())
    }

    /// Whether inserting `member` would leave the state as it is (a search of the list or one
    /// register read: no shift of a long list).
    pub(crate) fn holds(&self, member: MemberHash) -> bool {
        match &self.0 {
            Repr::Dense(registers) => {
                let (register, value) = member.register();
                registers[register] >= value
            }
            Repr::Sparse(entries) => {
                let entry = SparseEntry::of(member);
                position(entries, entry.index()).is_ok_and(|at| entries[at] >= entry)
            }
        }
    }

    /// About how many bytes [`to_bytes`](Self::to_bytes) gives (entries take one to four
    /// bytes each, by how far apart they are).
    pub(crate) fn encoded_len_estimate(&self) -> usize {
        match &self.0 {
            Repr::Sparse(entries) => 1 + 3 * entries.len(),
            Repr::Dense(_) => 1 + PACKED_DENSE_BYTES,
        }
    }

    /// Adds every member of `members`: the state inserting them one by one gives, but a sparse
    /// list is merged with them in one pass instead of shifted once per member (a list of
    /// thousands of entries costs a binary search and a shift of kilobytes per insert).
    pub(crate) fn insert_all(&mut self, members: &[MemberHash]) {
        match &mut self.0 {
            Repr::Dense(registers) => {
                for member in members {
                    raise(registers, member.register());
                }
            }
            Repr::Sparse(entries) => {
                let mut added: Vec<SparseEntry> = members
                    .iter()
                    .map(|&member| SparseEntry::of(member))
                    .collect();
                // By index, then rank: of entries with one index, the last has the largest rank.
                added.sort_unstable();
                added.dedup_by(|later, kept| {
                    let same = later.index() == kept.index();
                    if same {
                        *kept = *later;
                    }
                    same
                });
                self.0 = sparse_or_dense(merge_sorted(entries, &added));
            }
        }
    }

    /// The entries of a sparse sketch; `None` once it is dense.
    pub(crate) fn sparse_len(&self) -> Option<usize> {
        match &self.0 {
            Repr::Sparse(entries) => Some(entries.len()),
            Repr::Dense(_) => None,
        }
    }

    /// Adds every member of `other`.
    pub(crate) fn merge(&mut self, other: &UniqueSketch) {
        if self.is_empty() {
            // A copy: what merging into nothing comes to, without walking a sparse list.
            self.clone_from(other);
            return;
        }
        match (&mut self.0, &other.0) {
            (Repr::Dense(registers), Repr::Dense(others)) => {
                for (register, other) in registers.iter_mut().zip(others.iter()) {
                    *register = (*register).max(*other);
                }
            }
            (Repr::Dense(registers), Repr::Sparse(entries)) => {
                for entry in entries {
                    raise(registers, entry.register());
                }
            }
            (Repr::Sparse(entries), Repr::Dense(others)) => {
                let mut registers = others.clone();
                for entry in entries.iter() {
                    raise(&mut registers, entry.register());
                }
                self.0 = Repr::Dense(registers);
            }
            (Repr::Sparse(entries), Repr::Sparse(others)) => {
                self.0 = sparse_or_dense(merge_sorted(entries, others));
            }
        }
    }

    /// The estimated number of distinct members, rounded.
    pub(crate) fn estimate(&self) -> u64 {
        let estimate = match &self.0 {
            Repr::Sparse(entries) => linear_count(1 << SPARSE_PRECISION, entries.len()),
            Repr::Dense(registers) => dense_estimate(registers),
        };
        estimate.round().max(0.0) as u64
    }

    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        match &self.0 {
            Repr::Sparse(entries) => {
                let mut bytes = Vec::with_capacity(1 + 3 * entries.len());
                bytes.push(TAG_SPARSE);
                let mut previous = 0;
                for entry in entries {
                    push_varint(&mut bytes, entry.0 - previous);
                    previous = entry.0;
                }
                bytes
            }
            Repr::Dense(registers) => {
                let mut bytes = Vec::with_capacity(1 + PACKED_DENSE_BYTES);
                bytes.push(TAG_DENSE);
                for four in registers.chunks_exact(4) {
                    let packed = four
                        .iter()
                        .fold(0u32, |packed, &value| (packed << 6) | u32::from(value));
                    bytes.extend_from_slice(&packed.to_be_bytes()[1..]);
                }
                bytes
            }
        }
    }

    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<Self, SketchDecodeError> {
        let fail = |why: &str| SketchDecodeError(why.to_owned());
        match bytes.split_first() {
            Some((&TAG_SPARSE, mut rest)) => {
                let mut entries = Vec::new();
                let mut previous = 0u32;
                while !rest.is_empty() {
                    let delta = take_varint(&mut rest).ok_or_else(|| fail("truncated entry"))?;
                    let raw = previous
                        .checked_add(delta)
                        .ok_or_else(|| fail("entry out of range"))?;
                    let entry = SparseEntry::decoded(raw).ok_or_else(|| fail("invalid entry"))?;
                    if !entries.is_empty() && delta == 0 {
                        return Err(fail("entries out of order"));
                    }
                    entries.push(entry);
                    previous = raw;
                }
                if entries
                    .windows(2)
                    .any(|pair| pair[0].index() == pair[1].index())
                {
                    return Err(fail("two entries for one index"));
                }
                Ok(Self(sparse_or_dense(entries)))
            }
            Some((&TAG_DENSE, packed)) => {
                if packed.len() != PACKED_DENSE_BYTES {
                    return Err(fail("dense registers of the wrong length"));
                }
                let mut registers = zeroed_registers();
                for (four, three) in registers.chunks_exact_mut(4).zip(packed.chunks_exact(3)) {
                    let packed = u32::from_be_bytes([0, three[0], three[1], three[2]]);
                    for (at, register) in four.iter_mut().enumerate() {
                        *register = ((packed >> (18 - 6 * at)) & 0x3f) as u8;
                    }
                }
                if registers.iter().any(|&value| value > MAX_RANK) {
                    return Err(fail("register value out of range"));
                }
                Ok(Self(Repr::Dense(registers)))
            }
            Some((&legacy::TAG, _)) => legacy::decode(bytes),
            Some((tag, _)) => Err(fail(&format!("unknown format {tag}"))),
            None => Err(fail("empty")),
        }
    }

    /// Bytes this sketch holds beyond its own struct (for memory accounting).
    pub(crate) fn heap_bytes(&self) -> usize {
        match &self.0 {
            Repr::Sparse(entries) if entries.spilled() => 4 * entries.capacity(),
            Repr::Sparse(_) => 0,
            Repr::Dense(_) => REGISTERS,
        }
    }
}

/// Raises a register to `value`; says whether it was lower.
fn raise(registers: &mut [u8; REGISTERS], (register, value): (usize, u8)) -> bool {
    let slot = &mut registers[register];
    let raised = value > *slot;
    *slot = (*slot).max(value);
    raised
}

fn zeroed_registers() -> Box<[u8; REGISTERS]> {
    match vec![0u8; REGISTERS].into_boxed_slice().try_into() {
        Ok(registers) => registers,
        Err(_) => unreachable!("the vector has REGISTERS elements"),
    }
}

fn dense_from(entries: &[SparseEntry]) -> Box<[u8; REGISTERS]> {
    let mut registers = zeroed_registers();
    for entry in entries {
        raise(&mut registers, entry.register());
    }
    registers
}

fn sparse_or_dense(entries: Vec<SparseEntry>) -> Repr {
    if entries.len() > SPARSE_LIMIT {
        Repr::Dense(dense_from(&entries))
    } else {
        // A merge reserves room for both sides, a decode grows by doubling: hold no more than
        // the entries (inline again if they fit).
        let mut list = SmallVec::from_vec(entries);
        list.shrink_to_fit();
        Repr::Sparse(list)
    }
}

/// Below this many entries a list is searched by plain bisection: it spans a few cache lines.
const INTERPOLATE_FROM: usize = 64;

/// Where the entry for `index` is in `entries` (sorted by index, one entry per index), or
/// where it would go: what a binary search answers, from fewer places in memory. Indices are
/// hash bits, spread evenly over their range, so an index's entry lies close to the share of
/// the list its value is of the range. The search starts there and widens until it has the
/// index between two entries, then bisects that stretch. On a long list out of cache, a
/// bisection from the middle reads a new cache line at nearly every step; this reads a few
/// lines near the guess (the live sketches' counting spends a third less time, BENCHMARKS).
fn position(entries: &[SparseEntry], index: u32) -> Result<usize, usize> {
    let by_index = |entry: &SparseEntry| entry.index();
    if entries.len() < INTERPOLATE_FROM {
        return entries.binary_search_by_key(&index, by_index);
    }
    // An index has SPARSE_PRECISION bits, so the guess is below the length; `min` keeps any
    // other caller in bounds.
    let guess = (((u64::from(index) * entries.len() as u64) >> SPARSE_PRECISION) as usize)
        .min(entries.len() - 1);
    // The entries before `low` are below `index`, those from `high` on above it.
    let (mut low, mut high) = (0, entries.len());
    let mut step = 1;
    if entries[guess].index() < index {
        low = guess + 1;
        while let Some(probe) = guess.checked_add(step).filter(|&at| at < entries.len()) {
            if entries[probe].index() >= index {
                high = probe + 1;
                break;
            }
            low = probe + 1;
            step *= 2;
        }
    } else {
        high = guess + 1;
        while let Some(probe) = guess.checked_sub(step) {
            if entries[probe].index() < index {
                low = probe + 1;
                break;
            }
            high = probe + 1;
            step *= 2;
        }
    }
    match entries[low..high].binary_search_by_key(&index, by_index) {
        Ok(at) => Ok(low + at),
        Err(at) => Err(low + at),
    }
}

/// The union of two sorted entry lists, one entry per index with the larger rank.
fn merge_sorted(left: &[SparseEntry], right: &[SparseEntry]) -> Vec<SparseEntry> {
    let mut merged = Vec::with_capacity(left.len() + right.len());
    let (mut l, mut r) = (0, 0);
    while let (Some(&from_left), Some(&from_right)) = (left.get(l), right.get(r)) {
        match from_left.index().cmp(&from_right.index()) {
            std::cmp::Ordering::Less => {
                merged.push(from_left);
                l += 1;
            }
            std::cmp::Ordering::Greater => {
                merged.push(from_right);
                r += 1;
            }
            std::cmp::Ordering::Equal => {
                merged.push(from_left.max(from_right));
                l += 1;
                r += 1;
            }
        }
    }
    merged.extend_from_slice(&left[l..]);
    merged.extend_from_slice(&right[r..]);
    merged
}

/// Linear counting: the expected number of distinct members that leave `filled` of `slots`
/// slots occupied.
fn linear_count(slots: u64, filled: usize) -> f64 {
    let slots = slots as f64;
    slots * (slots / (slots - filled as f64)).ln()
}

/// Ertl's improved estimator (Algorithm 6 of the paper) over the registers' histogram.
fn dense_estimate(registers: &[u8; REGISTERS]) -> f64 {
    let mut histogram = [0u32; MAX_RANK as usize + 1];
    for &value in registers.iter() {
        histogram[usize::from(value)] += 1;
    }
    let m = REGISTERS as f64;
    let top = usize::from(MAX_RANK);
    let mut z = m * tau(1.0 - f64::from(histogram[top]) / m);
    for count in histogram[1..top].iter().rev() {
        z = 0.5 * (z + f64::from(*count));
    }
    z += m * sigma(f64::from(histogram[0]) / m);
    m * m / (2.0 * std::f64::consts::LN_2 * z)
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let (mut y, mut z) = (1.0, x);
    loop {
        x *= x;
        let previous = z;
        z += x * y;
        y += y;
        if z == previous {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let (mut y, mut z) = (1.0, 1.0 - x);
    loop {
        x = x.sqrt();
        let previous = z;
        y *= 0.5;
        z -= (1.0 - x).powi(2) * y;
        if z == previous {
            return z / 3.0;
        }
    }
}

fn push_varint(bytes: &mut Vec<u8>, mut value: u32) {
    while value >= 0x80 {
        bytes.push((value as u8) | 0x80);
        value >>= 7;
    }
    bytes.push(value as u8);
}

fn take_varint(bytes: &mut &[u8]) -> Option<u32> {
    let mut value = 0u32;
    for (at, &byte) in bytes.iter().enumerate().take(5) {
        if at == 4 && byte > 0x0f {
            return None; // past 32 bits
        }
        value |= u32::from(byte & 0x7f) << (7 * at);
        if byte & 0x80 == 0 {
            *bytes = &bytes[at + 1..];
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// For lists of every length around the threshold up to the sparse limit, with indices
    /// spread evenly or crowded together, the interpolated search answers exactly what
    /// bisection does, for indices present, absent, and at both ends of the range.
    #[test]
    fn the_interpolated_search_answers_what_bisection_answers() {
        let mut random = rand_chacha::ChaCha8Rng::seed_from_u64(19);
        let top = (1u32 << SPARSE_PRECISION) - 1;
        for len in [0, 1, 2, 63, 64, 65, 100, 511, 512, 2_000, SPARSE_LIMIT] {
            // Crowded: every index in a narrow band, so guesses land far from the entries.
            for spread in [top, top / 1_000 + 1] {
                let mut indices: Vec<u32> =
                    (0..len).map(|_| random.random_range(0..=spread)).collect();
                indices.sort_unstable();
                indices.dedup();
                let entries: Vec<SparseEntry> = indices
                    .iter()
                    .map(|&index| SparseEntry::new(index, 1))
                    .collect();
                let mut probes: Vec<u32> = vec![0, 1, top - 1, top, spread];
                probes.extend(indices.iter().copied());
                probes.extend(indices.iter().map(|index| index.saturating_add(1).min(top)));
                probes.extend((0..500).map(|_| random.random_range(0..=top)));
                for index in probes {
                    assert_eq!(
                        position(&entries, index),
                        entries.binary_search_by_key(&index, |entry| entry.index()),
                        "{len} entries, spread {spread}, index {index}"
                    );
                }
            }
        }
    }

    fn sketch_of(range: std::ops::Range<u64>) -> UniqueSketch {
        let mut sketch = UniqueSketch::new();
        for n in range {
            sketch.insert(MemberHash::of(format!("visitor-{n}").as_bytes()));
        }
        sketch
    }

    /// Sparse and dense, an insert says it changed the sketch exactly when its bytes change,
    /// and `holds` answers the same question without inserting.
    #[test]
    fn an_insert_says_whether_it_changed_the_state() {
        let mut sketch = UniqueSketch::new();
        for n in 0..9_000u64 {
            let member = MemberHash::of(format!("visitor-{}", n % 7_000).as_bytes());
            let before = sketch.to_bytes();
            let held = sketch.holds(member);
            let changed = sketch.insert(member);
            assert_eq!(changed, sketch.to_bytes() != before, "insert {n}");
            assert_eq!(held, !changed, "insert {n}");
            assert!(sketch.holds(member));
        }
        assert!(
            sketch.sparse_len().is_none(),
            "the test reached dense registers"
        );
    }

    #[test]
    fn small_sets_are_counted_within_one() {
        for n in [0u64, 1, 2, 4, 5, 10, 99, 500, 999, 4_000, 6_000] {
            let estimate = sketch_of(0..n).estimate();
            assert!(estimate.abs_diff(n) <= 1, "{n} counted as {estimate}");
        }
    }

    #[test]
    fn large_sets_are_within_two_percent() {
        for n in [5_000u64, 12_000, 50_000, 300_000, 2_000_000] {
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
        assert_eq!(small.estimate(), 400);
    }

    #[test]
    fn a_sketch_counts_the_same_however_it_was_put_together() {
        // Inserted one by one, merged from parts (sparse into sparse, sparse into dense and
        // dense into sparse), and read back from bytes: one state.
        for n in [3u64, 3_000, 7_000, 12_000] {
            let whole = sketch_of(0..n);
            let mut parts = sketch_of(0..n / 3);
            parts.merge(&sketch_of(n / 3..n));
            let mut reversed = sketch_of(n / 3..n);
            reversed.merge(&sketch_of(0..n / 3));
            let reread = UniqueSketch::from_bytes(&whole.to_bytes()).expect("decodes");
            for other in [parts, reversed, reread] {
                assert_eq!(other.to_bytes(), whole.to_bytes(), "{n} members");
            }
        }
    }

    #[test]
    fn members_added_at_once_give_the_state_they_give_one_by_one() {
        // Across the sparse limit, with repeats, into sparse and dense sketches alike.
        for (start, end) in [
            (0u64, 0u64),
            (0, 1),
            (0, 300),
            (0, 6_000),
            (0, 9_000),
            (5_000, 20_000),
        ] {
            for batch in [1usize, 7, 64] {
                let mut batched = sketch_of(0..start);
                let members: Vec<MemberHash> = (start..end)
                    .chain(start..start + (end - start) / 3)
                    .map(|n| MemberHash::of(format!("visitor-{n}").as_bytes()))
                    .collect();
                for chunk in members.chunks(batch) {
                    batched.insert_all(chunk);
                }
                assert_eq!(
                    batched.to_bytes(),
                    sketch_of(0..end).to_bytes(),
                    "{start}..{end} in batches of {batch}"
                );
            }
        }
        assert_eq!(sketch_of(0..10).sparse_len(), Some(10));
        assert_eq!(sketch_of(0..10_000).sparse_len(), None);
    }

    #[test]
    fn a_sketch_holds_no_more_memory_than_its_members_need() {
        assert_eq!(sketch_of(0..4).heap_bytes(), 0, "four members fit inline");
        let mut merged = sketch_of(0..2);
        merged.merge(&sketch_of(1..4));
        assert_eq!(merged.heap_bytes(), 0, "a small union is inline again");
        for n in [100u64, 5_000] {
            let decoded = UniqueSketch::from_bytes(&sketch_of(0..n).to_bytes()).expect("decodes");
            assert_eq!(
                decoded.heap_bytes(),
                4 * n as usize,
                "{n} entries, no spare room"
            );
        }
        let near_limit = sketch_of(0..SPARSE_LIMIT as u64);
        assert_eq!(near_limit.heap_bytes(), 4 * SPARSE_LIMIT);
        assert_eq!(sketch_of(0..10_000).heap_bytes(), REGISTERS);
    }

    #[test]
    fn a_sparse_entry_sets_the_register_its_member_sets() {
        for n in 0..100_000u64 {
            let member = MemberHash::of(&n.to_le_bytes());
            assert_eq!(SparseEntry::of(member).register(), member.register());
        }
        // The members whose index bits past precision 14 are zero, and the longest ranks.
        for hash in [0u64, 1, 1 << 38, 1 << 39, 1 << 40, 1 << 50, u64::MAX >> 14] {
            let member = MemberHash(hash);
            assert_eq!(
                SparseEntry::of(member).register(),
                member.register(),
                "{hash:#x}"
            );
        }
        assert_eq!(MemberHash(0).register(), (0, MAX_RANK));
    }

    #[test]
    fn bytes_that_are_not_a_sketch_are_refused() {
        let dense = sketch_of(0..10_000).to_bytes();
        let sparse = sketch_of(0..100).to_bytes();
        for bytes in [
            &[][..],
            &[9],
            &dense[..dense.len() - 1],
            &[TAG_SPARSE, 0x80],
            &[TAG_SPARSE, 0x40, 0],
            &[TAG_SPARSE, 1, 1],
            &[TAG_SPARSE, 0x7f],
            &[TAG_SPARSE, 0xff, 0xff, 0xff, 0xff, 0x7f],
            &[TAG_SPARSE, 0xff, 0xff, 0xff, 0xff, 0x0f],
            &sparse[..sparse.len() - 1]
                .iter()
                .chain(&[0x80])
                .copied()
                .collect::<Vec<_>>(),
        ] {
            assert!(UniqueSketch::from_bytes(bytes).is_err(), "{bytes:?}");
        }
        let mut out_of_range = dense.clone();
        out_of_range[1] = 0xff;
        assert!(UniqueSketch::from_bytes(&out_of_range).is_err());
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

//! A sketch filled one member at a time. Inserting into a sorted sparse list of thousands of
//! entries costs a binary search and a shift of half the list per member, so once the list is
//! long, new members wait in a small buffer and join it [`PENDING_MEMBERS`] at a time, in one
//! merge ([`UniqueSketch::insert_all`], which gives exactly the state of one-by-one inserts).

use super::{MemberHash, UniqueSketch};

/// From this many entries a sparse sketch's new members wait in the buffer: below it, a list
/// is short enough to insert into directly.
const BUFFER_FROM_ENTRIES: usize = 512;
/// Members a long sparse sketch takes in one merge.
const PENDING_MEMBERS: usize = 64;

/// Members waiting to be merged into a long sparse sketch.
#[derive(Debug)]
struct Pending {
    members: [MemberHash; PENDING_MEMBERS],
    len: usize,
}

/// A [`UniqueSketch`] and the members not yet merged into it; together they are its state.
#[derive(Debug, Default)]
pub(crate) struct BufferedSketch {
    sketch: UniqueSketch,
    /// Only while the sketch is a long sparse list; boxed, so the many short sketches do not
    /// carry room for it.
    pending: Option<Box<Pending>>,
}

impl BufferedSketch {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Adds `member`; says whether the state may have changed: false only when the sketch
    /// already holds it (a waiting member inserted again is counted as a change).
    pub(crate) fn insert(&mut self, member: MemberHash) -> bool {
        let long = self.pending.is_some()
            || self
                .sketch
                .sparse_len()
                .is_some_and(|len| len >= BUFFER_FROM_ENTRIES);
        if !long {
            return self.sketch.insert(member);
        }
        // Returning visitors are most members of a busy sketch: they need no place.
        if self.sketch.holds(member) {
            return false;
        }
        let pending = self.pending.get_or_insert_with(|| {
            Box::new(Pending {
                members: [member; PENDING_MEMBERS],
                len: 0,
            })
        });
        pending.members[pending.len] = member;
        pending.len += 1;
        if pending.len == PENDING_MEMBERS {
            self.settle();
        }
        true
    }

    /// About how many bytes the settled sketch encodes to.
    pub(crate) fn encoded_len_estimate(&self) -> usize {
        let pending = self.pending.as_ref().map_or(0, |pending| pending.len);
        self.sketch.encoded_len_estimate() + 3 * pending
    }

    /// The sketch with every member inserted so far.
    pub(crate) fn settled(&mut self) -> &UniqueSketch {
        self.settle();
        &self.sketch
    }

    /// The sketch with every member inserted.
    pub(crate) fn into_sketch(mut self) -> UniqueSketch {
        self.settle();
        self.sketch
    }

    /// Bytes held on the heap: the sketch's and the buffer's.
    pub(crate) fn heap_bytes(&self) -> usize {
        let pending = self
            .pending
            .as_ref()
            .map_or(0, |_| std::mem::size_of::<Pending>());
        self.sketch.heap_bytes() + pending
    }

    fn settle(&mut self) {
        if let Some(pending) = self.pending.take() {
            self.sketch.insert_all(&pending.members[..pending.len]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(n: u64) -> MemberHash {
        MemberHash::of(&n.to_le_bytes())
    }

    /// Across the point where buffering starts, mid-buffer and through the change to dense
    /// registers, the buffered sketch is byte for byte the sketch of one-by-one inserts.
    #[test]
    fn a_buffered_sketch_holds_exactly_what_one_by_one_inserts_hold() {
        let mut direct = UniqueSketch::new();
        let mut buffered = BufferedSketch::new();
        for n in 0..20_000u64 {
            // Repeats too: a member seen before changes nothing.
            let member = member(n % 7_919);
            direct.insert(member);
            buffered.insert(member);
            if [0, 511, 512, 513, 575, 576, 600, 3_000, 19_999].contains(&n) {
                assert_eq!(
                    buffered.settled().to_bytes(),
                    direct.to_bytes(),
                    "after {n}"
                );
            }
        }
        assert_eq!(buffered.into_sketch().to_bytes(), direct.to_bytes());
    }

    /// What the live sketches rely on to skip storing a copy: an insert that changes the
    /// state always says so, and a member the sketch holds (a returning visitor) never does.
    #[test]
    fn an_insert_says_whether_it_changed_the_sketch() {
        let mut direct = UniqueSketch::new();
        let mut buffered = BufferedSketch::new();
        let mut unchanged = 0;
        for n in 0..12_000u64 {
            let member = member(n % 7_919);
            let before = direct.to_bytes();
            let changed = buffered.insert(member);
            direct.insert(member);
            if direct.to_bytes() != before {
                assert!(changed, "insert {n} changed the sketch");
            }
            if n >= 7_919 {
                assert!(!changed, "insert {n} repeats a member held");
            }
            unchanged += usize::from(!changed);
        }
        assert!(unchanged >= 12_000 - 7_919, "{unchanged}");
        assert_eq!(buffered.into_sketch().to_bytes(), direct.to_bytes());
    }

    #[test]
    fn the_buffer_is_counted_while_it_holds_members() {
        let mut buffered = BufferedSketch::new();
        for n in 0..BUFFER_FROM_ENTRIES as u64 {
            buffered.insert(member(n));
        }
        let list_only = buffered.heap_bytes();
        buffered.insert(member(1_000_000));
        assert_eq!(
            buffered.heap_bytes(),
            list_only + std::mem::size_of::<Pending>()
        );
        let merged = buffered.settled().heap_bytes();
        assert_eq!(
            buffered.heap_bytes(),
            merged,
            "the buffer is gone once merged"
        );
    }
}

//! Beacons recorded since the flusher last counted them, grouped by their whole cell (site,
//! hour and every feature). A beacon costs one table lookup on the request path; the flusher
//! then counts each group's visitors into its feature subsets' sketches at once, finding each
//! sketch once per group instead of once per beacon: beacons of one page, referrer and device
//! within a second share a group, and a sketch's memory is visited once for all of them.
//!
//! Nothing is lost by waiting: the sketches are stored only by a flush, which counts what
//! waits first, and a crash before then is repaired from the stored beacons, as before.

use crate::domain::beacon::{Features, SiteId};
use crate::domain::sketch::MemberHash;
use hashbrown::HashTable;

/// What a group is charged against the budget besides its site text, its feature texts and
/// its members: the group, its table slot (at the table's worst load and growth, hence
/// twice), one leaf node of the features' map, and the allocator's rounding.
const GROUP_BASE_BYTES: usize = std::mem::size_of::<Group>()
    + 2 * std::mem::size_of::<Box<Group>>()
    + std::mem::size_of::<[(String, String); 11]>()
    + 64;

/// The visitors of one whole cell waiting to be counted.
pub(crate) struct Group {
    hash: u64,
    pub(crate) site: SiteId,
    /// Hours since the epoch.
    pub(crate) hour: i64,
    pub(crate) features: Features,
    /// In arrival order; a returning visitor may be here twice (counting it twice is harmless).
    pub(crate) members: Vec<MemberHash>,
    /// What this group is charged against the budget.
    pub(crate) charged: u64,
}

impl Group {
    fn is(&self, hash: u64, site: &SiteId, hour: i64, features: &Features) -> bool {
        self.hash == hash && self.hour == hour && &self.site == site && &self.features == features
    }

    fn charge(&self) -> u64 {
        let texts: usize = self
            .features
            .entries()
            .iter()
            .map(|(name, value)| name.len() + value.len())
            .sum();
        (GROUP_BASE_BYTES
            + self.site.as_str().len()
            + texts
            + self.members.capacity() * std::mem::size_of::<MemberHash>()) as u64
    }
}

/// One shard's waiting groups.
#[derive(Default)]
pub(crate) struct Waiting {
    groups: HashTable<Box<Group>>,
}

impl Waiting {
    /// Adds `member` to the group of its whole cell (`hash` is the cell's hash), making the
    /// group if it is new; returns by how much the charge grew.
    pub(crate) fn add(
        &mut self,
        hash: u64,
        site: &SiteId,
        hour: i64,
        features: &Features,
        member: MemberHash,
    ) -> u64 {
        let group = match self
            .groups
            .find_mut(hash, |group| group.is(hash, site, hour, features))
        {
            Some(group) => group,
            None => {
                let group = Box::new(Group {
                    hash,
                    site: site.clone(),
                    hour,
                    features: features.clone(),
                    members: Vec::new(),
                    charged: 0,
                });
                self.groups
                    .insert_unique(hash, group, |group| group.hash)
                    .into_mut()
            }
        };
        group.members.push(member);
        let charge = group.charge();
        let grown = charge.saturating_sub(group.charged);
        group.charged = group.charged.max(charge);
        grown
    }

    /// Takes every group out, leaving an empty table that keeps no memory of a burst.
    pub(crate) fn take(&mut self) -> Vec<Group> {
        std::mem::take(&mut self.groups)
            .into_iter()
            .map(|group| *group)
            .collect()
    }

    /// Puts back groups taken and not counted (a flush dropped halfway, at shutdown), each
    /// merged with a group of the same cell made since; their charges stay as they were.
    pub(crate) fn put_back(&mut self, groups: impl IntoIterator<Item = Group>) {
        for group in groups {
            let hash = group.hash;
            match self.groups.find_mut(hash, |made| {
                made.is(hash, &group.site, group.hour, &group.features)
            }) {
                Some(made) => {
                    made.members.extend_from_slice(&group.members);
                    made.charged += group.charged;
                }
                None => {
                    self.groups
                        .insert_unique(hash, Box::new(group), |group| group.hash);
                }
            }
        }
    }

    /// Members waiting (tests).
    #[cfg(test)]
    pub(crate) fn members(&self) -> usize {
        self.groups.iter().map(|group| group.members.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn features(pairs: &[(&str, &str)]) -> Features {
        Features::new(
            pairs
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect(),
        )
        .expect("valid features")
    }

    #[test]
    fn beacons_of_one_whole_cell_share_a_group_and_every_charge_is_counted_once() {
        let site = SiteId::parse("example.com").expect("valid site");
        let page = features(&[("page", "/a")]);
        let other_page = features(&[("page", "/b")]);
        let mut waiting = Waiting::default();
        let mut charged = 0;
        for n in 0..10 {
            charged += waiting.add(7, &site, 100, &page, MemberHash::of(&[n]));
        }
        // Same hash, other cells: a collision never merges two groups.
        charged += waiting.add(7, &site, 100, &other_page, MemberHash::of(b"x"));
        charged += waiting.add(7, &site, 101, &page, MemberHash::of(b"y"));
        assert_eq!(waiting.members(), 12);
        let groups = waiting.take();
        assert_eq!(groups.len(), 3);
        let ten = groups
            .iter()
            .find(|group| group.hour == 100 && group.features == page)
            .expect("the page's group");
        assert_eq!(ten.members.len(), 10);
        assert_eq!(
            groups.iter().map(|group| group.charged).sum::<u64>(),
            charged,
            "what was charged is what the groups carry"
        );
        assert_eq!(waiting.members(), 0, "taking empties the table");
    }
}

//! Turns between a day's due lists: how many entries each list gives to one round, and the
//! order in which the round's entries are decided, so that every list is served from the
//! round's start and one advertiser's flood of conversions cannot hold another's back.

/// Entries one round takes from all of a day's lists together.
const ROUND: usize = 400;
/// The most one list gives to a round: a lone busy advertiser is decided at full pace (idle
/// lists do not count: the round is shared among the lists that gave entries to the last).
const SHARE_MAX: usize = 200;
/// The fewest: with thousands of advertisers, each still moves every round.
const SHARE_MIN: usize = 10;

/// How many entries each list gives to one round when `lists` of them are busy.
pub(crate) fn share(lists: usize) -> usize {
    (ROUND / lists.max(1)).clamp(SHARE_MIN, SHARE_MAX)
}

/// The positions (list, entry) of `lengths`' entries, taking one from each list in turn.
pub(crate) fn in_turn(lengths: &[usize]) -> Vec<(usize, usize)> {
    let longest = lengths.iter().copied().max().unwrap_or(0);
    (0..longest)
        .flat_map(|position| {
            lengths
                .iter()
                .enumerate()
                .filter(move |(_, length)| position < **length)
                .map(move |(list, _)| (list, position))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_list_gives_the_most_and_many_lists_share_the_round() {
        assert_eq!(share(0), SHARE_MAX);
        assert_eq!(share(1), SHARE_MAX);
        assert_eq!(share(2), SHARE_MAX);
        assert_eq!(share(4), 100);
        assert_eq!(share(40), SHARE_MIN);
        assert_eq!(share(10_000), SHARE_MIN);
    }

    #[test]
    fn each_list_is_served_before_any_gives_its_second_entry() {
        assert_eq!(
            in_turn(&[3, 1, 0, 2]),
            vec![(0, 0), (1, 0), (3, 0), (0, 1), (3, 1), (0, 2)]
        );
        assert!(in_turn(&[]).is_empty());
        assert!(in_turn(&[0, 0]).is_empty());
    }
}

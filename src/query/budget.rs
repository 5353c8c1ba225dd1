//! The partition budget: how many partitions one query may read, judged on the range as asked
//! (before any clipping to the present), so that the cost of an answer is known before any
//! read and a cheap request cannot make the server read without bound. A sealed day costs one
//! partition (its rollup); any other day as many as the largest bucket count scheduled for it.

use crate::store::StoreError;

/// Why a query was not answered.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The range would read more partitions than the budget allows.
    #[error(
        "the range needs {partitions} partition reads, more than the {max} a query may make \
         (a sealed day counts as one, any other day as its bucket count): ask for fewer days"
    )]
    TooWide { partitions: u64, max: u64 },
}

/// The most partitions one query may read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PartitionBudget {
    pub(crate) max: u64,
}

impl PartitionBudget {
    /// Refuses a query that would read `partitions`.
    pub(crate) fn check(self, partitions: u64) -> Result<(), QueryError> {
        if partitions > self.max {
            return Err(QueryError::TooWide {
                partitions,
                max: self.max,
            });
        }
        Ok(())
    }

    /// The cost of days, each sealed (one read) or read raw (its partitions).
    pub(crate) fn cost<'a>(days: impl IntoIterator<Item = (bool, usize)> + 'a) -> u64 {
        days.into_iter()
            .map(|(sealed, partitions)| if sealed { 1 } else { partitions as u64 })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_days_cost_one_and_the_rest_their_partitions() {
        let budget = PartitionBudget { max: 300 };
        let year_sealed = std::iter::repeat_n((true, 256), 300);
        assert_eq!(PartitionBudget::cost(year_sealed), 300);
        assert!(budget.check(300).is_ok());
        let two_raw_days = [(false, 256), (false, 256)];
        let cost = PartitionBudget::cost(two_raw_days);
        assert_eq!(cost, 512);
        assert!(matches!(
            budget.check(cost),
            Err(QueryError::TooWide {
                partitions: 512,
                max: 300
            })
        ));
    }
}

//! The read side: which partitions a question needs (pure planning), reading them with a
//! bounded number in flight, and adding the rows up. Shared by every store.

pub mod aggregate;
pub mod clicks;
pub mod export;
pub mod impressions;
pub mod plan;
pub mod range;
pub mod recent;
pub mod report;
pub mod summary;
pub mod uniques;

/// How reads fan out.
#[derive(Debug, Clone, Copy)]
pub struct FanOut {
    /// Partition reads in flight at once for one query.
    pub concurrency: usize,
}

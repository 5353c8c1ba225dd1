//! Rows of many small partitions, grouped by the node that owns each partition into unlogged
//! batches small enough that Cassandra neither warns nor refuses them. The live-sketch flush
//! writes thousands of one-row partitions a second; one request per row made the node spend
//! most of its time on request overhead, while a batch whose partitions all live on its
//! coordinator (the driver routes a batch by its first statement) costs that overhead once
//! and adds no hop.

use scylla::client::session::Session;
use std::collections::HashMap;
use uuid::Uuid;

/// Partitions per batch: Cassandra warns past `unlogged_batch_across_partitions_warn_threshold`
/// (default 10).
const PARTITIONS_PER_BATCH: usize = 10;
/// Payload bytes per batch, below `batch_size_warn_threshold` (default 5 KiB, counted over
/// the whole mutation, keys included). A larger row travels alone, where no threshold applies.
const BYTES_PER_BATCH: usize = 4 * 1024;

/// Splits `rows` (one partition each) into groups to write as one request each: rows whose
/// partitions share their first replica, at most [`PARTITIONS_PER_BATCH`] and
/// [`BYTES_PER_BATCH`] together. `owner` gives a row's first replica; `None` (the driver does
/// not know the table yet) groups the row with the other unknowns, which is still correct,
/// only less local.
pub(crate) fn by_replica<T>(
    rows: Vec<T>,
    owner: impl Fn(&T) -> Option<Uuid>,
    bytes: impl Fn(&T) -> usize,
) -> Vec<Vec<T>> {
    let mut by_owner: HashMap<Option<Uuid>, Vec<T>> = HashMap::new();
    for row in rows {
        by_owner.entry(owner(&row)).or_default().push(row);
    }
    let mut groups = Vec::new();
    for (_, rows) in by_owner {
        let mut group: Vec<T> = Vec::new();
        let mut group_bytes = 0;
        for row in rows {
            let size = bytes(&row);
            if !group.is_empty()
                && (group.len() == PARTITIONS_PER_BATCH || group_bytes + size > BYTES_PER_BATCH)
            {
                groups.push(std::mem::take(&mut group));
                group_bytes = 0;
            }
            group_bytes += size;
            group.push(row);
        }
        if !group.is_empty() {
            groups.push(group);
        }
    }
    groups
}

/// The host id of the first replica of `partition_key` in `keyspace.table`, as the driver's
/// view of the ring has it.
pub(crate) fn first_replica(
    session: &Session,
    keyspace: &str,
    table: &str,
    partition_key: &dyn scylla::serialize::row::SerializeRow,
) -> Option<Uuid> {
    let cluster = session.get_cluster_state();
    let token = cluster.compute_token(keyspace, table, partition_key).ok()?;
    cluster
        .get_token_endpoints(keyspace, table, token)
        .first()
        .map(|(node, _)| node.host_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_stay_with_one_owner_and_under_both_bounds_and_keep_every_row() {
        let (a, b) = (Some(Uuid::from_u128(1)), Some(Uuid::from_u128(2)));
        // (owner, bytes, id)
        let mut rows: Vec<(Option<Uuid>, usize, usize)> = (0..25).map(|id| (a, 100, id)).collect();
        rows.extend((25..30).map(|id| (b, 3000, id)));
        rows.push((b, 20_000, 30));
        rows.push((None, 10, 31));
        let groups = by_replica(rows, |row| row.0, |row| row.1);

        let mut ids: Vec<usize> = groups.iter().flatten().map(|row| row.2).collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..32).collect::<Vec<_>>());
        for group in &groups {
            assert!(group.iter().all(|row| row.0 == group[0].0), "{group:?}");
            assert!(group.len() <= PARTITIONS_PER_BATCH, "{group:?}");
            let bytes: usize = group.iter().map(|row| row.1).sum();
            assert!(group.len() == 1 || bytes <= BYTES_PER_BATCH, "{group:?}");
        }
        // 25 small rows of one owner: three groups, not twenty-five requests.
        assert_eq!(groups.iter().filter(|group| group[0].0 == a).count(), 3);
        // The oversized row travels alone.
        assert!(
            groups
                .iter()
                .any(|group| group.len() == 1 && group[0].2 == 30)
        );
    }
}

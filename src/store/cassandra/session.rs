//! Opening a driver session from [`CassandraConfig`]: consistency, timeouts, load balancing
//! and credentials are decided here once, so statements elsewhere only bind values.

use super::config::{CassandraConfig, ConsistencyLevel};
use crate::store::StoreError;
use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::policies::load_balancing::DefaultPolicy;
use scylla::statement::Consistency;

/// Connects to the cluster. The keyspace may not exist yet: statements name it explicitly.
pub(crate) async fn connect(config: &CassandraConfig) -> Result<Session, StoreError> {
    let mut policy = DefaultPolicy::builder().token_aware(true);
    if let Some(datacenter) = &config.local_datacenter {
        // Stay in the local datacenter: LOCAL_QUORUM means nothing if the coordinator is remote.
        policy = policy
            .prefer_datacenter(datacenter.clone())
            .permit_dc_failover(false);
    }
    let profile = ExecutionProfile::builder()
        .consistency(driver_consistency(config.consistency))
        .request_timeout(Some(config.request_timeout))
        .load_balancing_policy(policy.build())
        .build();
    let mut builder = SessionBuilder::new()
        .known_nodes(&config.nodes)
        // The driver reads the schema it routes by at connect and again on every schema change
        // in the cluster: only this keyspace's, not every other application's of a shared one.
        .keyspaces_to_fetch([config.keyspace.as_str()])
        .connection_timeout(config.connect_timeout)
        .default_execution_profile_handle(profile.into_handle());
    if let Some(credentials) = &config.credentials {
        builder = builder.user(&credentials.username, &credentials.password);
    }
    builder.build().await.map_err(|error| {
        StoreError::unavailable(
            format!("cannot connect to Cassandra at {}", config.nodes.join(",")),
            error,
        )
    })
}

fn driver_consistency(level: ConsistencyLevel) -> Consistency {
    match level {
        ConsistencyLevel::One => Consistency::One,
        ConsistencyLevel::LocalOne => Consistency::LocalOne,
        ConsistencyLevel::Quorum => Consistency::Quorum,
        ConsistencyLevel::LocalQuorum => Consistency::LocalQuorum,
        ConsistencyLevel::EachQuorum => Consistency::EachQuorum,
        ConsistencyLevel::All => Consistency::All,
    }
}

//! How to reach a Cassandra or ScyllaDB cluster and how to lay out the keyspace there, as
//! validated values: an invalid keyspace name or replication setting cannot be constructed.

use crate::domain::retention::Retention;
use std::{fmt, str::FromStr, time::Duration};

/// Everything the Cassandra store needs to connect and create its keyspace.
#[derive(Debug, Clone)]
pub struct CassandraConfig {
    /// Contact points as `host:port`; the driver discovers the rest of the cluster from them.
    pub nodes: Vec<String>,
    pub keyspace: KeyspaceName,
    /// Used only when the keyspace does not exist yet; an existing keyspace is never altered.
    pub replication: Replication,
    /// For reads and writes alike, so that a write acknowledged at this level is seen by the
    /// next read (LOCAL_QUORUM both ways at RF 3).
    pub consistency: ConsistencyLevel,
    /// Datacenter whose nodes are preferred as coordinators; none means any.
    pub local_datacenter: Option<String>,
    pub credentials: Option<Credentials>,
    pub connect_timeout: Duration,
    /// Client-side bound on one request, retries included.
    pub request_timeout: Duration,
    /// How a partition's events are sent: see [`WriteMode`].
    pub write_mode: WriteMode,
    /// Raw rows expire this long after their UTC day began (`USING TTL`, `--retain-raw`).
    pub retain_raw: Retention,
    /// Rollups of days expire this long after the day began (`--retain-aggregates`); never
    /// delivery's sealed totals, or lifetime caps would start again.
    pub retain_aggregates: Retention,
}

/// How the events of one partition are sent to the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WriteMode {
    /// Unlogged batches of one partition's rows (one mutation each, chunked well below the
    /// mutation size limit).
    Batch,
    /// One prepared insert per row, many in flight at once.
    Rows,
}

#[derive(Clone)]
pub struct Credentials {
    pub(crate) username: String,
    pub(crate) password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// A keyspace name Cassandra accepts unquoted: a letter, then up to 47 letters, digits or
/// underscores. Lower-cased, since unquoted CQL identifiers are case-insensitive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyspaceName(String);

impl KeyspaceName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for KeyspaceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for KeyspaceName {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        let mut chars = name.chars();
        let starts_with_letter = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
        if !starts_with_letter
            || name.len() > 48
            || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(format!(
                "invalid keyspace name {name:?}: a letter, then at most 47 letters, digits or underscores"
            ));
        }
        Ok(Self(name.to_ascii_lowercase()))
    }
}

/// Replication of a keyspace the service creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replication {
    /// `simple:N`: SimpleStrategy with N replicas, for development clusters.
    Simple(u16),
    /// `dc1:3,dc2:3`: NetworkTopologyStrategy with a factor per datacenter, for production.
    NetworkTopology(Vec<(String, u16)>),
}

impl Replication {
    /// The CQL map literal for `WITH replication = …`.
    pub(crate) fn to_cql(&self) -> String {
        match self {
            Self::Simple(factor) => {
                format!("{{'class': 'SimpleStrategy', 'replication_factor': {factor}}}")
            }
            Self::NetworkTopology(datacenters) => {
                let factors: String = datacenters
                    .iter()
                    .map(|(dc, factor)| format!(", '{dc}': {factor}"))
                    .collect();
                format!("{{'class': 'NetworkTopologyStrategy'{factors}}}")
            }
        }
    }
}

impl FromStr for Replication {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let factor = |value: &str| {
            value
                .trim()
                .parse::<u16>()
                .ok()
                .filter(|factor| *factor > 0)
                .ok_or_else(|| {
                    format!("invalid replication factor {value:?}: a whole number above 0")
                })
        };
        if let Some(value) = text.strip_prefix("simple:") {
            return Ok(Self::Simple(factor(value)?));
        }
        let mut datacenters = Vec::new();
        for entry in text.split(',') {
            let (dc, value) = entry.split_once(':').ok_or_else(|| {
                format!("invalid replication {text:?}: expected simple:N or DC:N[,DC:N…]")
            })?;
            let dc = dc.trim();
            let valid_dc = !dc.is_empty()
                && dc
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
            if !valid_dc {
                return Err(format!(
                    "invalid datacenter name {dc:?} in replication {text:?}"
                ));
            }
            datacenters.push((dc.to_owned(), factor(value)?));
        }
        Ok(Self::NetworkTopology(datacenters))
    }
}

impl fmt::Display for Replication {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Simple(factor) => write!(f, "simple:{factor}"),
            Self::NetworkTopology(datacenters) => {
                let entries: Vec<String> = datacenters
                    .iter()
                    .map(|(dc, factor)| format!("{dc}:{factor}"))
                    .collect();
                f.write_str(&entries.join(","))
            }
        }
    }
}

/// The consistency levels that make sense for this service's reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ConsistencyLevel {
    One,
    LocalOne,
    Quorum,
    LocalQuorum,
    EachQuorum,
    All,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyspace_names_follow_cassandra_rules() {
        assert_eq!(
            "AdEvents_1".parse::<KeyspaceName>().map(|k| k.0),
            Ok("adevents_1".into())
        );
        for bad in ["", "1abc", "ad-events", "a b", &"a".repeat(49)] {
            assert!(bad.parse::<KeyspaceName>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn simple_replication_for_development() {
        let replication: Replication = "simple:1".parse().expect("valid");
        assert_eq!(
            replication.to_cql(),
            "{'class': 'SimpleStrategy', 'replication_factor': 1}"
        );
    }

    #[test]
    fn network_topology_replication_names_each_datacenter() {
        let replication: Replication = "dc1:3, eu-west:2".parse().expect("valid");
        assert_eq!(
            replication.to_cql(),
            "{'class': 'NetworkTopologyStrategy', 'dc1': 3, 'eu-west': 2}"
        );
        assert_eq!(replication.to_string(), "dc1:3,eu-west:2");
    }

    #[test]
    fn malformed_replication_is_refused() {
        for bad in ["simple:0", "simple:x", "dc1", "dc1:3,", "d'c:3", "dc1:-1"] {
            assert!(bad.parse::<Replication>().is_err(), "{bad:?}");
        }
    }
}

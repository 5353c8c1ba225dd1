//! Which client sent a request, as far as the view join tells clients apart (its network
//! and user agent), and a report's identity from its client and body.

use super::report::ViewReport;
use crate::domain::traffic::UserAgent;
use std::net::IpAddr;
use uuid::Uuid;

/// A client's network: IPv4 /24 or IPv6 /48, the part of an address that stays the same for
/// one viewer across requests and says little about who they are. A 6to4 address is its IPv4
/// client's, as truncation keeps it (`crate::domain::address::truncated`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Network {
    V4([u8; 3]),
    V6([u8; 6]),
}

impl Network {
    pub(crate) fn of(address: IpAddr) -> Self {
        match address {
            IpAddr::V4(ip) => {
                let [a, b, c, _] = ip.octets();
                Self::V4([a, b, c])
            }
            IpAddr::V6(ip) => match ip
                .to_ipv4_mapped()
                .or_else(|| crate::domain::address::six_to_four(ip))
            {
                Some(v4) => Self::of(IpAddr::V4(v4)),
                None => {
                    let octets = ip.octets();
                    let mut prefix = [0; 6];
                    prefix.copy_from_slice(&octets[..6]);
                    Self::V6(prefix)
                }
            },
        }
    }

    /// The stored form: 3 bytes for IPv4, 6 for IPv6.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            Self::V4(prefix) => prefix,
            Self::V6(prefix) => prefix,
        }
    }

    pub(crate) fn from_bytes(bytes: &[u8]) -> Option<Self> {
        match bytes.len() {
            3 => Some(Self::V4(bytes.try_into().ok()?)),
            6 => Some(Self::V6(bytes.try_into().ok()?)),
            _ => None,
        }
    }
}

/// A user agent as a stable 64-bit tag: enough to tell one browser build from another, at a
/// fixed 8 bytes per row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AgentTag(i64);

impl AgentTag {
    pub(crate) fn of(agent: &UserAgent) -> Self {
        Self(xxhash_rust::xxh3::xxh3_64(agent.as_str().as_bytes()) as i64)
    }

    pub(crate) fn from_stored(tag: i64) -> Self {
        Self(tag)
    }

    pub(crate) fn stored(self) -> i64 {
        self.0
    }
}

/// Who sent a request, as far as the join tells clients apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Client {
    pub(crate) network: Option<Network>,
    pub(crate) agent: Option<AgentTag>,
}

impl Client {
    pub(crate) fn of(address: Option<IpAddr>, agent: Option<&UserAgent>) -> Self {
        Self {
            network: address.map(Network::of),
            agent: agent.map(AgentTag::of),
        }
    }
}

/// A report's identity within its impression: its client and its parsed body. A report sent
/// again is the same report; another body or another client is another one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReportId(Uuid);

impl ReportId {
    pub(crate) fn of(client: &Client, report: &ViewReport) -> Self {
        let mut bytes = Vec::with_capacity(32);
        let network = client.network.as_ref().map_or(&[][..], Network::as_bytes);
        bytes.push(network.len() as u8);
        bytes.extend_from_slice(network);
        bytes.extend(client.agent.map_or([0; 9], |agent| {
            let mut tagged = [1; 9];
            tagged[1..].copy_from_slice(&agent.0.to_be_bytes());
            tagged
        }));
        bytes.push(report.kinds.bits());
        bytes.extend(report.in_view_ms.map_or(u64::MAX, u64::from).to_be_bytes());
        bytes.push(report.max_visible.map_or(u8::MAX, |percent| percent));
        Self(Uuid::from_u128(xxhash_rust::xxh3::xxh3_128(&bytes)))
    }

    pub(crate) fn from_stored(id: Uuid) -> Self {
        Self(id)
    }

    pub(crate) fn as_uuid(&self) -> Uuid {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_are_a_24_or_a_48() {
        let v4: IpAddr = "203.0.113.77".parse().expect("ip");
        let same: IpAddr = "203.0.113.1".parse().expect("ip");
        assert_eq!(Network::of(v4), Network::of(same));
        assert_eq!(Network::of(v4).as_bytes(), [203, 0, 113]);
        let v6: IpAddr = "2001:db8:1:2::1".parse().expect("ip");
        let v6_other: IpAddr = "2001:db8:1:ffff::9".parse().expect("ip");
        assert_eq!(Network::of(v6), Network::of(v6_other));
        assert_eq!(
            Network::from_bytes(Network::of(v6).as_bytes()),
            Some(Network::of(v6))
        );
        let mapped: IpAddr = "::ffff:203.0.113.9".parse().expect("ip");
        assert_eq!(Network::of(mapped), Network::of(v4));
    }
}

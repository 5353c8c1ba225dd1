//! What of a client's address may be kept (docs/API.md, "Privacy"): by default its last bits
//! zeroed, IPv4 to its /24 and IPv6 to its /48, in every stored record, answer and log line.
//! The full address lives only in memory, for rate limits and invalid-traffic checks.
//!
//! An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, what a dual-stack socket reports for an
//! IPv4 client) is an IPv4 client: it keeps its mapped form and loses its last octet, as the
//! IPv4 address would. Taken as IPv6, its /48 would be `::`, which says nothing at all, and
//! the view join (which reads it as IPv4, [`super::view::Network`]) would lose its client.
//! A 6to4 address (`2002:AABB:CCDD::/48`) carries its client's whole IPv4 address in its /48,
//! so it loses that address's last octet instead (a /40).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What a record, an answer or a log line may keep of a client's address
/// (`--store-ip`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum StoreIp {
    /// The address with its last bits zeroed: IPv4 to its /24, IPv6 to its /48. The part
    /// that stays the same for one viewer across requests and says little about who they
    /// are: the network the view join compares already.
    #[default]
    Truncated,
    /// The address as received.
    Full,
    /// Nothing: no address, and no network derived from one, is kept.
    None,
}

impl StoreIp {
    /// What may be kept of `address` under this policy.
    pub fn stored(self, address: Option<IpAddr>) -> Option<IpAddr> {
        let address = address?;
        match self {
            Self::Truncated => Some(truncated(address)),
            Self::Full => Some(address),
            Self::None => None,
        }
    }

    /// The flag's spelling, for progress lines and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Truncated => "truncated",
            Self::Full => "full",
            Self::None => "none",
        }
    }
}

impl std::fmt::Display for StoreIp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `address` with its last bits zeroed: an IPv4 address (mapped ones included) to its /24, a
/// 6to4 address to the /24 of the IPv4 address it carries, any other IPv6 address to its /48.
/// Idempotent, so a rewrite can run twice.
pub fn truncated(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(ip) => IpAddr::V4(truncated_v4(ip)),
        IpAddr::V6(ip) => match ip.to_ipv4_mapped() {
            Some(mapped) => IpAddr::V6(truncated_v4(mapped).to_ipv6_mapped()),
            None => {
                let mut octets = ip.octets();
                let kept = if six_to_four(ip).is_some() { 5 } else { 6 };
                octets[kept..].fill(0);
                IpAddr::V6(Ipv6Addr::from(octets))
            }
        },
    }
}

/// The IPv4 address a 6to4 address (`2002::/16`, RFC 3056) carries in its bits 16 to 48.
pub(crate) fn six_to_four(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let octets = ip.octets();
    (octets[..2] == [0x20, 0x02]).then(|| Ipv4Addr::new(octets[2], octets[3], octets[4], octets[5]))
}

fn truncated_v4(ip: Ipv4Addr) -> Ipv4Addr {
    let [a, b, c, _] = ip.octets();
    Ipv4Addr::new(a, b, c, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::view::Client;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("an address")
    }

    #[test]
    fn ipv4_keeps_its_24() {
        assert_eq!(truncated(ip("203.0.113.77")), ip("203.0.113.0"));
        assert_eq!(truncated(ip("203.0.113.0")), ip("203.0.113.0"));
        assert_eq!(truncated(ip("255.255.255.255")), ip("255.255.255.0"));
    }

    #[test]
    fn ipv6_keeps_its_48() {
        assert_eq!(
            truncated(ip("2001:db8:1:2:3:4:5:6")),
            ip("2001:db8:1::"),
            "the subnet and interface bits go"
        );
        assert_eq!(
            truncated(ip("2001:db8:abcd:ffff::1")),
            ip("2001:db8:abcd::")
        );
        assert_eq!(truncated(ip("::1")), ip("::"));
    }

    #[test]
    fn an_ipv4_mapped_address_is_truncated_as_ipv4_and_stays_mapped() {
        assert_eq!(
            truncated(ip("::ffff:203.0.113.77")),
            ip("::ffff:203.0.113.0")
        );
    }

    #[test]
    fn a_6to4_address_loses_the_last_octet_of_the_ipv4_address_it_carries() {
        // 2002:cb00:714d::/48 is 203.0.113.77 itself.
        assert_eq!(truncated(ip("2002:cb00:714d::1")), ip("2002:cb00:7100::"));
        assert_eq!(truncated(ip("2002:cb00:714d:5::")), ip("2002:cb00:7100::"));
    }

    #[test]
    fn truncation_is_idempotent() {
        for text in [
            "198.51.100.9",
            "2001:db8:7:8::9",
            "::ffff:192.0.2.1",
            "2002:cb00:714d::1",
        ] {
            let once = truncated(ip(text));
            assert_eq!(truncated(once), once, "{text}");
        }
    }

    #[test]
    fn each_policy_keeps_what_it_says() {
        let address = Some(ip("198.51.100.9"));
        assert_eq!(StoreIp::Truncated.stored(address), Some(ip("198.51.100.0")));
        assert_eq!(StoreIp::Full.stored(address), address);
        assert_eq!(StoreIp::None.stored(address), None);
        for policy in [StoreIp::Truncated, StoreIp::Full, StoreIp::None] {
            assert_eq!(policy.stored(None), None, "{policy}");
        }
        assert_eq!(StoreIp::default(), StoreIp::Truncated);
    }

    /// The view join tells clients apart by the /24 (/48) of their address: a truncated
    /// impression must still be rendered for the client its full address was.
    #[test]
    fn truncation_leaves_the_view_joins_client_unchanged() {
        for text in [
            "203.0.113.77",
            "2001:db8:1:2:3:4:5:6",
            "::ffff:203.0.113.77",
            "2002:cb00:714d::1",
            "::1",
        ] {
            let full = Some(ip(text));
            assert_eq!(
                Client::of(StoreIp::Truncated.stored(full), None),
                Client::of(full, None),
                "{text}"
            );
        }
    }
}

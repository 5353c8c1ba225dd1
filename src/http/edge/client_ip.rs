//! The client's address: the TCP peer, or, when the peer is a configured trusted proxy, the
//! nearest untrusted address in `X-Forwarded-For` (the left part of that header is whatever
//! the client wrote, so only hops appended by trusted proxies are believed).

use axum::extract::ConnectInfo;
use axum::http::request::Parts;
use ipnet::IpNet;
use std::net::{IpAddr, SocketAddr};

pub(crate) fn client_ip(parts: &Parts, trusted_proxies: &[IpNet]) -> Option<IpAddr> {
    let peer = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(address)| address.ip())?;
    let trusted = |ip: &IpAddr| trusted_proxies.iter().any(|net| net.contains(ip));
    if !trusted(&peer) {
        return Some(peer);
    }
    let hops: Vec<IpAddr> = parts
        .headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|hop| hop.trim().parse().ok())
        .collect();
    hops.iter()
        .rev()
        .find(|hop| !trusted(hop))
        .or(hops.first())
        .copied()
        .or(Some(peer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Request;

    fn parts(peer: &str, forwarded: Option<&str>) -> Parts {
        let mut builder = Request::builder();
        if let Some(forwarded) = forwarded {
            builder = builder.header("x-forwarded-for", forwarded);
        }
        let (mut parts, ()) = builder.body(()).expect("request").into_parts();
        parts.extensions.insert(ConnectInfo(SocketAddr::new(
            peer.parse().expect("ip"),
            1234,
        )));
        parts
    }

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_proxies() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().expect("net")];
        let ip = |text: &str| Some(text.parse::<IpAddr>().expect("ip"));
        assert_eq!(
            client_ip(&parts("203.0.113.5", Some("1.2.3.4")), &trusted),
            ip("203.0.113.5")
        );
        assert_eq!(
            client_ip(&parts("10.0.0.2", Some("1.2.3.4, 198.51.100.7")), &trusted),
            ip("198.51.100.7")
        );
        assert_eq!(
            client_ip(&parts("10.0.0.2", Some("198.51.100.7, 10.0.0.9")), &trusted),
            ip("198.51.100.7")
        );
        assert_eq!(
            client_ip(&parts("10.0.0.2", None), &trusted),
            ip("10.0.0.2")
        );
    }
}

//! What a browser's own request (`/track`, `/i`, `/c`) says about its viewer: the user agent,
//! whether it is a prefetch, and the client address; what invalid traffic is told from.

use crate::domain::traffic::UserAgent;
use crate::ivt::Signals;
use axum::http::{HeaderMap, header};
use std::net::IpAddr;

pub(crate) struct Viewer {
    pub(crate) user_agent: Option<UserAgent>,
    pub(crate) prefetch: bool,
    pub(crate) address: Option<IpAddr>,
}

impl Viewer {
    pub(crate) fn of(headers: &HeaderMap, address: Option<IpAddr>) -> Self {
        let user_agent = headers
            .get(header::USER_AGENT)
            .and_then(|value| value.to_str().ok())
            .and_then(UserAgent::new);
        Self {
            user_agent,
            prefetch: is_prefetch(headers),
            address,
        }
    }

    pub(crate) fn signals(&self) -> Signals<'_> {
        Signals {
            user_agent: self.user_agent.as_ref(),
            prefetch: self.prefetch,
            address: self.address,
        }
    }
}

/// `Purpose: prefetch` (older browsers) or `Sec-Purpose: prefetch` (with or without
/// `;prerender`, Chrome's speculation rules): the page was loaded ahead, not seen.
fn is_prefetch(headers: &HeaderMap) -> bool {
    ["purpose", "sec-purpose", "x-purpose", "x-moz"]
        .iter()
        .any(|name| {
            headers.get_all(*name).iter().any(|value| {
                value
                    .to_str()
                    .is_ok_and(|text| text.trim().to_ascii_lowercase().starts_with("prefetch"))
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetch_headers_of_every_browser_are_recognised() {
        for (name, value, prefetch) in [
            ("purpose", "prefetch", true),
            ("sec-purpose", "prefetch;prerender", true),
            ("sec-purpose", "Prefetch", true),
            ("x-moz", "prefetch", true),
            ("sec-purpose", "prerender", false),
            ("accept", "prefetch", false),
        ] {
            let mut headers = HeaderMap::new();
            headers.insert(name, value.parse().expect("header"));
            assert_eq!(is_prefetch(&headers), prefetch, "{name}: {value}");
        }
    }
}

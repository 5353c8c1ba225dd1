//! General invalid traffic (docs/API.md, "Invalid traffic"): an event is classified once,
//! when it is written, from what its request says about the viewer, and stored with the
//! reason. Crawlers, bots and headless browsers are recognised by a maintained list of
//! user-agent patterns (the `isbot` crate); prefetches by their `Purpose`/`Sec-Purpose`
//! header; denied addresses by `--ivt-deny-cidrs` (data-centre ranges an operator names).

use crate::domain::traffic::{InvalidReason, UserAgent};
use ipnet::IpNet;
use lru::LruCache;
use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::sync::Mutex;

/// User agents whose verdict is remembered: the same few hundred browsers send most traffic,
/// and matching the list costs a large regular expression per event.
const REMEMBERED_AGENTS: usize = 10_000;

/// What a request says about the viewer of one event.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Signals<'a> {
    pub(crate) user_agent: Option<&'a UserAgent>,
    /// The request was a prefetch, not a view.
    pub(crate) prefetch: bool,
    /// The viewer's address (for a POSTed event, its `user_ip`).
    pub(crate) address: Option<IpAddr>,
}

pub(crate) struct Classifier {
    bots: isbot::Bots,
    deny: Vec<IpNet>,
    verdicts: Mutex<LruCache<String, bool>>,
}

impl Classifier {
    pub(crate) fn new(deny: Vec<IpNet>) -> Self {
        Self {
            bots: isbot::Bots::default(),
            deny,
            verdicts: Mutex::new(LruCache::new(
                NonZeroUsize::new(REMEMBERED_AGENTS).unwrap_or(NonZeroUsize::MIN),
            )),
        }
    }

    /// Why the event is invalid traffic, or `None` when it is valid. A bot user agent is
    /// named first, then a prefetch, then a denied address.
    pub(crate) fn classify(&self, signals: Signals<'_>) -> Option<InvalidReason> {
        if signals.user_agent.is_some_and(|agent| self.is_bot(agent)) {
            return Some(InvalidReason::BotUserAgent);
        }
        if signals.prefetch {
            return Some(InvalidReason::Prefetch);
        }
        // An IPv4 client of a dual-stack listener arrives as `::ffff:a.b.c.d`: it is judged
        // by the IPv4 ranges, like the rate limits' key judges it.
        if signals.address.is_some_and(|address| {
            let address = address.to_canonical();
            self.deny.iter().any(|net| net.contains(&address))
        }) {
            return Some(InvalidReason::DeniedAddress);
        }
        None
    }

    fn is_bot(&self, agent: &UserAgent) -> bool {
        let mut verdicts = self
            .verdicts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(verdict) = verdicts.get(agent.as_str()) {
            return *verdict;
        }
        let verdict = self.bots.is_bot(agent.as_str());
        verdicts.put(agent.as_str().to_owned(), verdict);
        verdict
    }
}

impl Default for Classifier {
    fn default() -> Self {
        Self::new(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(text: &str) -> UserAgent {
        UserAgent::new(text).expect("not empty")
    }

    #[test]
    fn crawlers_headless_browsers_prefetches_and_denied_addresses_are_invalid() {
        let classifier = Classifier::new(vec!["192.0.2.0/24".parse().expect("net")]);
        let chrome = agent(
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) \
             Chrome/120.0.0.0 Safari/537.36",
        );
        let googlebot =
            agent("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)");
        let headless = agent(
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) \
             HeadlessChrome/120.0.0.0 Safari/537.36",
        );
        let valid = |signals| classifier.classify(signals).is_none();
        assert!(valid(Signals {
            user_agent: Some(&chrome),
            address: "203.0.113.1".parse().ok(),
            ..Signals::default()
        }));
        assert!(valid(Signals::default()), "no user agent is valid");
        for bot in [&googlebot, &headless] {
            let signals = Signals {
                user_agent: Some(bot),
                ..Signals::default()
            };
            assert_eq!(
                classifier.classify(signals),
                Some(InvalidReason::BotUserAgent)
            );
            // Remembered: the same verdict again.
            assert_eq!(
                classifier.classify(signals),
                Some(InvalidReason::BotUserAgent)
            );
        }
        let prefetch = Signals {
            user_agent: Some(&chrome),
            prefetch: true,
            ..Signals::default()
        };
        assert_eq!(classifier.classify(prefetch), Some(InvalidReason::Prefetch));
        let denied = Signals {
            user_agent: Some(&chrome),
            address: "192.0.2.77".parse().ok(),
            ..Signals::default()
        };
        assert_eq!(
            classifier.classify(denied),
            Some(InvalidReason::DeniedAddress)
        );
    }

    #[test]
    fn an_ipv4_mapped_address_is_judged_by_the_ipv4_ranges() {
        let classifier = Classifier::new(vec!["192.0.2.77/32".parse().expect("net")]);
        let judged = |address: &str| {
            classifier.classify(Signals {
                address: address.parse().ok(),
                ..Signals::default()
            })
        };
        assert_eq!(
            judged("::ffff:192.0.2.77"),
            Some(InvalidReason::DeniedAddress)
        );
        assert_eq!(judged("::ffff:192.0.2.78"), None);
        assert_eq!(judged("192.0.2.78"), None, "the full address, not its /24");
    }
}

//! Whose configuration, day index entries and seals a row is: a campaign's or a site's. Both
//! kinds follow the same rules (bucket counts scheduled by `effective_from`, days indexed at
//! ingest, closed days sealed once), so the stores keep them under one key type.

use super::beacon::SiteId;
use super::ids::CampaignKey;
use std::fmt;

/// A campaign (impressions and clicks) or a site (beacons).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Owner {
    Campaign(CampaignKey),
    Site(SiteId),
}

/// Which kind of owner: what the day index is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OwnerKind {
    Campaign,
    Site,
}

impl Owner {
    pub fn kind(&self) -> OwnerKind {
        match self {
            Self::Campaign(_) => OwnerKind::Campaign,
            Self::Site(_) => OwnerKind::Site,
        }
    }
}

impl From<CampaignKey> for Owner {
    fn from(campaign: CampaignKey) -> Self {
        Self::Campaign(campaign)
    }
}

impl From<SiteId> for Owner {
    fn from(site: SiteId) -> Self {
        Self::Site(site)
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Campaign(campaign) => write!(
                f,
                "campaign {} of advertiser {}",
                campaign.campaign_id, campaign.advertiser_id
            ),
            Self::Site(site) => write!(f, "site {site}"),
        }
    }
}

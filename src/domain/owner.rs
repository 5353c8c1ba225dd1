//! Whose configuration, day index entries and seals a row is: a campaign's or a site's. Both
//! kinds follow the same rules (bucket counts scheduled by `effective_from`, days indexed at
//! ingest, closed days sealed once), so the stores keep them under one key type.

use super::beacon::SiteId;
use super::ids::{AdvertiserId, CampaignKey};
use super::time::Day;
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
    pub(crate) fn kind(&self) -> OwnerKind {
        match self {
            Self::Campaign(_) => OwnerKind::Campaign,
            Self::Site(_) => OwnerKind::Site,
        }
    }
}

impl Owner {
    /// The owner as one text value, for index tables that hold owners of both kinds:
    /// `c:<advertiser>:<campaign>` or `s:<site>`.
    pub(crate) fn to_key(&self) -> String {
        match self {
            Self::Campaign(campaign) => {
                format!("c:{}:{}", campaign.advertiser_id, campaign.campaign_id)
            }
            Self::Site(site) => format!("s:{site}"),
        }
    }

    /// The owner [`to_key`](Self::to_key) wrote; `None` for anything else.
    pub(crate) fn from_key(key: &str) -> Option<Self> {
        if let Some(ids) = key.strip_prefix("c:") {
            let (advertiser, campaign) = ids.split_once(':')?;
            return Some(Self::Campaign(CampaignKey {
                advertiser_id: advertiser.parse().ok()?,
                campaign_id: campaign.parse().ok()?,
            }));
        }
        SiteId::parse(key.strip_prefix("s:")?).ok().map(Self::Site)
    }
}

/// A list of owners a caller may ask for: an advertiser's campaigns, or every site.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Listing {
    Campaigns(AdvertiserId),
    Sites,
}

impl Listing {
    /// The list `owner` appears in.
    pub(crate) fn of(owner: &Owner) -> Self {
        match owner {
            Owner::Campaign(campaign) => Self::Campaigns(campaign.advertiser_id),
            Owner::Site(_) => Self::Sites,
        }
    }

    /// Its stored text key.
    pub(crate) fn to_key(self) -> String {
        match self {
            Self::Campaigns(advertiser) => format!("c:{advertiser}"),
            Self::Sites => "s".to_owned(),
        }
    }
}

/// An owner and the first and last UTC days it received events for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerDays {
    pub(crate) owner: Owner,
    pub(crate) first_day: Day,
    pub(crate) last_day: Day,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_survives_its_text_key_and_nothing_else_passes_for_one() {
        let campaign = Owner::Campaign(CampaignKey {
            advertiser_id: uuid::Uuid::from_u128(1).into(),
            campaign_id: uuid::Uuid::from_u128(2).into(),
        });
        let site = Owner::Site(SiteId::parse("shop.example").expect("valid"));
        for owner in [campaign, site] {
            assert_eq!(Owner::from_key(&owner.to_key()), Some(owner));
        }
        for bad in [
            "",
            "x:1",
            "c:1:2",
            "s:",
            "c:00000000-0000-0000-0000-000000000001",
        ] {
            assert_eq!(Owner::from_key(bad), None, "{bad}");
        }
    }
}

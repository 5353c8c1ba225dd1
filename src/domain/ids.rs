//! Typed identifiers: an `AdId` cannot be passed where a `CampaignId` is expected.

use std::fmt;
use uuid::Uuid;

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Uuid);

        impl $name {
            pub const fn new(id: Uuid) -> Self {
                Self(id)
            }

            pub const fn as_uuid(&self) -> Uuid {
                self.0
            }
        }

        impl From<Uuid> for $name {
            fn from(id: Uuid) -> Self {
                Self(id)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.hyphenated().fmt(f)
            }
        }

        impl std::str::FromStr for $name {
            type Err = uuid::Error;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(text).map(Self)
            }
        }
    };
}

uuid_id!(
    /// The advertiser owning campaigns.
    AdvertiserId
);
uuid_id!(
    /// A campaign of an advertiser.
    CampaignId
);
uuid_id!(
    /// One creative shown in a campaign.
    AdId
);
uuid_id!(
    /// An impression's identity, chosen by the ad server; a click carries it too.
    ImpressionId
);
uuid_id!(
    /// The user an ad was shown to.
    UserId
);

/// A campaign is addressed by its advertiser and its own id together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CampaignKey {
    pub advertiser_id: AdvertiserId,
    pub campaign_id: CampaignId,
}

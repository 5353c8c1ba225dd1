//! Typed identifiers: an `AdId` cannot be passed where a `CampaignId` is expected. Every id a
//! client sends is read by [`parse_uuid`]: the hyphenated and the 32-hex-digit forms only, and
//! never the nil UUID.

use std::fmt;
use uuid::Uuid;

/// Why a client's text is not an id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("is not a UUID: 32 hex digits, hyphenated 8-4-4-4-12 or not")]
    NotUuid,
    #[error("is the nil UUID (all zeros), which names nothing")]
    Nil,
}

/// A UUID as clients may write one: `962e0c3a-6c08-4160-9196-f0050faffe62` or
/// `962e0c3a6c0841609196f0050faffe62`, either case. The `uuid` crate alone also takes braces and
/// `urn:uuid:`, which would give one id several spellings in URLs and logs; the nil UUID is what
/// an unset field of many clients holds, not an id anyone chose.
pub(crate) fn parse_uuid(text: &str) -> Result<Uuid, IdError> {
    if !matches!(text.len(), 32 | 36) {
        return Err(IdError::NotUuid);
    }
    let id = Uuid::try_parse(text).map_err(|_| IdError::NotUuid)?;
    if id.is_nil() {
        return Err(IdError::Nil);
    }
    Ok(id)
}

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
            type Err = IdError;

            /// See [`parse_uuid`].
            fn from_str(text: &str) -> Result<Self, Self::Err> {
                parse_uuid(text).map(Self)
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

#[cfg(test)]
mod tests {
    use super::*;

    const HYPHENATED: &str = "962e0c3a-6c08-4160-9196-f0050faffe62";

    #[test]
    fn the_hyphenated_and_the_plain_forms_name_the_same_id() {
        let plain = HYPHENATED.replace('-', "");
        assert_eq!(parse_uuid(HYPHENATED), parse_uuid(&plain));
        assert_eq!(
            parse_uuid(&HYPHENATED.to_uppercase()),
            parse_uuid(HYPHENATED)
        );
        assert!(parse_uuid(HYPHENATED).is_ok());
    }

    #[test]
    fn braces_urns_partial_hyphens_and_the_nil_uuid_are_refused() {
        for text in [
            format!("{{{HYPHENATED}}}"),
            format!("urn:uuid:{HYPHENATED}"),
            HYPHENATED.replacen('-', "", 1),
            format!(" {HYPHENATED}"),
            String::new(),
            "g62e0c3a-6c08-4160-9196-f0050faffe62".to_owned(),
        ] {
            assert_eq!(parse_uuid(&text), Err(IdError::NotUuid), "{text:?}");
        }
        assert_eq!(
            parse_uuid("00000000-0000-0000-0000-000000000000"),
            Err(IdError::Nil)
        );
        assert_eq!(parse_uuid(&"0".repeat(32)), Err(IdError::Nil));
        assert_eq!(
            format!("urn:uuid:{HYPHENATED}").parse::<CampaignId>(),
            Err(IdError::NotUuid)
        );
    }
}

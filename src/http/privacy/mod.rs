//! Personal data (administrators): erasure requests and their progress, and subject access.

pub(super) mod erasures;
pub(super) mod subjects;

use crate::domain::beacon::Guid;
use crate::domain::ids::{AdvertiserId, UserId};
use crate::domain::privacy::Subject;
use crate::http::edge::error::ApiError;
use crate::http::edge::params::{id, site_id};

/// How a request names its subject: the fields it may carry, as given.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SubjectFields<'a> {
    pub(crate) user_id: Option<&'a str>,
    pub(crate) advertiser_id: Option<&'a str>,
    pub(crate) site: Option<&'a str>,
    pub(crate) guid: Option<&'a str>,
}

/// A subject and its scope as a request names them: a `user_id`, optionally with the one
/// advertiser whose data is meant, or a site's visitor (`site` and `guid`, checked as
/// `/track` checks them). A visitor's beacons belong to no advertiser, so they take no scope.
pub(crate) fn subject_of(
    fields: SubjectFields<'_>,
) -> Result<(Subject, Option<AdvertiserId>), ApiError> {
    if let Some(site) = fields.site {
        if fields.user_id.is_some() {
            return Err(ApiError::invalid(
                "user_id",
                "names a user; a visitor is named by site and guid alone",
            ));
        }
        if fields.advertiser_id.is_some() {
            return Err(ApiError::invalid(
                "advertiser_id",
                "applies to a user_id only: a visitor's beacons belong to no advertiser",
            ));
        }
        let site = site_id(site)?;
        let Some(guid) = fields.guid else {
            return Err(ApiError::invalid("guid", "is required with a site"));
        };
        let guid = Guid::parse(guid).map_err(|why| ApiError::invalid("guid", why))?;
        return Ok((Subject::Visitor { site, guid }, None));
    }
    if fields.guid.is_some() {
        return Err(ApiError::invalid("guid", "needs a site"));
    }
    let Some(user_id) = fields.user_id else {
        return Err(ApiError::invalid("user_id", "is required"));
    };
    let user: UserId = id("user_id", user_id)?;
    let scope = fields
        .advertiser_id
        .map(|text| id::<AdvertiserId>("advertiser_id", text))
        .transpose()?;
    Ok((Subject::User(user), scope))
}

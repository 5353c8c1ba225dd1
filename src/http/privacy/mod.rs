//! Personal data (administrators): erasure requests and their progress, and subject access.

pub(super) mod erasures;
pub(super) mod subjects;

use crate::domain::ids::{AdvertiserId, UserId};
use crate::domain::privacy::Subject;
use crate::http::edge::error::ApiError;
use crate::http::edge::params::id;

/// A subject and its scope as a request names them: a `user_id`, and optionally the one
/// advertiser whose data is meant. A visitor of a site (`site` and `guid`) is not yet found
/// by the index, so it is refused naming `site`.
pub(crate) fn subject_of(
    user_id: Option<&str>,
    advertiser_id: Option<&str>,
    site: Option<&str>,
) -> Result<(Subject, Option<AdvertiserId>), ApiError> {
    if site.is_some() {
        return Err(ApiError::invalid(
            "site",
            "a visitor's beacons (site and guid) cannot be found by subject yet; name a user_id",
        ));
    }
    let Some(user_id) = user_id else {
        return Err(ApiError::invalid("user_id", "is required"));
    };
    let user: UserId = id("user_id", user_id)?;
    let scope = advertiser_id
        .map(|text| id::<AdvertiserId>("advertiser_id", text))
        .transpose()?;
    Ok((Subject::User(user), scope))
}

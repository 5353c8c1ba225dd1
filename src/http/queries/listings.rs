//! What a dashboard picks from: an advertiser's campaigns, every site, and a site's most
//! visited feature values over a range.

use crate::domain::ids::AdvertiserId;
use crate::domain::owner::{Listing, Owner, OwnerDays};
use crate::domain::time::Day;
use crate::http::AppState;
use crate::http::edge::error::{ApiError, ErrorAnswer};
use crate::http::edge::openapi::texts::{Id, Site};
use crate::http::edge::params::{Params, RangeQuery, id, site_id};
use axum::Json;
use axum::extract::{Path, RawQuery, State};
use serde::Serialize;
use std::collections::BTreeMap;
use utoipa::ToSchema;

fn date(day: Day) -> String {
    day.date().format("%Y-%m-%d").to_string()
}

/// A campaign with events, and its first and last UTC days with events.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ListedCampaign {
    pub(crate) campaign_id: String,
    pub(crate) first_day: String,
    pub(crate) last_day: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CampaignsAnswer {
    pub(crate) campaigns: Vec<ListedCampaign>,
}

#[utoipa::path(
    get,
    path = "/v1/advertisers/{advertiser_id}/campaigns",
    tag = "queries",
    security(("bearer" = ["read"])),
    summary = "The advertiser's campaigns that received events, with their first and last days.",
    params(("advertiser_id" = inline(Id), Path)),
    responses(
        (status = 200, description = "OK", body = CampaignsAnswer),
        (status = 400, description = "Invalid input: the error names the field or parameter", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable; retry after `Retry-After` seconds", body = ErrorAnswer),
    )
)]
pub(crate) async fn list_campaigns(
    State(state): State<AppState>,
    Path(advertiser_id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<CampaignsAnswer>, ApiError> {
    let advertiser: AdvertiserId = id("advertiser_id", &advertiser_id)?;
    Params::parse(query.as_deref(), &[])?;
    let owners = state
        .queries
        .listing(Listing::Campaigns(advertiser))
        .await?;
    let campaigns = owners
        .into_iter()
        .filter_map(|listed| match listed.owner {
            Owner::Campaign(campaign) => Some(ListedCampaign {
                campaign_id: campaign.campaign_id.to_string(),
                first_day: date(listed.first_day),
                last_day: date(listed.last_day),
            }),
            Owner::Site(_) => None,
        })
        .collect();
    Ok(Json(CampaignsAnswer { campaigns }))
}

/// A site with beacons, and its first and last UTC days with beacons.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ListedSite {
    pub(crate) site: String,
    pub(crate) first_day: String,
    pub(crate) last_day: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SitesAnswer {
    pub(crate) sites: Vec<ListedSite>,
}

#[utoipa::path(
    get,
    path = "/v1/sites",
    tag = "queries",
    security(("bearer" = ["admin"])),
    summary = "Every site that received beacons, with its first and last days.",
    responses(
        (status = 200, description = "OK", body = SitesAnswer),
        (status = 400, description = "A query parameter was given", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable; retry after `Retry-After` seconds", body = ErrorAnswer),
    )
)]
pub(crate) async fn list_sites(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
) -> Result<Json<SitesAnswer>, ApiError> {
    Params::parse(query.as_deref(), &[])?;
    let owners: Vec<OwnerDays> = state.queries.listing(Listing::Sites).await?;
    let sites = owners
        .into_iter()
        .filter_map(|listed| match listed.owner {
            Owner::Site(site) => Some(ListedSite {
                site: site.as_str().to_owned(),
                first_day: date(listed.first_day),
                last_day: date(listed.last_day),
            }),
            Owner::Campaign(_) => None,
        })
        .collect();
    Ok(Json(SitesAnswer { sites }))
}

/// One value of a feature and its valid visits in the range.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ValueVisits {
    pub(crate) value: String,
    pub(crate) visits: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct FeaturesAnswer {
    /// By feature name: its 50 most visited values, most visits first, then by value.
    pub(crate) features: BTreeMap<String, Vec<ValueVisits>>,
}

#[utoipa::path(
    get,
    path = "/v1/sites/{site}/features",
    tag = "queries",
    security(("bearer" = ["read"])),
    summary = "The 50 most visited values of each of the site's features over a range.",
    params(
        ("site" = inline(Site), Path),
        RangeQuery,
    ),
    responses(
        (status = 200, description = "OK", body = FeaturesAnswer),
        (status = 400, description = "Invalid input: the error names the field or parameter", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable; retry after `Retry-After` seconds", body = ErrorAnswer),
    )
)]
pub(crate) async fn get_features(
    State(state): State<AppState>,
    Path(site): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<FeaturesAnswer>, ApiError> {
    let site = site_id(&site)?;
    let params = Params::parse(query.as_deref(), &["from", "to", "tz"])?;
    let range = params.range()?;
    let features = state.queries.features(&site, &range).await?;
    Ok(Json(FeaturesAnswer {
        features: features
            .into_iter()
            .map(|(feature, values)| {
                let values = values
                    .into_iter()
                    .map(|(value, visits)| ValueVisits { value, visits })
                    .collect();
                (feature, values)
            })
            .collect(),
    }))
}

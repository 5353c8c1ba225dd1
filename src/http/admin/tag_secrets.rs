//! `POST`, `GET /v1/advertisers/{advertiser_id}/tag-secrets` and `DELETE …/tag-secrets/{id}`
//! (administrators): the secrets an advertiser's ad server signs its pixel and click URLs with.
//! A secret is shown once, at creation; rotation is create, switch the ad server, delete.

use crate::domain::ids::{AdvertiserId, parse_uuid};
use crate::domain::tag::{TagSecret, TagSecretId};
use crate::http::AppState;
use crate::http::edge::error::{ApiError, ErrorAnswer};
use crate::http::edge::openapi::texts::Id;
use crate::http::edge::params::id;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{SecondsFormat, Utc};
use serde::Serialize;
use utoipa::ToSchema;

/// A tag secret just created: `secret` is shown this once.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct NewTagSecret {
    /// The `k` parameter of URLs signed with it.
    #[schema(value_type = uuid::Uuid)]
    pub(crate) id: String,
    /// 32 random bytes, base64url without padding: the HMAC-SHA256 key.
    pub(crate) secret: String,
    #[schema(value_type = uuid::Uuid)]
    pub(crate) advertiser_id: String,
    /// RFC 3339, UTC.
    pub(crate) created_at: String,
}

/// A tag secret as listed: never the secret.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TagSecretAnswer {
    #[schema(value_type = uuid::Uuid)]
    pub(crate) id: String,
    /// RFC 3339, UTC.
    pub(crate) created_at: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TagSecretList {
    pub(crate) tag_secrets: Vec<TagSecretAnswer>,
}

fn created_at(secret: &TagSecret) -> String {
    secret
        .created_at
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn advertiser(text: &str) -> Result<AdvertiserId, ApiError> {
    id("advertiser_id", text)
}

#[utoipa::path(
    post,
    path = "/v1/advertisers/{advertiser_id}/tag-secrets",
    tag = "ad tags",
    summary = "Create a tag secret for the advertiser's signed pixel and click URLs.",
    params(("advertiser_id" = inline(Id), Path)),
    security(("bearer" = ["admin"])),
    responses(
        (status = 201, description = "Created; `secret` is shown this once", body = NewTagSecret,
            links(("delete" = (
                operation_id = "delete_tag_secret",
                parameters(
                    ("advertiser_id" = "$request.path.advertiser_id"),
                    ("id" = "$response.body#/id")
                )
            )))
        ),
        (status = 400, description = "The advertiser id is not a UUID", body = ErrorAnswer),
        (status = 401, description = "No valid key", body = ErrorAnswer),
        (status = 403, description = "Not an admin key", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable", body = ErrorAnswer),
    )
)]
pub(crate) async fn create_tag_secret(
    State(state): State<AppState>,
    Path(advertiser_id): Path<String>,
) -> Result<Response, ApiError> {
    let advertiser = advertiser(&advertiser_id)?;
    let secret = state
        .access
        .create_tag_secret(advertiser, Utc::now())
        .await?;
    tracing::info!(tag_secret = %secret.id, advertiser = %advertiser, "tag secret created");
    let answer = NewTagSecret {
        id: secret.id.to_string(),
        secret: secret.encoded(),
        advertiser_id: advertiser.to_string(),
        created_at: created_at(&secret),
    };
    Ok((StatusCode::CREATED, Json(answer)).into_response())
}

#[utoipa::path(
    get,
    path = "/v1/advertisers/{advertiser_id}/tag-secrets",
    tag = "ad tags",
    summary = "The advertiser's tag secrets: ids and creation times, never the secrets.",
    params(("advertiser_id" = inline(Id), Path)),
    security(("bearer" = ["admin"])),
    responses(
        (status = 200, description = "OK, oldest first", body = TagSecretList),
        (status = 400, description = "The advertiser id is not a UUID", body = ErrorAnswer),
        (status = 401, description = "No valid key", body = ErrorAnswer),
        (status = 403, description = "Not an admin key", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable", body = ErrorAnswer),
    )
)]
pub(crate) async fn list_tag_secrets(
    State(state): State<AppState>,
    Path(advertiser_id): Path<String>,
) -> Result<Json<TagSecretList>, ApiError> {
    let advertiser = advertiser(&advertiser_id)?;
    let secrets = state.access.stored_tag_secrets(advertiser).await?;
    Ok(Json(TagSecretList {
        tag_secrets: secrets
            .iter()
            .map(|secret| TagSecretAnswer {
                id: secret.id.to_string(),
                created_at: created_at(secret),
            })
            .collect(),
    }))
}

#[utoipa::path(
    delete,
    path = "/v1/advertisers/{advertiser_id}/tag-secrets/{id}",
    tag = "ad tags",
    summary = "Delete a tag secret: URLs it signed stop counting on every server process within the settings cache lifetime.",
    params(("advertiser_id" = inline(Id), Path), ("id" = inline(Id), Path)),
    security(("bearer" = ["admin"])),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "An id is not a UUID", body = ErrorAnswer),
        (status = 401, description = "No valid key", body = ErrorAnswer),
        (status = 403, description = "Not an admin key", body = ErrorAnswer),
        (status = 404, description = "The advertiser has no such tag secret", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable", body = ErrorAnswer),
    )
)]
pub(crate) async fn delete_tag_secret(
    State(state): State<AppState>,
    Path((advertiser_id, id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let advertiser = advertiser(&advertiser_id)?;
    let id = parse_uuid(&id)
        .map(TagSecretId::new)
        .map_err(|error| ApiError::invalid("id", error))?;
    if !state.access.delete_tag_secret(advertiser, id).await? {
        return Err(ApiError::NotFound(format!(
            "/v1/advertisers/{advertiser}/tag-secrets/{id}"
        )));
    }
    tracing::info!(tag_secret = %id, advertiser = %advertiser, "tag secret deleted");
    Ok(StatusCode::NO_CONTENT)
}

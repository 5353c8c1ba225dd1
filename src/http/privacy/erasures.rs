//! `POST /v1/privacy/erasures` and `GET /v1/privacy/erasures/{id}` (administrators): a
//! subject's erasure, recorded before the 202, and how far it got.

use super::{SubjectFields, subject_of};
use crate::domain::privacy::{ErasureId, ErasureRecord};
use crate::http::AppState;
use crate::http::edge::body::small_body;
use crate::http::edge::error::{ApiError, ErrorAnswer};
use crate::http::edge::openapi::texts::Id;
use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::SecondsFormat;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Whose data to erase.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ErasureRequest {
    /// The ad servers' `user_id`: that user's impressions, their clicks and view reports.
    /// Either this or `site` and `guid`.
    #[schema(value_type = uuid::Uuid, required = false)]
    user_id: Option<String>,
    /// Only this advertiser's data (left out: every advertiser's); with `user_id` only.
    #[schema(value_type = uuid::Uuid, required = false)]
    advertiser_id: Option<String>,
    /// A site's visitor, with `guid`: that visitor's beacons on the site.
    #[schema(value_type = String, required = false, min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9._:-]+$")]
    site: Option<String>,
    /// The visitor's id as its page script sends it (1–128 characters, no control character).
    #[schema(value_type = String, required = false, min_length = 1, max_length = 128)]
    guid: Option<String>,
}

/// Events an erasure removed, each identity once.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ErasedAnswer {
    pub(crate) impressions: u64,
    pub(crate) clicks: u64,
    pub(crate) view_reports: u64,
    pub(crate) conversions: u64,
    pub(crate) visits: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ErasureAnswer {
    #[schema(value_type = uuid::Uuid)]
    pub(crate) id: String,
    /// `pending` until done, then `done`.
    pub(crate) status: &'static str,
    /// RFC 3339, UTC.
    pub(crate) requested_at: String,
    pub(crate) completed_at: Option<String>,
    /// The one advertiser whose data is erased, or `null` for every advertiser's.
    #[schema(value_type = Option<uuid::Uuid>)]
    pub(crate) advertiser_id: Option<String>,
    /// Once done: what was erased.
    pub(crate) erased: Option<ErasedAnswer>,
}

impl From<&ErasureRecord> for ErasureAnswer {
    fn from(record: &ErasureRecord) -> Self {
        let time =
            |at: chrono::DateTime<chrono::Utc>| at.to_rfc3339_opts(SecondsFormat::Millis, true);
        Self {
            id: record.id.to_string(),
            status: record.status.name(),
            requested_at: time(record.requested_at),
            completed_at: record.completed_at.map(time),
            advertiser_id: record.scope.map(|id| id.to_string()),
            erased: record
                .erased
                .filter(|_| record.completed_at.is_some())
                .map(|counts| ErasedAnswer {
                    impressions: counts.impressions,
                    clicks: counts.clicks,
                    view_reports: counts.view_reports,
                    conversions: counts.conversions,
                    visits: counts.visits,
                }),
        }
    }
}

#[utoipa::path(
    post,
    path = "/v1/privacy/erasures",
    tag = "privacy",
    summary = "Erase a user's stored events (of every advertiser, or of one), or a site visitor's beacons.",
    description = "Body: `{\"user_id\"}` (with `advertiser_id` for one advertiser's data) or \
        `{\"site\", \"guid\"}` (a visitor's beacons). Recorded before the answer; done within \
        minutes, on any server process. Once done, no export, report, recent list, subject \
        access or count of a day not yet sealed includes the subject's events stored before the \
        request (unique-visitor and unique-user sketches of unsealed days are corrected at the \
        day's seal); the subject's events timed before the request that arrive later are \
        dropped. Sealed days keep their counts. Beacons sent under Global Privacy Control keep \
        no visitor and cannot be found.",
    request_body(content = ErasureRequest, content_type = "application/json"),
    security(("bearer" = ["admin"])),
    responses(
        (status = 202, description = "Recorded; poll its `id`", body = ErasureAnswer),
        (status = 400, description = "A field is invalid", body = ErrorAnswer),
        (status = 401, description = "No valid key", body = ErrorAnswer),
        (status = 403, description = "Not an admin key", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable; nothing was recorded", body = ErrorAnswer),
    )
)]
pub(crate) async fn post_erasure(
    State(state): State<AppState>,
    body: Body,
) -> Result<Response, ApiError> {
    let body = small_body(body).await?;
    let request = erasure_request(&body)?;
    let (subject, scope) = subject_of(SubjectFields {
        user_id: request.user_id.as_deref(),
        advertiser_id: request.advertiser_id.as_deref(),
        site: request.site.as_deref(),
        guid: request.guid.as_deref(),
    })?;
    let record = state.erasures.request(subject, scope).await?;
    tracing::info!(erasure = %record.id, "erasure requested");
    Ok((StatusCode::ACCEPTED, Json(ErasureAnswer::from(&record))).into_response())
}

/// The fields an erasure request may carry.
const FIELDS: [&str; 4] = ["user_id", "advertiser_id", "site", "guid"];

/// The request in `body`: a JSON object of [`FIELDS`], each a string. A `null` is refused
/// rather than taken as left out: a template that fills `advertiser_id` with nothing must not
/// turn one advertiser's erasure into every advertiser's.
fn erasure_request(body: &[u8]) -> Result<ErasureRequest, ApiError> {
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|error| ApiError::invalid("body", format!("is not JSON: {error}")))?;
    let Some(object) = value.as_object() else {
        return Err(ApiError::invalid(
            "body",
            "is not a JSON object of an erasure",
        ));
    };
    for (name, field) in object {
        let Some(known) = FIELDS.iter().find(|known| **known == name.as_str()) else {
            let shown: String = name.chars().take(64).collect();
            return Err(ApiError::invalid(&shown, "is not a field of an erasure"));
        };
        if !field.is_string() {
            return Err(ApiError::invalid(
                known,
                "must be a string (leave the field out rather than sending null)",
            ));
        }
    }
    // From the bytes again, not the parsed value: a value keeps the last of a repeated key,
    // and `{"advertiser_id": A, "advertiser_id": B}` must be refused, not read as B.
    serde_json::from_slice(body).map_err(|error| {
        ApiError::invalid(
            "body",
            format!("is not a JSON object of an erasure: {error}"),
        )
    })
}

#[utoipa::path(
    get,
    path = "/v1/privacy/erasures/{id}",
    tag = "privacy",
    summary = "An erasure's progress, and once done what it erased.",
    params(("id" = inline(Id), Path)),
    security(("bearer" = ["admin"])),
    responses(
        (status = 200, description = "OK", body = ErasureAnswer),
        (status = 400, description = "The id is not a UUID", body = ErrorAnswer),
        (status = 404, description = "No such erasure", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable", body = ErrorAnswer),
    )
)]
pub(crate) async fn get_erasure(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<ErasureAnswer>, ApiError> {
    let uuid = uuid::Uuid::try_parse(&id).map_err(|_| ApiError::invalid("id", "is not a UUID"))?;
    let record = state
        .erasures
        .status(ErasureId::new(uuid))
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("/v1/privacy/erasures/{uuid}")))?;
    Ok(Json(ErasureAnswer::from(&record)))
}

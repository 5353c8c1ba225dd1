//! `POST /v1/keys`, `GET /v1/keys`, `DELETE /v1/keys/{id}` (administrators) and
//! `GET /v1/keys/self` (any key): API keys, whose secret is shown once, at creation.

use crate::access::Caller;
use crate::domain::access::{ApiKey, Grant, KeyId, MAX_KEY_NAME_CHARS};
use crate::domain::echo::echo;
use crate::domain::ids::{AdvertiserId, parse_uuid};
use crate::http::AppState;
use crate::http::edge::body::small_body;
use crate::http::edge::error::{ApiError, ErrorAnswer};
use crate::http::edge::openapi::texts::{Id, Site};
use crate::http::edge::params::{id, site_id};
use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A key to create.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewKey {
    /// `admin`, `ingest`, `read` or `metrics`.
    scope: String,
    /// The owner of an `ingest` or `read` key of campaigns.
    #[schema(value_type = Option<uuid::Uuid>)]
    advertiser_id: Option<String>,
    /// The owner of a `read` key of a site.
    site: Option<String>,
    /// A label for people ("ad server eu-1"), at most 128 characters.
    name: Option<String>,
}

impl NewKey {
    fn grant(&self) -> Result<Grant, ApiError> {
        let advertiser = self
            .advertiser_id
            .as_deref()
            .map(|text| id::<AdvertiserId>("advertiser_id", text))
            .transpose()?;
        let site = self.site.as_deref().map(site_id).transpose()?;
        match (self.scope.as_str(), advertiser, site) {
            ("admin", None, None) => Ok(Grant::Admin),
            ("metrics", None, None) => Ok(Grant::Metrics),
            ("ingest", Some(advertiser), None) => Ok(Grant::Ingest(advertiser)),
            ("read", Some(advertiser), None) => Ok(Grant::ReadAdvertiser(advertiser)),
            ("read", None, Some(site)) => Ok(Grant::ReadSite(site)),
            ("admin" | "metrics", _, _) => Err(ApiError::invalid(
                "scope",
                format!(
                    "{} keys have no owner: give neither advertiser_id nor site",
                    self.scope
                ),
            )),
            ("ingest", _, _) => Err(ApiError::invalid(
                "advertiser_id",
                "is required for an ingest key (and site is not allowed)",
            )),
            ("read", _, _) => Err(ApiError::invalid(
                "advertiser_id",
                "or site (exactly one) is required for a read key",
            )),
            (other, _, _) => Err(ApiError::invalid(
                "scope",
                format!("{} is not one of admin, ingest, read, metrics", echo(other)),
            )),
        }
    }
}

/// The bodies `NewKey::grant` accepts, one shape per kind of key, for the document: a schema
/// of `NewKey` alone would allow owners on admin keys and read keys without one.
pub(crate) struct NewKeyShapes;

impl utoipa::PartialSchema for NewKeyShapes {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Type};
        let shape = |scopes: &[&str], owner: Option<(&str, utoipa::openapi::RefOr<_>)>| {
            let name = ObjectBuilder::new()
                .schema_type(utoipa::openapi::schema::SchemaType::from_iter([
                    Type::String,
                    Type::Null,
                ]))
                .max_length(Some(MAX_KEY_NAME_CHARS))
                .description(Some("A label for people, at most 128 characters"));
            let mut object = ObjectBuilder::new()
                .schema_type(Type::Object)
                .property(
                    "scope",
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .enum_values(Some(scopes.iter().copied())),
                )
                .required("scope")
                .property("name", name)
                .additional_properties(Some(
                    utoipa::openapi::schema::AdditionalProperties::FreeForm(false),
                ));
            if let Some((field, schema)) = owner {
                object = object.property(field, schema).required(field);
            }
            object
        };
        OneOfBuilder::new()
            .item(shape(&["admin", "metrics"], None))
            .item(shape(
                &["ingest", "read"],
                Some(("advertiser_id", <Id as utoipa::PartialSchema>::schema())),
            ))
            .item(shape(
                &["read"],
                Some(("site", <Site as utoipa::PartialSchema>::schema())),
            ))
            .into()
    }
}

impl utoipa::ToSchema for NewKeyShapes {}

/// A key as listed: never its secret.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct KeyAnswer {
    #[schema(value_type = uuid::Uuid)]
    pub(crate) id: String,
    /// `admin`, `ingest`, `read` or `metrics`.
    pub(crate) scope: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<uuid::Uuid>)]
    pub(crate) advertiser_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) site: Option<String>,
    pub(crate) name: Option<String>,
    /// RFC 3339, UTC.
    pub(crate) created_at: String,
}

impl From<&ApiKey> for KeyAnswer {
    fn from(key: &ApiKey) -> Self {
        Self {
            id: key.id.to_string(),
            scope: key.grant.scope(),
            advertiser_id: key.grant.advertiser().map(|id| id.to_string()),
            site: key.grant.site().map(|site| site.as_str().to_owned()),
            name: key.name.clone(),
            created_at: key.created_at.to_rfc3339_opts(SecondsFormat::Millis, true),
        }
    }
}

/// A key just created: its secret, shown this once.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct NewKeyAnswer {
    #[schema(value_type = uuid::Uuid)]
    pub(crate) id: String,
    /// The secret, shown this once: send it as `Authorization: Bearer <key>`.
    pub(crate) key: String,
    pub(crate) scope: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<uuid::Uuid>)]
    pub(crate) advertiser_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) site: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) created_at: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct KeyList {
    pub(crate) keys: Vec<KeyAnswer>,
}

#[utoipa::path(
    post,
    path = "/v1/keys",
    tag = "keys",
    summary = "Create a key: admin, ingest (an advertiser's events), read (an advertiser's campaigns or a site) or metrics.",
    request_body(content = inline(NewKeyShapes), content_type = "application/json"),
    security(("bearer" = ["admin"])),
    responses(
        (status = 201, description = "Created; `key` is shown this once", body = NewKeyAnswer,
            links(("delete" = (
                operation_id = "delete_key",
                parameters(("id" = "$response.body#/id"))
            )))
        ),
        (status = 400, description = "A field is invalid", body = ErrorAnswer),
        (status = 401, description = "No valid key", body = ErrorAnswer),
        (status = 403, description = "Not an admin key", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable", body = ErrorAnswer),
    )
)]
pub(crate) async fn create_key(
    State(state): State<AppState>,
    body: Body,
) -> Result<Response, ApiError> {
    let body = small_body(body).await?;
    let new: NewKey = serde_json::from_slice(&body).map_err(|error| {
        ApiError::invalid("body", format!("is not a JSON object of a key: {error}"))
    })?;
    let grant = new.grant()?;
    if new
        .name
        .as_ref()
        .is_some_and(|name| name.chars().count() > MAX_KEY_NAME_CHARS)
    {
        return Err(ApiError::invalid(
            "name",
            format!("has more than {MAX_KEY_NAME_CHARS} characters"),
        ));
    }
    let (key, issued) = state.access.create_key(grant, new.name, Utc::now()).await?;
    tracing::info!(key = %key.id, scope = key.grant.scope(), "key created");
    let listed = KeyAnswer::from(&key);
    let answer = NewKeyAnswer {
        id: listed.id,
        key: issued.token,
        scope: listed.scope,
        advertiser_id: listed.advertiser_id,
        site: listed.site,
        name: listed.name,
        created_at: listed.created_at,
    };
    Ok((StatusCode::CREATED, Json(answer)).into_response())
}

#[utoipa::path(
    get,
    path = "/v1/keys",
    tag = "keys",
    summary = "Every key, without secrets.",
    security(("bearer" = ["admin"])),
    responses(
        (status = 200, description = "OK", body = KeyList),
        (status = 401, description = "No valid key", body = ErrorAnswer),
        (status = 403, description = "Not an admin key", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable", body = ErrorAnswer),
    )
)]
pub(crate) async fn list_keys(State(state): State<AppState>) -> Result<Json<KeyList>, ApiError> {
    let keys = state.access.keys().await?;
    Ok(Json(KeyList {
        keys: keys.iter().map(KeyAnswer::from).collect(),
    }))
}

#[utoipa::path(
    delete,
    path = "/v1/keys/{id}",
    tag = "keys",
    summary = "Revoke a key: it stops working on every server process within the settings cache lifetime.",
    params(("id" = inline(Id), Path)),
    security(("bearer" = ["admin"])),
    responses(
        (status = 204, description = "Revoked"),
        (status = 400, description = "The id is not a UUID", body = ErrorAnswer),
        (status = 401, description = "No valid key", body = ErrorAnswer),
        (status = 403, description = "Not an admin key", body = ErrorAnswer),
        (status = 404, description = "No such key", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable", body = ErrorAnswer),
    )
)]
pub(crate) async fn delete_key(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = parse_uuid(&id)
        .map(KeyId::new)
        .map_err(|error| ApiError::invalid("id", error))?;
    if !state.access.revoke(id).await? {
        return Err(ApiError::NotFound(format!("/v1/keys/{id}")));
    }
    tracing::info!(key = %id, "key revoked");
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
    get,
    path = "/v1/keys/self",
    tag = "keys",
    summary = "The presenting key's own fields, without its secret: what a dashboard may read.",
    security(("bearer" = ["admin", "ingest", "read", "metrics"])),
    responses(
        (status = 200, description = "OK", body = KeyAnswer),
        (status = 401, description = "No valid key", body = ErrorAnswer),
    )
)]
pub(crate) async fn key_self(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
) -> Result<Json<KeyAnswer>, ApiError> {
    let answer = match caller.key.and_then(|id| state.access.key(id)) {
        Some(key) => KeyAnswer::from(&key),
        // The operator's environment key (or keys off): an admin with no stored record.
        None => KeyAnswer {
            id: uuid::Uuid::nil().to_string(),
            scope: caller.grant.scope(),
            advertiser_id: None,
            site: None,
            name: Some("ADEVENTS_ADMIN_KEY".into()),
            created_at: Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true),
        },
    };
    Ok(Json(answer))
}

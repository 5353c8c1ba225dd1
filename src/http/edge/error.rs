//! The one place errors become HTTP answers, all in the contract's JSON shape:
//! `{"error": {"code", "message", "errors"?}}`.
//!
//! Details of server-side failures are not sent to clients: they travel in a response
//! extension to [`log_server_errors`], which logs them once inside the request's span.

use crate::domain::echo::{cut, cut_quoted, echo};
use crate::settings::ChangeError;
use crate::store::StoreError;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// Seconds a client should wait before retrying after a 503.
const RETRY_AFTER_SECONDS: u64 = 5;
/// Per-item problems listed in one answer; the message gives the full count.
const MAX_LISTED_ERRORS: usize = 1000;
/// The longest message an answer carries (values in it are quoted at most 64 characters).
const MAX_MESSAGE_CHARS: usize = 512;
/// The longest field or parameter name an answer repeats: a client's name (an unknown
/// parameter, a `user_data` key) at most 64 characters after the server's prefix.
const MAX_FIELD_CHARS: usize = 80;

/// One problem with one item of a request (or with one parameter, without an index).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub(crate) struct FieldError {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) index: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) field: Option<String>,
    pub(crate) message: String,
}

impl FieldError {
    pub(crate) fn item(index: usize, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            index: Some(index),
            field: Some(field.into()),
            message: message.into(),
        }
    }

    pub(crate) fn whole_item(index: usize, message: impl Into<String>) -> Self {
        Self {
            index: Some(index),
            field: None,
            message: message.into(),
        }
    }
}

/// Everything a handler can fail with.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    /// 400: the request is malformed or fails validation; nothing was stored.
    #[error("{message}")]
    InvalidRequest {
        message: String,
        errors: Vec<FieldError>,
    },
    /// 413: the body or the number of events is over the limit.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// 415: a content type or encoding the endpoint does not read.
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("no such resource: {0}")]
    NotFound(String),
    /// 401: no key, an unknown or revoked one, or not the Bearer scheme.
    #[error("a valid key is required")]
    Unauthorized,
    /// 403: a valid key without the scope or the owner the request needs.
    #[error("{0}")]
    Forbidden(String),
    /// 403 for some items of a request (an ingestion batch with another advertiser's events);
    /// nothing was stored.
    #[error("{message}")]
    ForbiddenItems {
        message: String,
        errors: Vec<FieldError>,
    },
    /// 503: this process has not read the keys yet, so it cannot judge one.
    #[error("keys are not loaded yet")]
    AccessNotLoaded,
    /// 429: past a rate limit; nothing was stored.
    #[error("rate limited; retry in {retry_after} s")]
    RateLimited { retry_after: u64 },
    /// 503: as many requests of this kind are in flight as the server takes at once.
    #[error("overloaded")]
    Overloaded,
    /// 408: the body did not arrive within the body timeout; nothing was stored.
    #[error("the request body did not arrive in time")]
    RequestTimeout,
    /// 503 from `/readyz` while a start-up repair runs: expected, so not logged as a failure.
    #[error("repairing the counts of a server process that stopped without saving them")]
    Repairing,
    /// The store cannot serve requests; for `/readyz` every store error means "not ready".
    #[error("not ready: {0}")]
    NotReady(StoreError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ApiError {
    /// A 400 about one query parameter or body field.
    pub(crate) fn invalid(field: &str, message: impl std::fmt::Display) -> Self {
        Self::InvalidRequest {
            message: format!("{} {message}", cut(field, MAX_FIELD_CHARS)),
            errors: vec![FieldError {
                index: None,
                field: Some(field.to_owned()),
                message: message.to_string(),
            }],
        }
    }

    /// A 400 for every (field, problem) of one request body, e.g. `what` = "the beacon".
    pub(crate) fn invalid_fields(what: &str, problems: Vec<(String, String)>) -> Self {
        let message = problems
            .iter()
            .map(|(field, problem)| format!("{} {problem}", cut(field, MAX_FIELD_CHARS)))
            .collect::<Vec<_>>()
            .join("; ");
        Self::InvalidRequest {
            message: format!("{what} is invalid: {message}"),
            errors: problems
                .into_iter()
                .map(|(field, message)| FieldError {
                    index: None,
                    field: Some(field),
                    message,
                })
                .collect(),
        }
    }
}

/// Every error answer: `{"error": {"code", "message", "errors"?}}`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ErrorAnswer {
    pub(crate) error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ErrorDetail {
    /// `invalid_request`, `unauthorized`, `forbidden`, `not_found`, `method_not_allowed`,
    /// `request_timeout`, `payload_too_large`, `unsupported_media_type`,
    /// `headers_too_large`, `rate_limited`, `internal`, `storage_unavailable`, `overloaded`.
    #[schema(example = "invalid_request")]
    pub(crate) code: &'static str,
    /// A human sentence.
    pub(crate) message: String,
    /// Per-item (or per-parameter) problems, when there are any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) errors: Option<Vec<FieldError>>,
}

impl From<ChangeError> for ApiError {
    fn from(error: ChangeError) -> Self {
        match error {
            ChangeError::Store(error) => Self::Store(error),
            refused => Self::invalid("effective_from", refused),
        }
    }
}

impl From<crate::query::QueryError> for ApiError {
    fn from(error: crate::query::QueryError) -> Self {
        match error {
            crate::query::QueryError::Store(error) => Self::Store(error),
            too_wide @ crate::query::QueryError::TooWide { .. } => {
                let message = too_wide.to_string();
                Self::InvalidRequest {
                    message: format!("from and to: {message}"),
                    errors: ["from", "to"]
                        .into_iter()
                        .map(|field| FieldError {
                            index: None,
                            field: Some(field.to_owned()),
                            message: message.clone(),
                        })
                        .collect(),
                }
            }
        }
    }
}

impl From<crate::readiness::NotReady> for ApiError {
    fn from(error: crate::readiness::NotReady) -> Self {
        match error {
            crate::readiness::NotReady::Repairing => Self::Repairing,
            crate::readiness::NotReady::Store(error) => Self::NotReady(error),
        }
    }
}

impl From<crate::beacons::TrackError> for ApiError {
    fn from(error: crate::beacons::TrackError) -> Self {
        match error {
            crate::beacons::TrackError::Store(error) => Self::Store(error),
            crate::beacons::TrackError::SketchesFull => Self::Overloaded,
        }
    }
}

/// The cause of a 5xx answer, kept for the log and never sent.
#[derive(Debug, Clone)]
struct ServerErrorDetail(String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut listed = None;
        let (status, code, message) = match &self {
            Self::InvalidRequest { message, errors } => {
                listed = Some(&errors[..errors.len().min(MAX_LISTED_ERRORS)]);
                (StatusCode::BAD_REQUEST, "invalid_request", message.clone())
            }
            Self::PayloadTooLarge(message) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                message.clone(),
            ),
            Self::UnsupportedMediaType(message) => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                message.clone(),
            ),
            Self::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "a valid key is required: send Authorization: Bearer <key>".to_owned(),
            ),
            Self::Forbidden(message) => (StatusCode::FORBIDDEN, "forbidden", message.clone()),
            Self::ForbiddenItems { message, errors } => {
                listed = Some(&errors[..errors.len().min(MAX_LISTED_ERRORS)]);
                (StatusCode::FORBIDDEN, "forbidden", message.clone())
            }
            Self::AccessNotLoaded => (
                StatusCode::SERVICE_UNAVAILABLE,
                "storage_unavailable",
                "keys are not loaded yet; retry later".to_owned(),
            ),
            Self::RateLimited { retry_after } => (
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!("too many requests; retry in {retry_after} s; nothing was stored"),
            ),
            Self::Overloaded => (
                StatusCode::SERVICE_UNAVAILABLE,
                "overloaded",
                "the server is at its limit of requests in flight; retry later".to_owned(),
            ),
            Self::RequestTimeout => (
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                "the request body did not arrive in time; nothing was stored".to_owned(),
            ),
            Self::NotFound(path) => (
                StatusCode::NOT_FOUND,
                "not_found",
                format!("there is nothing at {}", echo(path)),
            ),
            Self::Repairing => (
                StatusCode::SERVICE_UNAVAILABLE,
                "storage_unavailable",
                "not ready: repairing the counts of a server process that stopped without saving them; retry later"
                    .to_owned(),
            ),
            Self::NotReady(StoreError::SchemaNotCurrent { .. }) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "storage_unavailable",
                "not ready: the store's schema is not current (migrations pending)".to_owned(),
            ),
            Self::NotReady(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "storage_unavailable",
                "not ready: the store does not answer".to_owned(),
            ),
            Self::Store(error) if error.is_retryable() => (
                StatusCode::SERVICE_UNAVAILABLE,
                "storage_unavailable",
                "the store is unavailable; retry later".to_owned(),
            ),
            Self::Store(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "internal error".to_owned(),
            ),
        };
        // A backstop: whatever a message quotes, an answer stays small.
        let body = ErrorAnswer {
            error: ErrorDetail {
                code,
                message: cut(&cut_quoted(&message), MAX_MESSAGE_CHARS),
                errors: listed.filter(|errors| !errors.is_empty()).map(|errors| {
                    errors
                        .iter()
                        .map(|error| FieldError {
                            index: error.index,
                            field: error
                                .field
                                .as_deref()
                                .map(|field| cut(field, MAX_FIELD_CHARS)),
                            message: cut(&cut_quoted(&error.message), MAX_MESSAGE_CHARS),
                        })
                        .collect()
                }),
            },
        };
        let mut response = (status, axum::Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        let retry_after = match &self {
            Self::RateLimited { retry_after } => Some(*retry_after),
            Self::Overloaded => Some(1),
            _ if status == StatusCode::SERVICE_UNAVAILABLE => Some(RETRY_AFTER_SECONDS),
            _ => None,
        };
        if let Some(seconds) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if status.is_server_error() && !matches!(self, Self::Repairing) {
            let detail = match &self {
                Self::NotReady(error) | Self::Store(error) => error.chain(),
                other => other.to_string(),
            };
            response.extensions_mut().insert(ServerErrorDetail(detail));
        }
        response
    }
}

/// Answers requests no route matched.
pub(crate) async fn not_found(request: Request) -> ApiError {
    ApiError::NotFound(request.uri().path().to_owned())
}

/// Logs the hidden cause of every 5xx answer, once, inside the request span.
pub(crate) async fn log_server_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    if let Some(ServerErrorDetail(detail)) = response.extensions().get::<ServerErrorDetail>() {
        if response.status() == StatusCode::SERVICE_UNAVAILABLE {
            tracing::warn!(status = response.status().as_u16(), error = %detail, "request failed");
        } else {
            tracing::error!(status = response.status().as_u16(), error = %detail, "request failed");
        }
    }
    response
}

//! `/track`: beacons from page script tags, as a form post, a `navigator.sendBeacon` body
//! (`text/plain` holding urlencoded text or a JSON object), JSON, or a `GET` pixel.
//! CORS is open to every page (the `/track` routes carry their own layer in the router).

use crate::domain::echo::echo;
use crate::http::AppState;
use crate::http::beacons::beacon_params::{BeaconError, parse_beacon};
use crate::http::edge::body::{BodyLimits, read_body};
use crate::http::edge::client_ip::client_ip;
use crate::http::edge::error::{ApiError, ErrorAnswer};
use crate::http::edge::openapi::texts::{Guid, Site};
use crate::http::edge::viewer::Viewer;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde_json::Value;

/// A beacon's own parameters, for the document. Feature parameters (any other name, 1–64
/// characters of `A-Z a-z 0-9 _ . -`, a value of at most 512 bytes, at most 4 by default) and
/// cache busters (`cb`, `_*`) are described, not listed. `site` is listed as required: a
/// beacon without it must come from a page, whose `Origin` or `Referer` names the site.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub(crate) struct BeaconQuery {
    /// The site; default: the host of `Origin`, else of `Referer`.
    #[param(value_type = Site, inline)]
    site: String,
    /// The visitor id: 1–128 characters, no control character.
    #[param(value_type = Guid, inline)]
    guid: String,
    /// Epoch seconds (a decimal fraction allowed), from 2000-01-01 to 10 minutes ahead of the
    /// server's clock; default: the receive time.
    #[param(value_type = Option<String>, pattern = "^(?:9466848[0-9]{2}|9466849[0-9]{2}|94668[5-9][0-9]{3}|94669[0-9]{4}|946[7-9][0-9]{5}|94[7-9][0-9]{6}|9[5-9][0-9]{7}|[1-9][0-9]{9,11})(?:\\.[0-9]*)?$")]
    timestamp: Option<String>,
}

/// The form body of a beacon `POST`: the parameters of [`BeaconQuery`], as an object.
pub(crate) struct BeaconForm;

impl utoipa::PartialSchema for BeaconForm {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::Schema> {
        use utoipa::IntoParams;
        use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, Type};
        let mut object = ObjectBuilder::new()
            .schema_type(Type::Object)
            .additional_properties(Some(
                AdditionalProperties::<utoipa::openapi::Schema>::FreeForm(false),
            ));
        for parameter in BeaconQuery::into_params(|| None) {
            if let Some(schema) = parameter.schema {
                object = object.property(parameter.name.clone(), schema);
            }
            if parameter.required == utoipa::openapi::Required::True {
                object = object.required(parameter.name);
            }
        }
        object.into()
    }
}
impl utoipa::ToSchema for BeaconForm {}

/// A beacon is a few hundred bytes; this leaves room for the largest valid one.
const MAX_BEACON_BYTES: usize = 64 * 1024;

/// The smallest transparent GIF: 1×1, one transparent colour.
const PIXEL: &[u8] = &[
    0x47, 0x49, 0x46, 0x38, 0x39, 0x61, 0x01, 0x00, 0x01, 0x00, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00,
    0xff, 0xff, 0xff, 0x21, 0xf9, 0x04, 0x01, 0x00, 0x00, 0x00, 0x00, 0x2c, 0x00, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x01, 0x00, 0x00, 0x02, 0x02, 0x44, 0x01, 0x00, 0x3b,
];

#[utoipa::path(
    post,
    path = "/track",
    tag = "beacons",
    summary = "Record a page-view beacon (form post, navigator.sendBeacon, JSON).",
    description = "Parameters (`site`, `guid`, `timestamp` in epoch seconds, features) come from \
        an `application/x-www-form-urlencoded` or `multipart/form-data` body, a `text/plain` body holding the same or a \
        JSON object, `application/json`, and the query string, merged. CORS is open to every \
        origin.",
    request_body(content = inline(BeaconForm), content_type = "application/x-www-form-urlencoded", example = "site=site1&guid=962e0c3a-6c08-4160-9196-f0050faffe62&feature1=facebook.com"),
    responses(
        (status = 204, description = "Stored"),
        (status = 400, description = "Invalid input: the error names the field or parameter; nothing was stored", body = ErrorAnswer),
        (status = 403, description = "The site is not registered, or refuses the page's origin; nothing was stored", body = ErrorAnswer),
        (status = 413, description = "The body or the number of events is over the limit", body = ErrorAnswer),
        (status = 429, description = "The client address is past its rate (`--rate-limit-beacons`); nothing stored", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable or the server is at its in-flight cap; retry after `Retry-After` seconds", body = ErrorAnswer),
    )
)]
pub(crate) async fn post_track(
    State(state): State<AppState>,
    request: Request,
) -> Result<StatusCode, ApiError> {
    let (parts, body) = request.into_parts();
    // Before a byte of the body is read: an address past its rate costs next to nothing.
    admit_address(&state, &parts)?;
    let client_address = client_ip(&parts, &state.options.trusted_proxies);
    let headers = parts.headers;
    let query = parts.uri.query();
    let limits = BodyLimits {
        max_bytes: MAX_BEACON_BYTES,
        max_events: 1,
    };
    // docs/API.md: every /track refusal but an oversized body is a 400 naming what is wrong.
    let as_400 = |error: ApiError| match error {
        ApiError::UnsupportedMediaType(message) => {
            let field = if message.starts_with("Content-Encoding") {
                "Content-Encoding"
            } else {
                "Content-Type"
            };
            let message = message.strip_prefix(field).unwrap_or(&message).trim_start();
            ApiError::invalid(field, message)
        }
        other => other,
    };
    let body = read_body(&headers, body, limits).await.map_err(as_400)?;
    let mut params = query_params(query)?;
    match multipart_boundary(&headers) {
        // `sendBeacon(url, formData)`, what the tracker script sends.
        Some(boundary) => params.extend(multipart_params(boundary, body).await?),
        None => params.extend(body_params(&headers, &body).map_err(as_400)?),
    }
    track(&state, &headers, client_address, params).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `HEAD` answers like `GET` without recording a visit: link checkers and prefetchers send
/// it, and a page view did not happen.
pub(crate) async fn head_track() -> Response {
    pixel_response()
}

/// The 1×1 GIF answer of `/track` and `/i`, never cached (each load must reach the server).
pub(crate) fn pixel_response() -> Response {
    (
        [
            (header::CONTENT_TYPE, "image/gif"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        PIXEL,
    )
        .into_response()
}

#[utoipa::path(
    get,
    path = "/track",
    tag = "beacons",
    summary = "Record a page-view beacon from the query string (a tracking pixel).",
    params(
        BeaconQuery,
    ),
    responses(
        (status = 200, description = "A 1×1 transparent GIF", content_type = "image/gif"),
        (status = 400, description = "Invalid input: the error names the field or parameter; nothing was stored", body = ErrorAnswer),
        (status = 403, description = "The site is not registered, or refuses the page's origin; nothing was stored", body = ErrorAnswer),
        (status = 429, description = "The client address is past its rate (`--rate-limit-beacons`); nothing stored", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable or the server is at its in-flight cap; retry after `Retry-After` seconds", body = ErrorAnswer),
    )
)]
pub(crate) async fn get_track(
    State(state): State<AppState>,
    parts: Parts,
) -> Result<Response, ApiError> {
    admit_address(&state, &parts)?;
    let client_address = client_ip(&parts, &state.options.trusted_proxies);
    track(
        &state,
        &parts.headers,
        client_address,
        query_params(parts.uri.query())?,
    )
    .await?;
    Ok(pixel_response())
}

/// A plain `OPTIONS` (not a CORS preflight, which the CORS layer answers) says what is allowed.
#[utoipa::path(
    options,
    path = "/track",
    tag = "beacons",
    summary = "CORS preflight: any origin may send beacons.",
    responses((status = 204, description = "Allowed methods"), (status = 200, description = "A CORS preflight's answer"))
)]
pub(crate) async fn options_track() -> Response {
    (
        StatusCode::NO_CONTENT,
        [(header::ALLOW, "GET, POST, OPTIONS")],
    )
        .into_response()
}

/// Takes one request from the client address's bucket (`--rate-limit-beacons`).
fn admit_address(state: &AppState, parts: &Parts) -> Result<(), ApiError> {
    let address = client_ip(parts, &state.options.trusted_proxies);
    state.limiters.admit_beacon(address).inspect_err(|_| {
        metrics::counter!("adevents_beacons_refused_total", "reason" => "rate_limited")
            .increment(1);
    })
}

async fn track(
    state: &AppState,
    headers: &HeaderMap,
    client_address: Option<std::net::IpAddr>,
    params: Vec<(String, String)>,
) -> Result<(), ApiError> {
    let fallback = page_host(headers);
    let now = Utc::now();
    let retain_raw = state.options.retain_raw;
    let mut beacon = parse_beacon(params, fallback.as_deref(), now, state.options.beacon_rules)
        .and_then(|beacon| {
            // Judged by the beacon's UTC day, as impressions are: a day is kept whole or not.
            if retain_raw.expired(beacon.timestamp.utc_day(), now) {
                Err(vec![BeaconError::new("timestamp", retain_raw.refusal())])
            } else {
                Ok(beacon)
            }
        })
        .map_err(|errors| {
            metrics::counter!("adevents_events_rejected_total", "kind" => "beacon").increment(1);
            invalid_beacon(errors)
        })?;
    if let Err(refusal) = state
        .access
        .admit_beacon(&beacon.site, page_origin(headers).as_ref())
    {
        metrics::counter!("adevents_beacons_refused_total", "reason" => refusal.reason())
            .increment(1);
        return Err(ApiError::Forbidden(format!("the site {refusal}")));
    }
    let viewer = Viewer::of(headers, client_address);
    beacon.user_agent = viewer.user_agent.clone();
    beacon.invalid = state.classifier.classify(viewer.signals());
    // Global Privacy Control, as the page's browser sends it, honoured where the site says so.
    let without_visitor = gpc_asked(headers) && state.access.respects_gpc(&beacon.site);
    state.beacons.track(beacon, without_visitor).await?;
    metrics::counter!("adevents_events_accepted_total", "kind" => "beacon").increment(1);
    Ok(())
}

/// Whether the request carries the Global Privacy Control signal (`Sec-GPC: 1`).
fn gpc_asked(headers: &HeaderMap) -> bool {
    headers
        .get("sec-gpc")
        .is_some_and(|value| value.as_bytes().trim_ascii() == b"1")
}

fn invalid_beacon(errors: Vec<BeaconError>) -> ApiError {
    ApiError::invalid_fields(
        "the beacon",
        errors
            .into_iter()
            .map(|error| (error.field, error.message))
            .collect(),
    )
}

/// The origin of the page that sent the beacon: `Origin`, else the origin of `Referer`;
/// `Origin: null` (a sandboxed or local page) is an opaque origin, present but matching no
/// pattern.
fn page_origin(headers: &HeaderMap) -> Option<url::Origin> {
    [header::ORIGIN, header::REFERER].iter().find_map(|name| {
        let value = headers.get(name)?.to_str().ok()?.trim();
        if value.eq_ignore_ascii_case("null") {
            return Some(url::Url::parse("data:,").ok()?.origin());
        }
        Some(url::Url::parse(value).ok()?.origin())
    })
}

/// The host of the page that sent the beacon: from `Origin`, else from `Referer`.
fn page_host(headers: &HeaderMap) -> Option<String> {
    [header::ORIGIN, header::REFERER].iter().find_map(|name| {
        let value = headers.get(name)?.to_str().ok()?;
        let url = url::Url::parse(value).ok()?;
        url.host_str().map(str::to_owned)
    })
}

fn query_params(query: Option<&str>) -> Result<Vec<(String, String)>, ApiError> {
    serde_urlencoded::from_str(query.unwrap_or_default())
        .map_err(|error| ApiError::invalid("query string", format!("is malformed: {error}")))
}

/// Parameters from a body, by its type. `sendBeacon` with a string sends `text/plain`, which
/// may hold urlencoded text or a JSON object; a body without a type is read the same way.
pub(crate) fn body_params(
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Vec<(String, String)>, ApiError> {
    if body.is_empty() {
        return Ok(Vec::new());
    }
    let media_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .map(|value| value.trim().to_ascii_lowercase());
    match media_type.as_deref() {
        Some("application/x-www-form-urlencoded") => urlencoded(body),
        Some("application/json") => json_object(body),
        None | Some("text/plain") => {
            if body.trim_ascii_start().starts_with(b"{") {
                json_object(body)
            } else {
                urlencoded(body)
            }
        }
        Some(other) => Err(ApiError::UnsupportedMediaType(format!(
            "Content-Type {} is not accepted here: send application/x-www-form-urlencoded, \
             text/plain or application/json",
            echo(other)
        ))),
    }
}

/// The boundary of a `multipart/form-data` body, when the request declares one.
fn multipart_boundary(headers: &HeaderMap) -> Option<String> {
    let content_type = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let media_type = content_type.split(';').next()?.trim();
    if !media_type.eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    // A multipart type without a usable boundary is refused as a malformed body below.
    Some(multer::parse_boundary(content_type).unwrap_or_default())
}

/// Text fields of a `multipart/form-data` body (already read whole, within the beacon size
/// limit); a file field is refused.
async fn multipart_params(
    boundary: String,
    body: bytes::Bytes,
) -> Result<Vec<(String, String)>, ApiError> {
    let malformed = |error: multer::Error| {
        ApiError::invalid("body", format!("is not multipart form data: {error}"))
    };
    if boundary.is_empty() {
        return Err(ApiError::invalid(
            "Content-Type",
            "multipart/form-data needs a boundary",
        ));
    }
    let stream = futures::stream::once(async move { Ok::<_, std::convert::Infallible>(body) });
    let mut multipart = multer::Multipart::new(stream, boundary);
    let mut params = Vec::new();
    while let Some(field) = multipart.next_field().await.map_err(malformed)? {
        let name = field.name().unwrap_or_default().to_owned();
        if field.file_name().is_some() {
            return Err(ApiError::invalid(&name, "must be a text field, not a file"));
        }
        let value = field.text().await.map_err(malformed)?;
        params.push((name, value));
    }
    Ok(params)
}

fn urlencoded(body: &[u8]) -> Result<Vec<(String, String)>, ApiError> {
    serde_urlencoded::from_bytes(body).map_err(|error| {
        ApiError::invalid("body", format!("is not urlencoded parameters: {error}"))
    })
}

/// A JSON object of strings (numbers are taken as their text, e.g. a numeric timestamp).
fn json_object(body: &[u8]) -> Result<Vec<(String, String)>, ApiError> {
    let object: serde_json::Map<String, Value> = serde_json::from_slice(body)
        .map_err(|error| ApiError::invalid("body", format!("is not a JSON object: {error}")))?;
    object
        .into_iter()
        .map(|(name, value)| match value {
            Value::String(text) => Ok((name, text)),
            Value::Number(number) => Ok((name, number.to_string())),
            _ => Err(ApiError::invalid(&name, "must be a string or a number")),
        })
        .collect()
}

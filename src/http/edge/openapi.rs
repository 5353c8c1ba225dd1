//! `GET /openapi.json`: the OpenAPI 3 document of the API, generated from the handlers'
//! annotations and the answer types themselves (utoipa), so it cannot drift from the code.
//! docs/API.md says the same in prose; a test checks the document names every route served.

use crate::http::edge::error::{ErrorAnswer, ErrorDetail, FieldError};
use crate::http::edge::schema_mend;
use axum::http::header;
use axum::response::IntoResponse;
use std::sync::OnceLock;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi};

/// What the document says besides its paths.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "adevents",
        version = "1",
        description = "Ad-event ingestion, beacons and campaign summaries. Every error is \
            `{\"error\": {\"code\", \"message\", \"errors\"?}}`; a 503 carries `Retry-After`. \
            The contract in prose: docs/API.md."
    ),
    components(schemas(ErrorAnswer, ErrorDetail, FieldError)),
    tags(
        (name = "keys", description = "API keys: scopes admin, ingest, read and metrics."),
        (name = "ingestion", description = "Ad servers post impressions and clicks."),
        (name = "beacons", description = "Script tags on customers' pages send page views."),
        (name = "queries", description = "Dashboards read summaries, reports, exports and uniques."),
        (name = "delivery", description = "Ad servers poll delivery against caps; dashboards ask whether numbers are final."),
        (name = "settings", description = "Campaign and site configuration."),
        (name = "privacy", description = "Personal data: erasure and access by subject (administrators)."),
        (name = "operations", description = "Health, readiness, metrics and this document."),
    )
)]
pub(crate) struct ApiDoc;

/// Declares the bearer scheme, and gives every operation that needs a key its 401 and 403
/// answers (each operation's `security` names the scopes that may call it).
struct KeysEverywhere;

impl Modify for KeysEverywhere {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A key made by POST /v1/keys (or the operator's ADEVENTS_ADMIN_KEY), \
                         sent as `Authorization: Bearer <key>`.",
                    ))
                    .build(),
            ),
        );
        let error = |description: &str| {
            RefOr::T(
                ResponseBuilder::new()
                    .description(description)
                    .content(
                        "application/json",
                        utoipa::openapi::ContentBuilder::new()
                            .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                                "ErrorAnswer",
                            ))))
                            .build(),
                    )
                    .build(),
            )
        };
        for item in openapi.paths.paths.values_mut() {
            for operation in [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
            ]
            .into_iter()
            .flatten()
            {
                if operation.security.as_ref().is_none_or(Vec::is_empty) {
                    continue;
                }
                let responses = &mut operation.responses.responses;
                responses.entry("401".into()).or_insert_with(|| {
                    error("No key, an unknown or revoked key, or not the Bearer scheme")
                });
                responses.entry("403".into()).or_insert_with(|| {
                    error("A valid key without the scope or the owner this needs")
                });
            }
        }
    }
}

/// The document as served, rendered once from what the router collected.
static DOCUMENT: OnceLock<String> = OnceLock::new();

/// Completes the document the router built from its handlers and keeps it (every router of a
/// process builds the same one).
pub(crate) fn publish(mut document: utoipa::openapi::OpenApi) {
    KeysEverywhere.modify(&mut document);
    DOCUMENT.get_or_init(|| {
        serde_json::to_value(&document)
            .map(schema_mend::mended)
            .map(with_every_body_form)
            .and_then(|document| serde_json::to_string_pretty(&document))
            .unwrap_or_default()
    });
}

/// The ingestion bodies in each form the server reads: the handlers declare a JSON array of
/// events, and one object, or NDJSON (an event a line), is as good.
fn with_every_body_form(mut document: serde_json::Value) -> serde_json::Value {
    let Some(paths) = document
        .get_mut("paths")
        .and_then(serde_json::Value::as_object_mut)
    else {
        return document;
    };
    for operation in paths.values_mut().filter_map(|item| item.get_mut("post")) {
        let ingests = operation["tags"]
            .as_array()
            .is_some_and(|tags| tags.iter().any(|tag| tag == "ingestion"));
        let Some(content) = operation
            .pointer_mut("/requestBody/content")
            .and_then(serde_json::Value::as_object_mut)
            .filter(|_| ingests)
        else {
            continue;
        };
        let Some(event) = content
            .get("application/json")
            .and_then(|json| json.pointer("/schema/items"))
            .cloned()
        else {
            continue;
        };
        content.insert(
            "application/json".to_owned(),
            serde_json::json!({"schema": {"oneOf": [
                event.clone(),
                {"type": "array", "items": event.clone()},
            ]}}),
        );
        content.insert(
            "application/x-ndjson".to_owned(),
            serde_json::json!({"schema": event}),
        );
    }
    document
}

#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    summary = "This document.",
    responses((status = 200, description = "OpenAPI 3", content_type = "application/json"))
)]
pub(crate) async fn get_openapi() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        DOCUMENT.get().cloned().unwrap_or_default(),
    )
}

/// The schemas of the texts the server reads by rules of its own: each states the rule that
/// the parsing code enforces, so a client (or a fuzzer) generating from the document sends
/// what the server accepts and nothing else. Inlined where used (`inline(...)`).
pub(crate) mod texts {
    use crate::domain::beacon::{MAX_GUID_CHARS, MAX_SITE_CHARS};
    use crate::domain::user_data::{MAX_ENTRIES, MAX_KEY_BYTES, MAX_VALUE_BYTES};
    use utoipa::openapi::schema::{
        AdditionalProperties, KnownFormat, ObjectBuilder, OneOfBuilder, SchemaFormat, Type,
    };
    use utoipa::openapi::{RefOr, Schema};
    use utoipa::{PartialSchema, ToSchema};

    /// Text without a control character (what `char::is_control` refuses: C0, DEL and C1).
    pub(crate) const NO_CONTROL: &str = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$";

    fn string() -> ObjectBuilder {
        ObjectBuilder::new().schema_type(Type::String)
    }

    /// An id: `ids::parse_uuid`'s two forms, never the nil UUID.
    pub(crate) struct Id;

    impl PartialSchema for Id {
        fn schema() -> RefOr<Schema> {
            string()
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::Uuid)))
                .pattern(Some(
                    "^(?!(?:0{8}-0{4}-0{4}-0{4}-0{12}|0{32})$)(?:[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-\
                     [0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}|[0-9A-Fa-f]{32})$",
                ))
                .description(Some(
                    "A UUID, hyphenated (8-4-4-4-12) or as 32 hex digits; not the nil UUID",
                ))
                .into()
        }
    }
    impl ToSchema for Id {}

    /// A site id: `SiteId::parse`.
    pub(crate) struct Site;

    impl PartialSchema for Site {
        fn schema() -> RefOr<Schema> {
            string()
                .pattern(Some(format!("^[A-Za-z0-9._:-]{{1,{MAX_SITE_CHARS}}}$")))
                .min_length(Some(1))
                .max_length(Some(MAX_SITE_CHARS))
                .into()
        }
    }
    impl ToSchema for Site {}

    /// A beacon's visitor id: `Guid::parse`.
    pub(crate) struct Guid;

    impl PartialSchema for Guid {
        fn schema() -> RefOr<Schema> {
            string()
                .min_length(Some(1))
                .max_length(Some(MAX_GUID_CHARS))
                .pattern(Some(NO_CONTROL))
                .into()
        }
    }
    impl ToSchema for Guid {}

    /// An IANA time zone name: every name the server knows (chrono-tz), and no other.
    pub(crate) struct TimeZone;

    impl PartialSchema for TimeZone {
        fn schema() -> RefOr<Schema> {
            string()
                .enum_values(Some(chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name())))
                .into()
        }
    }
    impl ToSchema for TimeZone {}

    /// A query's calendar day: `YYYY-MM-DD` from 2000-01-01 to 9998-12-31 (`Params::range`).
    pub(crate) struct LocalDay;

    impl PartialSchema for LocalDay {
        fn schema() -> RefOr<Schema> {
            string()
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::Date)))
                .pattern(Some(
                    "^(?:2[0-9]{3}|[3-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9])-(?:0[1-9]|1[0-2])-\
                     (?:0[1-9]|[12][0-9]|3[01])$",
                ))
                .into()
        }
    }
    impl ToSchema for LocalDay {}

    /// An event's `timestamp`: RFC 3339 or epoch milliseconds, from 2000-01-01 (and at most 10
    /// minutes ahead of the server's clock, which a schema cannot state).
    pub(crate) struct Timestamp;

    impl PartialSchema for Timestamp {
        fn schema() -> RefOr<Schema> {
            OneOfBuilder::new()
                .item(
                    string()
                        .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
                        .pattern(Some("^[2-9][0-9]{3}-")),
                )
                .item(
                    ObjectBuilder::new()
                        .schema_type(Type::Integer)
                        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
                        .minimum(Some(946_684_800_000_i64)),
                )
                .description(Some(
                    "RFC 3339, or an integer of epoch milliseconds; from 2000-01-01, at most 10 \
                     minutes ahead of the server's clock",
                ))
                .into()
        }
    }
    impl ToSchema for Timestamp {}

    /// An impression's `user_ip`.
    pub(crate) struct IpAddress;

    impl PartialSchema for IpAddress {
        fn schema() -> RefOr<Schema> {
            let format = |name: &str| string().format(Some(SchemaFormat::Custom(name.into())));
            OneOfBuilder::new()
                .item(format("ipv4"))
                .item(format("ipv6"))
                .description(Some(
                    "IPv4 or IPv6; default: the client address. Stored, answered and logged \
                     as --store-ip says: by default with its last bits zeroed (IPv4 to its /24, \
                     IPv6 to its /48); the full address is used only for invalid-traffic checks",
                ))
                .into()
        }
    }
    impl ToSchema for IpAddress {}

    /// `UserData::new`: at most 64 entries, keys 1–64 and values at most 1024 (bytes, which a
    /// schema can only state as characters), no control characters.
    pub(crate) struct UserData;

    impl PartialSchema for UserData {
        fn schema() -> RefOr<Schema> {
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .max_properties(Some(MAX_ENTRIES))
                .property_names(Some(
                    string()
                        .min_length(Some(1))
                        .max_length(Some(MAX_KEY_BYTES))
                        .pattern(Some(NO_CONTROL)),
                ))
                .additional_properties(Some(AdditionalProperties::RefOr(RefOr::T(
                    string()
                        .max_length(Some(MAX_VALUE_BYTES))
                        .pattern(Some(NO_CONTROL))
                        .into(),
                ))))
                .description(Some(
                    "At most 64 entries; key 1 to 64 bytes, value at most 1024 bytes; no \
                     control characters",
                ))
                .into()
        }
    }
    impl ToSchema for UserData {}

    /// An allowed origin of a site, as `OriginPattern::parse` reads it and this module states
    /// it: `http` or `https`, `://`, an optional `*.`, a host (dot-separated labels of
    /// `A-Z a-z 0-9 -`, none starting `xn--`, the last starting with a letter) or an IPv4
    /// address without leading zeros, and an optional port up to 65535. The server checks the
    /// same grammar ([`is_origin_text`]) before parsing, so the document is exact.
    pub(crate) struct OriginText;

    /// [`OriginText`]'s grammar as a JSON Schema pattern.
    pub(crate) const ORIGIN_PATTERN: &str = "^https?://(?:\\*\\.)?(?:(?:(?![Xx][Nn]--)[A-Za-z0-9-]+\\.)*(?![Xx][Nn]--)[A-Za-z][A-Za-z0-9-]*|(?:(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9]))(?::(?:[0-9]{1,4}|[0-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?$";

    impl PartialSchema for OriginText {
        fn schema() -> RefOr<Schema> {
            string().pattern(Some(ORIGIN_PATTERN)).into()
        }
    }
    impl ToSchema for OriginText {}

    /// Whether `text` follows [`OriginText`]'s grammar.
    pub(crate) fn is_origin_text(text: &str) -> bool {
        let Some(rest) = text
            .strip_prefix("https://")
            .or_else(|| text.strip_prefix("http://"))
        else {
            return false;
        };
        let rest = rest.strip_prefix("*.").unwrap_or(rest);
        let (host, port) = match rest.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (rest, None),
        };
        let port_ok = port.is_none_or(|port| {
            (1..=5).contains(&port.len())
                && port.bytes().all(|b| b.is_ascii_digit())
                && port.parse::<u32>().is_ok_and(|port| port <= 65_535)
        });
        port_ok && (is_ipv4(host) || is_host_name(host))
    }

    fn is_ipv4(host: &str) -> bool {
        let octets: Vec<&str> = host.split('.').collect();
        octets.len() == 4
            && octets.iter().all(|octet| {
                (1..=3).contains(&octet.len())
                    && octet.bytes().all(|b| b.is_ascii_digit())
                    && !(octet.len() > 1 && octet.starts_with('0'))
                    && octet.parse::<u16>().is_ok_and(|value| value <= 255)
            })
    }

    fn is_host_name(host: &str) -> bool {
        let labels: Vec<&str> = host.split('.').collect();
        let label_ok = |label: &&str| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label
                    .get(..4)
                    .is_some_and(|head| head.eq_ignore_ascii_case("xn--"))
        };
        labels.iter().all(label_ok)
            && labels
                .last()
                .is_some_and(|last| last.starts_with(|c: char| c.is_ascii_alphabetic()))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn origin_texts_follow_the_grammar_the_document_states() {
            for text in [
                "https://shop.example",
                "http://*.example.com:8080",
                "https://127.0.0.1:65535",
                "https://a-b.c0",
            ] {
                assert!(is_origin_text(text), "{text}");
                assert!(
                    crate::domain::access::OriginPattern::parse(text).is_ok(),
                    "{text}"
                );
            }
            for text in [
                "",
                "ftp://shop.example",
                "https://shop.example/",
                "https://xn--zz.example",
                "https://1.2.3",
                "https://01.2.3.4",
                "https://shop..example",
                "https://shop.example:65536",
                "https://sh\u{f6}p.example",
            ] {
                assert!(!is_origin_text(text), "{text}");
            }
        }
    }
}

//! Reading an ingestion body: content type and encoding, size limits on the decoded bytes,
//! and splitting JSON (one object or an array) or NDJSON into one raw item per event.

use crate::domain::echo::echo;
use crate::http::edge::error::ApiError;
use axum::body::Body;
use axum::http::{HeaderMap, header};
use bytes::Bytes;
use futures::StreamExt;
use serde_json::value::RawValue;
use std::io::Read;

/// Limits on one ingestion request.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// Decoded (after gzip) body bytes.
    pub max_bytes: usize,
    pub max_events: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyFormat {
    Json,
    Ndjson,
}

/// The format named by `Content-Type`: none means JSON; anything but JSON or NDJSON is a 415.
pub(crate) fn body_format(headers: &HeaderMap) -> Result<BodyFormat, ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(BodyFormat::Json);
    };
    let media_type = value
        .to_str()
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match media_type.as_str() {
        "application/json" => Ok(BodyFormat::Json),
        "application/x-ndjson"
        | "application/ndjson"
        | "application/jsonl"
        | "application/x-jsonlines" => Ok(BodyFormat::Ndjson),
        _ => Err(ApiError::UnsupportedMediaType(format!(
            "Content-Type {} is not accepted; send application/json or application/x-ndjson",
            echo(&media_type)
        ))),
    }
}

/// The body's bytes, gunzipped if `Content-Encoding: gzip`, at most `limits.max_bytes`.
pub(crate) async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limits: BodyLimits,
) -> Result<Bytes, ApiError> {
    let gzip = match headers
        .get(header::CONTENT_ENCODING)
        .map(|value| value.to_str())
    {
        None => false,
        Some(Ok(encoding)) if encoding.trim().eq_ignore_ascii_case("identity") => false,
        Some(Ok(encoding)) if encoding.trim().eq_ignore_ascii_case("gzip") => true,
        Some(_) => {
            return Err(ApiError::UnsupportedMediaType(
                "Content-Encoding must be gzip or absent".to_owned(),
            ));
        }
    };
    let too_large = || {
        ApiError::PayloadTooLarge(format!(
            "the body is over the {} byte limit (after decompression)",
            limits.max_bytes
        ))
    };
    // Compressed bodies are not larger than what they decode to, so one bound serves both.
    let mut raw = Vec::new();
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(unreadable)?;
        if raw.len() + chunk.len() > limits.max_bytes {
            return Err(too_large());
        }
        raw.extend_from_slice(&chunk);
    }
    if !gzip {
        return Ok(Bytes::from(raw));
    }
    let mut decoded = Vec::new();
    let limit = u64::try_from(limits.max_bytes)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    flate2::read::MultiGzDecoder::new(raw.as_slice())
        .take(limit)
        .read_to_end(&mut decoded)
        .map_err(|error| ApiError::invalid("body", format!("is not valid gzip: {error}")))?;
    if decoded.len() > limits.max_bytes {
        return Err(too_large());
    }
    Ok(Bytes::from(decoded))
}

/// A body that could not be read: too slow (the body timeout, 408) or broken off.
fn unreadable(error: axum::Error) -> ApiError {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(current) = cause {
        if current.is::<tower_http::timeout::TimeoutError>() {
            return ApiError::RequestTimeout;
        }
        cause = current.source();
    }
    ApiError::invalid("body", format!("could not be read: {error}"))
}

/// The most bytes of a settings or key body: a few fields.
const MAX_SMALL_BODY_BYTES: usize = 64 * 1024;

/// A small JSON body (settings, keys), read within the body timeout and size limit.
pub(crate) async fn small_body(body: Body) -> Result<Bytes, ApiError> {
    let limits = BodyLimits {
        max_bytes: MAX_SMALL_BODY_BYTES,
        max_events: 1,
    };
    read_body(&HeaderMap::new(), body, limits).await
}

/// What a cheap scan of a body says before anything is allocated per item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    /// Events in the body (top-level array items, or non-blank NDJSON lines).
    pub(crate) items: usize,
    /// Whether every item starts as a JSON object (as far as the scan can tell).
    pub(crate) all_objects: bool,
}

/// Counts a body's events in one pass over its bytes, so an oversized request is refused
/// before per-item memory is spent on it (a 5 MiB body of `{}` is 1.7 million items).
pub(crate) fn scan(bytes: &[u8], format: BodyFormat) -> Shape {
    match format {
        BodyFormat::Ndjson => {
            let mut shape = Shape {
                items: 0,
                all_objects: true,
            };
            for line in bytes.split(|b| *b == b'\n') {
                if let Some(first) = line.iter().find(|b| !b.is_ascii_whitespace()) {
                    shape.items += 1;
                    shape.all_objects &= *first == b'{';
                }
            }
            shape
        }
        BodyFormat::Json => scan_json(bytes),
    }
}

fn scan_json(bytes: &[u8]) -> Shape {
    let mut shape = Shape {
        items: 0,
        all_objects: true,
    };
    let mut depth = 0usize;
    // Whether the next value at depth 1 starts an item.
    let mut expect_item = false;
    let mut at = 0;
    while let Some(&byte) = bytes.get(at) {
        at += 1;
        if byte.is_ascii_whitespace() {
            continue;
        }
        if depth == 0 {
            match byte {
                b'[' => expect_item = true,
                b'{' => {
                    shape.items = 1;
                    return shape;
                }
                _ => return shape,
            }
            depth = 1;
            continue;
        }
        if expect_item && depth == 1 && byte != b']' {
            shape.items += 1;
            shape.all_objects &= byte == b'{';
            expect_item = false;
        }
        match byte {
            // Most of an event's bytes are in strings (ids, keys): jump to the string's end
            // instead of looking at each byte.
            b'"' => at = string_end(bytes, at),
            b'[' | b'{' => depth += 1,
            b']' | b'}' => depth = depth.saturating_sub(1),
            b',' if depth == 1 => expect_item = true,
            _ => {}
        }
    }
    shape
}

/// Where the JSON string whose contents start at `from` ends: just past its closing quote, or
/// the end of `bytes` if it is never closed.
fn string_end(bytes: &[u8], mut from: usize) -> usize {
    while let Some(found) = bytes
        .get(from..)
        .and_then(|rest| memchr::memchr2(b'"', b'\\', rest))
    {
        let at = from + found;
        if bytes[at] == b'"' {
            return at + 1;
        }
        // An escape: the next byte is escaped, whatever it is.
        from = at + 2;
    }
    bytes.len()
}

/// A 413 when `items` is over the limit.
pub(crate) fn check_count(items: usize, max_events: usize) -> Result<(), ApiError> {
    if items > max_events {
        return Err(ApiError::PayloadTooLarge(format!(
            "the request holds {items} events; at most {max_events} are accepted per request"
        )));
    }
    Ok(())
}

/// One event's raw JSON, or why its line could not be read (NDJSON).
pub(crate) type RawItem<'a> = Result<&'a RawValue, String>;

/// Splits a decoded body into one raw item per event; more than `max_events` is a 413.
pub(crate) fn split_items(
    bytes: &[u8],
    format: BodyFormat,
    max_events: usize,
) -> Result<Vec<RawItem<'_>>, ApiError> {
    let items = match format {
        BodyFormat::Json => {
            let text = std::str::from_utf8(bytes)
                .map_err(|_| ApiError::invalid("body", "is not UTF-8"))?;
            match text.trim_start().as_bytes().first() {
                Some(b'[') => serde_json::from_str::<Vec<&RawValue>>(text)
                    .map_err(|error| {
                        ApiError::invalid("body", format!("is not valid JSON: {error}"))
                    })?
                    .into_iter()
                    .map(Ok)
                    .collect(),
                Some(b'{') => vec![Ok(serde_json::from_str::<&RawValue>(text).map_err(
                    |error| ApiError::invalid("body", format!("is not valid JSON: {error}")),
                )?)],
                _ => {
                    return Err(ApiError::invalid(
                        "body",
                        "must be a JSON object or an array of objects",
                    ));
                }
            }
        }
        BodyFormat::Ndjson => {
            let text = std::str::from_utf8(bytes)
                .map_err(|_| ApiError::invalid("body", "is not UTF-8"))?;
            text.lines()
                .map(str::trim)
                .filter(|line| !line.is_empty())
                .map(|line| {
                    serde_json::from_str::<&RawValue>(line)
                        .map_err(|error| format!("is not valid JSON: {error}"))
                })
                .collect::<Vec<_>>()
        }
    };
    check_count(items.len(), max_events)?;
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_object_an_array_and_ndjson_each_give_items() {
        let one = split_items(br#"{"a":1}"#, BodyFormat::Json, 10).expect("valid");
        assert_eq!(one.len(), 1);
        let many = split_items(br#"[{"a":1}, {"a":2}]"#, BodyFormat::Json, 10).expect("valid");
        assert_eq!(many.len(), 2);
        let lines = split_items(
            b"{\"a\":1}\n\n{\"a\":2}\r\nnot json\n",
            BodyFormat::Ndjson,
            10,
        )
        .expect("valid");
        assert_eq!(lines.len(), 3);
        assert!(lines[0].is_ok() && lines[1].is_ok() && lines[2].is_err());
    }

    #[test]
    fn too_many_events_is_413_and_garbage_is_400() {
        assert!(matches!(
            split_items(b"[{},{},{}]", BodyFormat::Json, 2),
            Err(ApiError::PayloadTooLarge(_))
        ));
        assert!(matches!(
            split_items(b"[{},", BodyFormat::Json, 2),
            Err(ApiError::InvalidRequest { .. })
        ));
        assert!(matches!(
            split_items(b"42", BodyFormat::Json, 2),
            Err(ApiError::InvalidRequest { .. })
        ));
    }

    #[test]
    fn the_scan_counts_items_without_parsing_them() {
        let json = br#" [ {"a": "x,]\"}"}, {"b": [1, 2, {"c": 3}]}, {} ] "#;
        assert_eq!(
            scan(json, BodyFormat::Json),
            Shape {
                items: 3,
                all_objects: true
            }
        );
        assert_eq!(scan(b"[]", BodyFormat::Json).items, 0);
        assert_eq!(scan(br#"{"a": [1, 2]}"#, BodyFormat::Json).items, 1);
        assert_eq!(
            scan(br#"[{}, ["x"], 1]"#, BodyFormat::Json),
            Shape {
                items: 3,
                all_objects: false
            }
        );
        assert_eq!(
            scan(b"{}\n\n  \n[1]\n", BodyFormat::Ndjson),
            Shape {
                items: 2,
                all_objects: false
            }
        );
        // Escaped quotes and backslashes stay inside their string; an unclosed one ends the body.
        assert_eq!(
            scan(
                br#"[{"a": "\\"}, {"b": "\"]\\\""}, {"c": "x"#,
                BodyFormat::Json
            )
            .items,
            3
        );
        assert_eq!(scan(br#"[{"a": "x\"#, BodyFormat::Json).items, 1);
        let many = format!("[{}{{}}]", "{},".repeat(20_000));
        assert_eq!(scan(many.as_bytes(), BodyFormat::Json).items, 20_001);
    }

    #[test]
    fn content_types() {
        let mut headers = HeaderMap::new();
        assert_eq!(body_format(&headers).ok(), Some(BodyFormat::Json));
        headers.insert(
            header::CONTENT_TYPE,
            "application/json; charset=utf-8".parse().expect("valid"),
        );
        assert_eq!(body_format(&headers).ok(), Some(BodyFormat::Json));
        headers.insert(
            header::CONTENT_TYPE,
            "application/x-ndjson".parse().expect("valid"),
        );
        assert_eq!(body_format(&headers).ok(), Some(BodyFormat::Ndjson));
        headers.insert(header::CONTENT_TYPE, "text/csv".parse().expect("valid"));
        assert!(matches!(
            body_format(&headers),
            Err(ApiError::UnsupportedMediaType(_))
        ));
    }
}

//! Reading an ingestion body: content type and encoding, size limits on the decoded bytes,
//! and splitting JSON (one object or an array) or NDJSON into one raw item per event.

use super::error::ApiError;
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
pub enum BodyFormat {
    Json,
    Ndjson,
}

/// The format named by `Content-Type`: none means JSON; anything but JSON or NDJSON is a 415.
pub fn body_format(headers: &HeaderMap) -> Result<BodyFormat, ApiError> {
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
            "Content-Type {media_type:?} is not accepted; send application/json or application/x-ndjson"
        ))),
    }
}

/// The body's bytes, gunzipped if `Content-Encoding: gzip`, at most `limits.max_bytes`.
pub async fn read_body(
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
        let chunk = chunk
            .map_err(|error| ApiError::invalid("body", format!("could not be read: {error}")))?;
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

/// One event's raw JSON, or why its line could not be read (NDJSON).
pub type RawItem<'a> = Result<&'a RawValue, String>;

/// Splits a decoded body into one raw item per event; more than `max_events` is a 413.
pub fn split_items(
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
    if items.len() > max_events {
        return Err(ApiError::PayloadTooLarge(format!(
            "the request holds {} events; at most {max_events} are accepted per request",
            items.len()
        )));
    }
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

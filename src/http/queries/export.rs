//! `GET …/impressions` (the bulk export, streamed as NDJSON or CSV) and
//! `GET …/impressions/recent` (the newest N).
//!
//! An export is produced by a task that reads a page, encodes it and hands it to the answer's
//! body through a channel of two pages: reads wait for a slow client, and stop as soon as a
//! client that went away lets the body drop. A store failure after the first byte can only
//! cut the answer short (the status is sent); the client sees an unterminated chunked body.

use crate::domain::address::StoreIp;
use crate::domain::echo::echo;
use crate::domain::event::Impression;
use crate::domain::traffic::{InvalidReason, UserAgent};
use crate::domain::view::ImpressionViews;
use crate::http::AppState;
use crate::http::edge::error::{ApiError, ErrorAnswer};
use crate::http::edge::openapi::texts::Id;
use crate::http::edge::params::{Params, RangeQuery, campaign_key};
use crate::query::export::{Export, Exported};
use crate::query::recent::MAX_LIMIT;
use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use std::collections::BTreeMap;
use tokio::sync::mpsc;
use utoipa::ToSchema;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Ndjson,
    Csv,
}

/// The values of `format`, for the document.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
pub(crate) enum ExportFormat {
    Ndjson,
    Csv,
}

const CSV_COLUMNS: [&str; 15] = [
    "impression_id",
    "advertiser_id",
    "campaign_id",
    "ad_id",
    "user_id",
    "timestamp",
    "user_ip",
    "user_data",
    "clicked",
    "user_agent",
    "invalid",
    "measurable",
    "viewable",
    "in_view_ms",
    "engagements",
];

/// An impression as exports and `recent` show it: every stored field.
#[derive(Serialize, ToSchema)]
pub(crate) struct ImpressionRecord<'a> {
    impression_id: String,
    advertiser_id: String,
    campaign_id: String,
    ad_id: String,
    user_id: String,
    /// RFC 3339, UTC, milliseconds.
    timestamp: String,
    /// What `--store-ip` keeps of the address: by default its /24 (IPv4) or /48 (IPv6), with
    /// the rest zeroed; null with `none`.
    user_ip: Option<String>,
    #[schema(value_type = BTreeMap<String, String>)]
    user_data: &'a BTreeMap<String, String>,
    /// Exports only: clicked within the click look-back (`--click-lookback`, default 30 days)
    /// after the impression's UTC day.
    #[serde(skip_serializing_if = "Option::is_none")]
    clicked: Option<bool>,
    /// The viewer's user agent, as stored (at most 512 bytes).
    user_agent: Option<&'a str>,
    /// Why the impression is invalid traffic (`bot_user_agent`, `prefetch`,
    /// `denied_address`); null when it is valid (any copy of it is).
    invalid: Option<&'static str>,
    /// Exports only: what the impression's accepted view reports say.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    views: Option<ViewRecord>,
}

/// An impression's view measures, as exports give them.
#[derive(Serialize, ToSchema)]
pub(crate) struct ViewRecord {
    /// An accepted report said it was measured (`measurable` or `viewable`).
    measurable: bool,
    /// An accepted report said it was viewable.
    viewable: bool,
    /// The largest `in_view_ms` an accepted report carried; null when none did.
    in_view_ms: Option<u32>,
    /// The engagement kinds accepted reports named, sorted.
    engagements: Vec<&'static str>,
}

impl From<&ImpressionViews> for ViewRecord {
    fn from(views: &ImpressionViews) -> Self {
        Self {
            measurable: views.measurable(),
            viewable: views.viewable(),
            in_view_ms: views.in_view_ms,
            engagements: views.kinds.engagements(),
        }
    }
}

impl<'a> ImpressionRecord<'a> {
    /// `store_ip` applies to the answer too: a row stored before `--store-ip` was set (or
    /// before `adevents privacy truncate-addresses` ran) is never shown whole.
    pub(crate) fn new(
        impression: &'a Impression,
        clicked: Option<bool>,
        views: Option<ViewRecord>,
        store_ip: StoreIp,
    ) -> Self {
        Self {
            impression_id: impression.impression_id.to_string(),
            advertiser_id: impression.campaign.advertiser_id.to_string(),
            campaign_id: impression.campaign.campaign_id.to_string(),
            ad_id: impression.ad_id.to_string(),
            user_id: impression.user_id.to_string(),
            timestamp: impression.timestamp.to_string(),
            user_ip: store_ip.stored(impression.user_ip).map(|ip| ip.to_string()),
            user_data: impression.user_data.entries(),
            clicked,
            user_agent: impression.user_agent.as_ref().map(UserAgent::as_str),
            invalid: impression.invalid.map(InvalidReason::as_str),
            views,
        }
    }

    fn exported(row: &'a Exported, store_ip: StoreIp) -> Self {
        Self::new(
            &row.impression,
            Some(row.clicked),
            Some(ViewRecord::from(&row.views)),
            store_ip,
        )
    }
}

/// One page of an export, encoded.
fn encode(format: Format, page: &[Exported], store_ip: StoreIp) -> Result<Bytes, String> {
    let mut out = Vec::with_capacity(page.len() * 320);
    match format {
        Format::Ndjson => {
            for row in page {
                serde_json::to_writer(&mut out, &ImpressionRecord::exported(row, store_ip))
                    .map_err(|error| error.to_string())?;
                out.push(b'\n');
            }
        }
        Format::Csv => {
            let mut writer = csv::WriterBuilder::new()
                .has_headers(false)
                .terminator(csv::Terminator::CRLF)
                .from_writer(&mut out);
            for row in page {
                let record = ImpressionRecord::exported(row, store_ip);
                let user_data =
                    serde_json::to_string(record.user_data).map_err(|error| error.to_string())?;
                let views = ViewRecord::from(&row.views);
                let in_view_ms = views
                    .in_view_ms
                    .map(|ms| ms.to_string())
                    .unwrap_or_default();
                let engagements = views.engagements.join(" ");
                writer
                    .write_record(
                        [
                            record.impression_id.as_str(),
                            &record.advertiser_id,
                            &record.campaign_id,
                            &record.ad_id,
                            &record.user_id,
                            &record.timestamp,
                            record.user_ip.as_deref().unwrap_or(""),
                            &user_data,
                            if row.clicked { "true" } else { "false" },
                            record.user_agent.unwrap_or(""),
                            record.invalid.unwrap_or(""),
                            if views.measurable { "true" } else { "false" },
                            if views.viewable { "true" } else { "false" },
                            &in_view_ms,
                            &engagements,
                        ]
                        .map(inert_cell),
                    )
                    .map_err(|error| error.to_string())?;
            }
            writer.flush().map_err(|error| error.to_string())?;
        }
    }
    Ok(Bytes::from(out))
}

/// A CSV cell a spreadsheet will not run as a formula: one beginning with `=`, `+`, `-` or `@`
/// gets a leading `'`. Only `user_data` can begin so today (ids, times and addresses never
/// do), but every cell goes through here so a new column cannot forget it.
fn inert_cell(cell: &str) -> std::borrow::Cow<'_, [u8]> {
    match cell.as_bytes().first() {
        Some(b'=' | b'+' | b'-' | b'@') => format!("'{cell}").into_bytes().into(),
        _ => cell.as_bytes().into(),
    }
}

fn csv_header() -> Bytes {
    Bytes::from(format!("{}\r\n", CSV_COLUMNS.join(",")))
}

#[utoipa::path(
    get,
    path = "/v1/advertisers/{advertiser_id}/campaigns/{campaign_id}/impressions",
    tag = "queries",
    security(("bearer" = ["read"])),
    summary = "Every impression of the range, each id once, streamed as NDJSON or CSV.",
    description = "One record per impression (its earliest copy of the UTC day) with every stored \
        field and `clicked` (clicked within `--click-lookback`, default 30 days, after the \
        impression's UTC day). No order is promised. The body \
        is streamed as it is read: a store failure after the first byte ends the body early (an \
        unterminated chunked answer). CSV has a header row; `user_data` is one JSON column; a \
        cell beginning with `=`, `+`, `-` or `@` is prefixed with `'` (spreadsheet formulas).",
    params(
        ("advertiser_id" = inline(Id), Path),
        ("campaign_id" = inline(Id), Path),
        RangeQuery,
        ("format" = inline(Option<ExportFormat>), Query, description = "ndjson (default) or csv"),
    ),
    responses(
        (status = 200, description = "application/x-ndjson: one ImpressionRecord per line; or text/csv", content(
            (ImpressionRecord = "application/x-ndjson"),
            (String = "text/csv"),
        )),
        (status = 400, description = "Invalid input: the error names the field or parameter; nothing was stored", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable; retry after `Retry-After` seconds", body = ErrorAnswer),
    )
)]
pub(crate) async fn get_impressions(
    State(state): State<AppState>,
    Path((advertiser_id, campaign_id)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let campaign = campaign_key(&advertiser_id, &campaign_id)?;
    let params = Params::parse(query.as_deref(), &["from", "to", "tz", "format"])?;
    let range = params.range()?;
    let format = match params.get("format").unwrap_or("ndjson") {
        "ndjson" => Format::Ndjson,
        "csv" => Format::Csv,
        other => {
            return Err(ApiError::invalid(
                "format",
                format!("{} is not one of ndjson, csv", echo(other)),
            ));
        }
    };
    // Reading the clicks and the first page before answering puts a store outage into the
    // status (a 503), not into a cut body.
    let mut export: Export = state
        .queries
        .export(campaign, &range, chrono::Utc::now())
        .await?;
    let first = export.next_page().await?;
    let (pages, receiver) = mpsc::channel::<Result<Bytes, std::io::Error>>(2);
    tokio::spawn(produce(
        export,
        format,
        state.options.store_ip,
        first,
        pages,
    ));
    let body = Body::from_stream(futures::stream::unfold(
        receiver,
        |mut receiver| async move { receiver.recv().await.map(|page| (page, receiver)) },
    ));
    let content_type = match format {
        Format::Ndjson => "application/x-ndjson",
        Format::Csv => "text/csv; charset=utf-8; header=present",
    };
    let mut response = body.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// Encodes `first` and then every further page of the export into `pages`, until the end, a
/// failure, or a closed channel (the client went away).
async fn produce(
    mut export: Export,
    format: Format,
    store_ip: StoreIp,
    first: Option<Vec<Exported>>,
    pages: mpsc::Sender<Result<Bytes, std::io::Error>>,
) {
    let mut read_ahead = Some(first);
    let mut rows: u64 = 0;
    if format == Format::Csv && pages.send(Ok(csv_header())).await.is_err() {
        return;
    }
    loop {
        // Pages can filter to nothing (rows outside the range): notice a departed client
        // without waiting for a page to send.
        if pages.is_closed() {
            tracing::info!(rows, "export stopped: the client went away");
            return;
        }
        let next = match read_ahead.take() {
            Some(page) => Ok(page),
            None => export.next_page().await,
        };
        let page = match next {
            Ok(Some(page)) => page,
            Ok(None) => {
                tracing::debug!(rows, "export finished");
                return;
            }
            Err(error) => {
                tracing::warn!(rows, %error, "export cut short by a store failure");
                let _ = pages.send(Err(std::io::Error::other(error))).await;
                return;
            }
        };
        if page.is_empty() {
            continue;
        }
        rows += page.len() as u64;
        let encoded = encode(format, &page, store_ip)
            .map_err(|error| std::io::Error::other(format!("encoding an export: {error}")));
        if pages.send(encoded).await.is_err() {
            tracing::info!(rows, "export stopped: the client went away");
            return;
        }
    }
}

/// The newest impressions, newest first.
#[derive(Serialize, ToSchema)]
pub(crate) struct RecentAnswer<'a> {
    pub(crate) impressions: Vec<ImpressionRecord<'a>>,
}

#[utoipa::path(
    get,
    path = "/v1/advertisers/{advertiser_id}/campaigns/{campaign_id}/impressions/recent",
    tag = "queries",
    security(("bearer" = ["read"])),
    summary = "The newest impressions, newest first.",
    description = "Looks back at most --recent-lookback-days (7) UTC days before today, and at \
        tomorrow for clocks a little ahead. Each id once, at its newest row; each bucket's \
        newest 8 × limit rows are read at most, so an id re-sent with many timestamps can push \
        older ids out of the list.",
    params(
        ("advertiser_id" = inline(Id), Path),
        ("campaign_id" = inline(Id), Path),
        ("limit" = Option<usize>, Query, minimum = 1, maximum = 1000, description = "1 to 1000, default 10"),
    ),
    responses(
        (status = 200, description = "OK", body = RecentAnswer),
        (status = 400, description = "Invalid input: the error names the field or parameter; nothing was stored", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable; retry after `Retry-After` seconds", body = ErrorAnswer),
    )
)]
pub(crate) async fn get_recent_impressions(
    State(state): State<AppState>,
    Path((advertiser_id, campaign_id)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let campaign = campaign_key(&advertiser_id, &campaign_id)?;
    let params = Params::parse(query.as_deref(), &["limit"])?;
    let limit = params.limit(10, MAX_LIMIT)?;
    let impressions = state
        .queries
        .recent(campaign, limit, chrono::Utc::now())
        .await?;
    let answer = RecentAnswer {
        impressions: impressions
            .iter()
            .map(|impression| ImpressionRecord::new(impression, None, None, state.options.store_ip))
            .collect(),
    };
    Ok(Json(answer).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_a_spreadsheet_would_run_are_made_inert() {
        for (cell, inert) in [
            ("=HYPERLINK(\"x\")", "'=HYPERLINK(\"x\")"),
            ("+1", "'+1"),
            ("-1", "'-1"),
            ("@SUM(A1)", "'@SUM(A1)"),
            ("{\"a\":\"=1\"}", "{\"a\":\"=1\"}"),
            ("", ""),
        ] {
            assert_eq!(inert_cell(cell).as_ref(), inert.as_bytes(), "{cell}");
        }
    }
}

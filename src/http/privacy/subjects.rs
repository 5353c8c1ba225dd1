//! `GET /v1/privacy/subjects` (administrators): every stored record of one user, as NDJSON,
//! streamed an impression at a time (its copies, view reports and clicks), or of one site's
//! visitor, a visit partition at a time.

use super::{SubjectFields, subject_of};
use crate::domain::address::StoreIp;
use crate::domain::traffic::{InvalidReason, UserAgent};
use crate::http::AppState;
use crate::http::edge::error::{ApiError, ErrorAnswer};
use crate::http::edge::params::Params;
use crate::http::queries::export::ImpressionRecord;
use crate::privacy::access::{SubjectRecord, SubjectRecords};
use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use chrono::SecondsFormat;
use serde::Serialize;
use tokio::sync::mpsc;

/// One line of a subject access: a record and its `kind`.
#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum SubjectLine<'a> {
    Impression(ImpressionRecord<'a>),
    Click {
        advertiser_id: String,
        campaign_id: String,
        impression_id: String,
        ad_id: String,
        timestamp: String,
        user_agent: Option<&'a str>,
        invalid: Option<&'static str>,
    },
    ViewReport {
        advertiser_id: String,
        campaign_id: String,
        impression_id: String,
        /// The impression's time the report carried.
        timestamp: String,
        received: String,
        events: Vec<&'static str>,
        in_view_ms: Option<u32>,
        max_visible: Option<u8>,
        invalid: Option<&'static str>,
    },
    Conversion {
        advertiser_id: String,
        conversion_id: &'a str,
        action: &'a str,
        timestamp: String,
        /// When its first copy was stored.
        received: String,
        click_id: Option<String>,
        impression_id: Option<String>,
        /// A decimal string, with `currency`, or both `null`.
        value: Option<String>,
        currency: Option<&'static str>,
        /// `pending` until its attribution is decided, then `post_click`, `post_view` or
        /// `unattributed`.
        attribution: &'static str,
        /// The credited campaign, ad and impression (`null` unless attributed).
        campaign_id: Option<String>,
        ad_id: Option<String>,
        credited_impression_id: Option<String>,
    },
    Visit {
        site: String,
        timestamp: String,
        /// The beacon's features, by name.
        features: &'a std::collections::BTreeMap<String, String>,
        user_agent: Option<&'a str>,
        invalid: Option<&'static str>,
    },
}

fn line(record: &SubjectRecord, store_ip: StoreIp) -> SubjectLine<'_> {
    match record {
        SubjectRecord::Impression(impression) => {
            SubjectLine::Impression(ImpressionRecord::new(impression, None, None, store_ip))
        }
        SubjectRecord::Click {
            campaign,
            click,
            user_agent,
        } => SubjectLine::Click {
            advertiser_id: campaign.advertiser_id.to_string(),
            campaign_id: campaign.campaign_id.to_string(),
            impression_id: click.impression_id.to_string(),
            ad_id: click.ad_id.to_string(),
            timestamp: click.timestamp.to_string(),
            user_agent: user_agent.as_ref().map(UserAgent::as_str),
            invalid: click.invalid.map(InvalidReason::as_str),
        },
        SubjectRecord::ViewReport { campaign, report } => SubjectLine::ViewReport {
            advertiser_id: campaign.advertiser_id.to_string(),
            campaign_id: campaign.campaign_id.to_string(),
            impression_id: report.impression_id.to_string(),
            timestamp: report.impression_time.to_string(),
            received: report.received.to_rfc3339_opts(SecondsFormat::Millis, true),
            events: report.report.kinds.names(),
            in_view_ms: report.report.in_view_ms,
            max_visible: report.report.max_visible,
            invalid: report.invalid.map(InvalidReason::as_str),
        },
        SubjectRecord::Conversion {
            conversion,
            decided,
            attribution,
        } => {
            let inner = &conversion.conversion;
            SubjectLine::Conversion {
                advertiser_id: inner.advertiser_id.to_string(),
                conversion_id: inner.conversion_id.as_str(),
                action: inner.action.as_str(),
                timestamp: inner.timestamp.to_string(),
                received: conversion
                    .received
                    .to_rfc3339_opts(SecondsFormat::Millis, true),
                click_id: inner.click_id.map(|id| id.to_string()),
                impression_id: inner.impression_id.map(|id| id.to_string()),
                value: inner.value.map(|money| money.to_decimal_string()),
                currency: inner.value.map(|money| money.currency.code()),
                attribution: match (decided, attribution) {
                    (false, _) => "pending",
                    (true, None) => "unattributed",
                    (true, Some(credit)) => credit.kind.name(),
                },
                campaign_id: attribution.map(|credit| credit.campaign_id.to_string()),
                ad_id: attribution.map(|credit| credit.ad_id.to_string()),
                credited_impression_id: attribution.map(|credit| credit.impression_id.to_string()),
            }
        }
        SubjectRecord::Visit { site, visit } => SubjectLine::Visit {
            site: site.to_string(),
            timestamp: visit.timestamp.to_string(),
            features: visit.features.entries(),
            user_agent: visit.user_agent.as_ref().map(UserAgent::as_str),
            invalid: visit.invalid.map(InvalidReason::as_str),
        },
    }
}

#[utoipa::path(
    get,
    path = "/v1/privacy/subjects",
    tag = "privacy",
    summary = "Every stored record of a user or of a site's visitor, as NDJSON lines with a `kind`.",
    description = "Name a user (`user_id`, optionally `advertiser_id`) or a visitor (`site` and \
        `guid`). Kinds: `impression` (every stored field), `click`, `view_report`, `conversion` \
        (with its `attribution`: `pending`, `post_click`, `post_view` or `unattributed`); `visit` \
        (`site`, `timestamp`, `features`, `user_agent`, `invalid`) for a visitor; clicks and \
        visits carry the `user_agent` stored with them. Found through the index of \
        each user's events or the visitor index, so the cost follows the subject's events, not \
        the store's size. A user's access first waits until the serving process has indexed \
        what it acknowledged before the request (`503` past 5 s). Beacons sent under Global \
        Privacy Control keep no visitor and are never listed. Streamed: a store failure after \
        the first line cuts the body short.",
    params(
        ("user_id" = Option<String>, Query, description = "The ad servers' user id (or `site` and `guid`)"),
        ("advertiser_id" = Option<String>, Query, description = "Only this advertiser's records (with `user_id`)"),
        ("site" = Option<String>, Query, description = "A site, with `guid`: that visitor's beacons"),
        ("guid" = Option<String>, Query, description = "The visitor's id, with `site`"),
    ),
    security(("bearer" = ["admin"])),
    responses(
        (status = 200, description = "NDJSON, one record per line", content_type = "application/x-ndjson", body = String),
        (status = 400, description = "A parameter is invalid", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable", body = ErrorAnswer),
    )
)]
pub(crate) async fn get_subject(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let params = Params::parse(
        query.as_deref(),
        &["user_id", "advertiser_id", "site", "guid"],
    )?;
    let (subject, scope) = subject_of(SubjectFields {
        user_id: params.get("user_id"),
        advertiser_id: params.get("advertiser_id"),
        site: params.get("site"),
        guid: params.get("guid"),
    })?;
    let records = state.subject_access.records(&subject, scope).await?;
    let (pages, receiver) = mpsc::channel::<Result<Bytes, std::io::Error>>(2);
    tokio::spawn(produce(records, state.options.store_ip, pages));
    let body = Body::from_stream(futures::stream::unfold(
        receiver,
        |mut receiver| async move { receiver.recv().await.map(|page| (page, receiver)) },
    ));
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// Encodes each page of records into `pages` until the end, a failure, or a departed client.
async fn produce(
    mut records: SubjectRecords,
    store_ip: StoreIp,
    pages: mpsc::Sender<Result<Bytes, std::io::Error>>,
) {
    loop {
        let page = match records.next_page().await {
            Ok(Some(page)) => page,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(%error, "subject access cut short by a store failure");
                let _ = pages.send(Err(std::io::Error::other(error))).await;
                return;
            }
        };
        let mut encoded = Vec::new();
        for record in &page {
            if let Err(error) = serde_json::to_writer(&mut encoded, &line(record, store_ip)) {
                let _ = pages.send(Err(std::io::Error::other(error))).await;
                return;
            }
            encoded.push(b'\n');
        }
        if !encoded.is_empty() && pages.send(Ok(Bytes::from(encoded))).await.is_err() {
            return;
        }
    }
}

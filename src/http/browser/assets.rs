//! What the binary serves to browsers: the tracker script customers' pages include
//! (`/t.js`), the measurement script ads include (`/v.js`) and the dashboard (`/dashboard`
//! and its script and style), compiled in, so a deployment needs no CDN and no build step. The
//! dashboard's answers forbid every origin but the server's own for scripts, styles and
//! requests (`Content-Security-Policy: default-src 'self'`), so a feature value that slipped
//! into markup could still run nothing.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

const TRACKER: &str = include_str!("assets/t.js");
const MEASUREMENT: &str = include_str!("assets/v.js");
const DASHBOARD_PAGE: &str = include_str!("assets/dashboard.html");
const DASHBOARD_SCRIPT: &str = include_str!("assets/dashboard.js");
const DASHBOARD_STYLE: &str = include_str!("assets/dashboard.css");

const POLICY: &str =
    "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

fn asset(body: &'static str, content_type: &'static str, cache: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

fn dashboard_asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = asset(body, content_type, "no-cache");
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// The tracker script: `<script defer src="https://HOST/t.js" data-site="SITE"></script>`.
#[utoipa::path(
    get,
    path = "/t.js",
    tag = "beacons",
    summary = "The tracker script a page includes to send page-view beacons (at most 2 KB, 1 KB gzipped).",
    responses((status = 200, description = "The script", content_type = "text/javascript"))
)]
pub(crate) async fn tracker() -> Response {
    asset(
        TRACKER,
        "text/javascript; charset=utf-8",
        "public, max-age=3600",
    )
}

/// The measurement script, in an ad's markup: `<script async src="https://HOST/v.js"
/// data-tag="QUERY"></script>`, `QUERY` being the signed query of the ad's `/i` pixel. It reports
/// to `POST /v?QUERY` whether the ad could be measured, was viewable and was engaged with, and
/// for how long it was in view. What it decides, and why:
///
/// - *In view* is the MRC display rule at this instant: the page is visible
///   (`document.visibilityState`), the element has an area, and `IntersectionObserver`'s
///   `intersectionRatio` (its share of the element's pixels inside the viewport, which in a
///   cross-origin frame is the top-level one) is at least 0.5, or 0.3 from 242,500 px². The
///   observer has a threshold at every percent, so it calls back on every crossing.
/// - *Viewable*: a timer is started when the rule starts to hold and cancelled when it stops,
///   so the second (two with `data-format="video"`) is continuous; when it fires it checks the
///   stretch against `performance.now()` and waits out any remainder. `in_view_ms` is the
///   longest stretch so far by `performance.now()`, floored, at most 600,000: the viewable
///   report's is at least the second. `max_visible` is the largest percent seen while visible.
/// - *Engagement*: `hover` after 500 ms of pointer over the element (`pointerenter`, cancelled
///   by `pointerleave`); `click`, `expand`, `play`, `pause`, `complete` from an
///   `adevents:engage` event whose `detail` is one of them; anything else (a `hover` or a
///   `viewable` a creative sends included) is ignored. Each kind is reported once.
/// - *Reports*, at most 5: `measurable` at once (no waiting for the observer's first answer,
///   so a page closed at once is still measured); `viewable` when reached; engagement kinds
///   together 1 s after the first of a batch; and a last report when the page is hidden
///   (every time, while places remain) and at the end. Each carries the kinds not sent yet,
///   `in_view_ms` and `max_visible`. A report before the end is sent only with a new kind
///   and while two places remain, so the fifth is always there for the last one; a last
///   report with nothing new since the previous one is not sent.
/// - *The end*: `pagehide` (a page restored from the back-forward cache is not measured
///   again), or 590 s after the script started: the server's window opens at the pixel's
///   arrival, which comes before the script runs, so the last report is sent 10 s early to
///   land inside it. Nothing is sent 600 s after the start, whatever a throttled timer does.
/// - Nothing without `IntersectionObserver`, a `data-tag` or the element (`data-target`'s, or
///   the script's parent): an impression never reported measurable is not measurable. When
///   `data-target` names an element not parsed yet, it is looked up again at
///   `DOMContentLoaded`.
/// - Form bodies by `sendBeacon` (a `Blob` typed `application/x-www-form-urlencoded`, which
///   needs no preflight), or `fetch` with `keepalive` and no credentials when there is no
///   `sendBeacon` or it refuses. Nothing leaks into the host page: one closure, every callback
///   in `try`/`catch`.
#[utoipa::path(
    get,
    path = "/v.js",
    tag = "beacons",
    summary = "The measurement script an ad includes to report viewability and engagement to /v (at most 3 KB, 1.5 KB gzipped).",
    responses((status = 200, description = "The script", content_type = "text/javascript"))
)]
pub(crate) async fn measurement_script() -> Response {
    asset(
        MEASUREMENT,
        "text/javascript; charset=utf-8",
        "public, max-age=3600",
    )
}

/// The dashboard page.
#[utoipa::path(
    get,
    path = "/dashboard",
    tag = "operations",
    summary = "The dashboard: paste a read key, pick a campaign or a site, a range and a zone.",
    responses((status = 200, description = "The page", content_type = "text/html"))
)]
pub(crate) async fn dashboard() -> Response {
    dashboard_asset(DASHBOARD_PAGE, "text/html; charset=utf-8")
}

pub(crate) async fn dashboard_script() -> Response {
    dashboard_asset(DASHBOARD_SCRIPT, "text/javascript; charset=utf-8")
}

pub(crate) async fn dashboard_style() -> Response {
    dashboard_asset(DASHBOARD_STYLE, "text/css; charset=utf-8")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzipped(script: &str) -> usize {
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gzip.write_all(script.as_bytes()).expect("gzip");
        gzip.finish().expect("gzip").len()
    }

    #[test]
    fn the_tracker_stays_within_2_kb_and_1_kb_gzipped() {
        let gzipped = gzipped(TRACKER);
        println!("t.js: {} bytes, {gzipped} bytes gzipped", TRACKER.len());
        assert!(TRACKER.len() <= 2048, "t.js is {} bytes", TRACKER.len());
        assert!(gzipped <= 1024, "t.js is {gzipped} bytes gzipped");
    }

    #[test]
    fn the_measurement_script_stays_within_3_kb_and_1_5_kb_gzipped() {
        let gzipped = gzipped(MEASUREMENT);
        println!("v.js: {} bytes, {gzipped} bytes gzipped", MEASUREMENT.len());
        assert!(
            MEASUREMENT.len() <= 3072,
            "v.js is {} bytes",
            MEASUREMENT.len()
        );
        assert!(gzipped <= 1536, "v.js is {gzipped} bytes gzipped");
    }
}

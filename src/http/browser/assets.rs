//! What the binary serves to browsers: the tracker script customers' pages include
//! (`/t.js`) and the dashboard (`/dashboard` and its script and style), compiled in, so a
//! deployment needs no CDN and no build step. The dashboard's answers forbid every origin but
//! the server's own for scripts, styles and requests (`Content-Security-Policy: default-src
//! 'self'`), so a feature value that slipped into markup could still run nothing.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

const TRACKER: &str = include_str!("assets/t.js");
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

    #[test]
    fn the_tracker_stays_within_2_kb_and_1_kb_gzipped() {
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gzip.write_all(TRACKER.as_bytes()).expect("gzip");
        let gzipped = gzip.finish().expect("gzip").len();
        println!("t.js: {} bytes, {gzipped} bytes gzipped", TRACKER.len());
        assert!(TRACKER.len() <= 2048, "t.js is {} bytes", TRACKER.len());
        assert!(gzipped <= 1024, "t.js is {gzipped} bytes gzipped");
    }
}

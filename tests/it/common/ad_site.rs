//! An ad server's side of a page with ads, for the tests of `/v.js`: the publisher's page
//! with each ad's signed pixel and the measurement script, the script as adevents serves it,
//! and an endpoint that records every report on its way to adevents' `POST /v`, so a test
//! asserts both what the script sent and what the server made of it.

use super::browser::Browser;
use super::events::Campaign;
use super::tags::{Secret, pixel_query, signed};
use super::{TestServer, anonymous_http};
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use chrono::Utc;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use uuid::Uuid;

/// One report as the script sent it.
#[derive(Debug, Clone)]
pub struct Report {
    pub query: String,
    pub content_type: String,
    pub body: String,
    /// When it reached the ads' server.
    pub at: Instant,
    /// What adevents answered it, once it has.
    pub answer: Option<u16>,
}

impl Report {
    fn field(&self, name: &str) -> Option<String> {
        url::form_urlencoded::parse(self.body.as_bytes())
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.into_owned())
    }

    pub fn kinds(&self) -> Vec<String> {
        self.field("e")
            .unwrap_or_default()
            .split(',')
            .filter(|kind| !kind.is_empty())
            .map(str::to_owned)
            .collect()
    }

    fn number(&self, name: &str) -> u64 {
        self.field(name)
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {}", self.body))
    }

    pub fn in_view_ms(&self) -> u64 {
        self.number("in_view_ms")
    }

    pub fn max_visible(&self) -> u64 {
        self.number("max_visible")
    }
}

/// What the ads' server shares with its handlers.
struct SiteState {
    page: Mutex<String>,
    script: String,
    reports: Mutex<Vec<Report>>,
    adevents: String,
}

/// The ads' server: the publisher's page at `http://localhost:PORT/`, the script and the
/// reports' endpoint at `http://127.0.0.1:PORT` (another origin, as an ad's script is).
pub struct AdSite {
    page_origin: String,
    script_origin: String,
    state: Arc<SiteState>,
    _task: tokio::task::JoinHandle<()>,
}

impl AdSite {
    /// Starts the site with adevents' own `/v.js`, which must be public and served like `/t.js`.
    pub async fn start(server: &TestServer) -> Self {
        let response = anonymous_http()
            .get(server.url("/v.js"))
            .send()
            .await
            .expect("answered");
        assert_eq!(response.status(), StatusCode::OK, "GET /v.js with no key");
        let head = |name: header::HeaderName| {
            response
                .headers()
                .get(name)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned)
        };
        assert_eq!(
            head(header::CONTENT_TYPE).as_deref(),
            Some("text/javascript; charset=utf-8")
        );
        assert_eq!(
            head(header::CACHE_CONTROL).as_deref(),
            Some("public, max-age=3600")
        );
        assert_eq!(
            head(header::X_CONTENT_TYPE_OPTIONS).as_deref(),
            Some("nosniff")
        );
        let code = response.text().await.expect("the script");
        let state = Arc::new(SiteState {
            page: Mutex::new(String::new()),
            script: code,
            reports: Mutex::new(Vec::new()),
            adevents: server.url(""),
        });
        let app = axum::Router::new()
            .route("/", axum::routing::get(page))
            .route("/v.js", axum::routing::get(script))
            .route("/v", axum::routing::post(report))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("address").port();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            page_origin: format!("http://localhost:{port}"),
            script_origin: format!("http://127.0.0.1:{port}"),
            state,
            _task: task,
        }
    }

    /// Serves `ads` on the page, after `head` (markup of the publisher's own), and opens it.
    pub async fn open(&self, browser: &Browser, server: &TestServer, head: &str, ads: &[&Ad]) {
        let mut markup = String::new();
        for ad in ads {
            let query = ad.query.replace('&', "&amp;");
            markup.push_str(&format!(
                "<div id=\"{id}\" style=\"{style}\">\
                 <img src=\"{pixel}?{query}\" width=\"1\" height=\"1\" alt=\"\">\
                 <script async src=\"{script}/v.js\" data-tag=\"{query}\"{attributes}></script>\
                 </div>",
                id = ad.id,
                style = ad.style,
                pixel = server.url("/i"),
                script = self.script_origin,
                attributes = ad.attributes,
            ));
        }
        *self.state.page.lock().expect("page") = format!(
            "<!doctype html><html><head><title>news</title>{head}</head>\
             <body style=\"margin:0\"><h1>The news</h1>{markup}</body></html>"
        );
        browser
            .client
            .goto(&format!("{}/", self.page_origin))
            .await
            .expect("the page loads");
    }

    /// The reports of `ad` so far, oldest first.
    pub fn reports(&self, ad: &Ad) -> Vec<Report> {
        let needle = format!("imp={}", ad.impression);
        self.state
            .reports
            .lock()
            .expect("reports")
            .iter()
            .filter(|report| report.query.contains(&needle))
            .cloned()
            .collect()
    }

    /// Waits (up to 10 s) until adevents has answered every report of `ad`; asserts each was
    /// a `204`.
    pub async fn assert_accepted(&self, ad: &Ad) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let reports = loop {
            let reports = self.reports(ad);
            if reports.iter().all(|report| report.answer.is_some()) || Instant::now() >= deadline {
                break reports;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(
            reports.iter().all(|report| report.answer == Some(204)),
            "{reports:#?}"
        );
    }

    /// Waits (up to 10 s) until `ad` has `count` reports; returns them.
    pub async fn wait_for(&self, ad: &Ad, count: usize) -> Vec<Report> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let reports = self.reports(ad);
            if reports.len() >= count || Instant::now() >= deadline {
                assert!(
                    reports.len() >= count,
                    "{count} reports of {}, got {reports:#?}",
                    ad.id
                );
                return reports;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn page(State(state): State<Arc<SiteState>>) -> Html<String> {
    Html(state.page.lock().expect("page").clone())
}

async fn script(State(state): State<Arc<SiteState>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        state.script.clone(),
    )
        .into_response()
}

/// Records a report and passes it on to adevents as the browser sent it.
async fn report(
    State(state): State<Arc<SiteState>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let query = query.unwrap_or_default();
    let text = |name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let index = {
        let mut reports = state.reports.lock().expect("reports");
        reports.push(Report {
            query: query.clone(),
            content_type: text(header::CONTENT_TYPE),
            body: String::from_utf8_lossy(&body).into_owned(),
            at: Instant::now(),
            answer: None,
        });
        reports.len() - 1
    };
    let forwarded = anonymous_http()
        .post(format!("{}/v?{query}", state.adevents))
        .header(header::CONTENT_TYPE, text(header::CONTENT_TYPE))
        .header(header::USER_AGENT, text(header::USER_AGENT))
        .body(body)
        .send()
        .await;
    let status = match forwarded {
        Ok(answer) => answer.status(),
        Err(_) => StatusCode::BAD_GATEWAY,
    };
    state.reports.lock().expect("reports")[index].answer = Some(status.as_u16());
    status
}

/// An ad on the page: a box of the page's (`style`), its signed pixel and the script.
pub struct Ad {
    pub id: &'static str,
    pub impression: Uuid,
    pub query: String,
    pub style: String,
    /// More attributes of the script (`data-format`).
    pub attributes: &'static str,
}

impl Ad {
    pub fn new(campaign: &Campaign, secret: &Secret, id: &'static str, style: &str) -> Self {
        let impression = Uuid::new_v4();
        let query = pixel_query(
            campaign,
            impression,
            Uuid::new_v4(),
            Utc::now().timestamp_millis(),
            secret,
        );
        Self {
            id,
            impression,
            query: signed(secret, &query),
            style: style.to_owned(),
            attributes: "",
        }
    }
}

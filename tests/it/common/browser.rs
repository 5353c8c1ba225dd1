//! A real headless Chromium (Debian's `chromium` and `chromium-driver`, which `scripts/test`
//! installs when missing), driven over WebDriver, for the tests of what the server serves to
//! browsers: the tracker, the measurement script and the dashboard.

use fantoccini::actions::{InputSource, MouseActions, PointerAction};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use std::process::Stdio;
use std::time::Duration;

/// The desktop browser the headless one says it is: a headless one says so, and the server
/// rightly counts a headless browser's page views and impressions as invalid traffic.
pub const DESKTOP_CHROME: &str = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 \
    (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36";

/// The size of the browser's window; its viewport is a little smaller (its frame).
const WINDOW: (u32, u32) = (1280, 1000);

/// A headless Chromium behind its own chromedriver, gone when dropped.
pub struct Browser {
    pub client: Client,
    driver: tokio::process::Child,
}

impl Browser {
    pub async fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let driver = tokio::process::Command::new(chromedriver())
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group, with the browsers it starts: all stopped on drop.
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver runs (scripts/test installs chromium-driver)");
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".to_owned(),
            json!({
                "binary": chromium(),
                // --no-sandbox: CI runs as root, where Chromium's sandbox cannot start.
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage",
                         format!("--window-size={},{}", WINDOW.0, WINDOW.1),
                         format!("--user-agent={DESKTOP_CHROME}")],
            }),
        );
        let url = format!("http://127.0.0.1:{port}");
        let mut last_error = String::new();
        for _ in 0..50 {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(capabilities.clone())
                .connect(&url)
                .await
            {
                Ok(client) => {
                    return Self { client, driver };
                }
                Err(error) => last_error = error.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("no WebDriver session with Chromium: {last_error}");
    }

    /// The driver's process group: the driver and every browser process it started.
    fn stop_all(&self) {
        if let Some(pid) = self.driver.id() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .status();
        }
    }

    /// Runs `script` in the page and returns its value.
    pub async fn eval(&self, script: &str) -> Value {
        self.client
            .execute(script, Vec::new())
            .await
            .expect("script runs")
    }

    pub async fn type_into(&self, id: &str, text: &str) {
        let field = self
            .client
            .find(Locator::Id(id))
            .await
            .expect("field exists");
        field.clear().await.expect("cleared");
        field.send_keys(text).await.expect("typed");
    }

    pub async fn click(&self, id: &str) {
        self.client
            .find(Locator::Id(id))
            .await
            .expect("button exists")
            .click()
            .await
            .expect("clicked");
    }

    /// Moves the mouse onto the middle of the element `id`.
    pub async fn point_at(&self, id: &str) {
        let element = self
            .client
            .find(Locator::Id(id))
            .await
            .expect("element exists");
        let moves = MouseActions::new("mouse".to_owned()).then(PointerAction::MoveToElement {
            element,
            duration: None,
            x: 0.0,
            y: 0.0,
        });
        self.client
            .perform_actions(moves)
            .await
            .expect("pointer moved");
    }

    /// Minimizes the window: the page's `document.visibilityState` becomes `hidden`, as when
    /// its tab is left.
    pub async fn hide(&self) {
        self.client.minimize_window().await.expect("minimized");
    }

    /// Gives the window back its size, which shows the page again after [`Self::hide`].
    pub async fn show(&self) {
        self.client
            .set_window_size(WINDOW.0, WINDOW.1)
            .await
            .expect("restored");
    }

    /// Waits (up to 15 s) until `script` returns `expected`; returns what it last returned.
    pub async fn wait_for(&self, script: &str, expected: &Value) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            let value = self.eval(script).await;
            if &value == expected || tokio::time::Instant::now() >= deadline {
                return value;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// A test that fails mid-way leaves no browser running.
impl Drop for Browser {
    fn drop(&mut self) {
        self.stop_all();
    }
}

fn chromedriver() -> &'static str {
    if std::path::Path::new("/usr/bin/chromedriver").exists() {
        "/usr/bin/chromedriver"
    } else {
        "chromedriver"
    }
}

fn chromium() -> &'static str {
    "/usr/bin/chromium"
}

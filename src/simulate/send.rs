//! Posting simulated beacons to a server, several at once, retrying what a server asks to be
//! retried (429 and 503 after their `Retry-After`, connection failures), with a progress bar.

use super::traffic::SimulatedVisit;
use futures::{StreamExt, stream};
use indicatif::{ProgressBar, ProgressStyle};
use std::time::Duration;

const ATTEMPTS: u32 = 5;

/// Why sending stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    #[error("beacon {index} was refused ({status}): {body}")]
    Refused {
        index: usize,
        status: u16,
        body: String,
    },
    #[error("beacon {index} could not be sent after {ATTEMPTS} attempts: {error}")]
    Unreachable { index: usize, error: String },
}

/// Sends every visit as a form-posted beacon; stops at the first one the server refuses.
pub(crate) async fn send_all(
    client: &reqwest::Client,
    server: &str,
    site: &str,
    visits: &[SimulatedVisit],
    concurrency: usize,
    progress: bool,
) -> Result<(), SendError> {
    let bar = if progress {
        ProgressBar::new(visits.len() as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} sending beacons [{bar:40}] {pos}/{len} ({per_sec}, {eta} left)",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    let url = format!("{}/track", server.trim_end_matches('/'));
    let mut sends = stream::iter(visits.iter().enumerate())
        .map(|(index, visit)| {
            let body = visit.form_body(site);
            let (client, url) = (client.clone(), url.clone());
            async move { send_one(&client, &url, index, body).await }
        })
        .buffer_unordered(concurrency.max(1));
    while let Some(result) = sends.next().await {
        result?;
        bar.inc(1);
    }
    bar.finish();
    Ok(())
}

async fn send_one(
    client: &reqwest::Client,
    url: &str,
    index: usize,
    body: String,
) -> Result<(), SendError> {
    let mut last_error = String::new();
    let mut attempt = 0;
    while attempt < ATTEMPTS {
        let sent = client
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.clone())
            .send()
            .await;
        // Re-sending the same beacon (same timestamp) is harmless: it counts once.
        let wait = match sent {
            Ok(response) if response.status().is_success() => return Ok(()),
            // Rate-limited: the server says when; waiting is not a failure.
            Ok(response) if response.status() == reqwest::StatusCode::TOO_MANY_REQUESTS => {
                retry_after(&response).unwrap_or(Duration::from_secs(1))
            }
            Ok(response) if response.status().is_server_error() => {
                attempt += 1;
                last_error = format!("status {}", response.status());
                retry_after(&response).unwrap_or(Duration::from_millis(200 * u64::from(attempt)))
            }
            Ok(response) => {
                let status = response.status().as_u16();
                let body = response.text().await.unwrap_or_default();
                return Err(SendError::Refused {
                    index,
                    status,
                    body,
                });
            }
            Err(error) => {
                attempt += 1;
                last_error = error.to_string();
                Duration::from_millis(200 * u64::from(attempt))
            }
        };
        tokio::time::sleep(wait).await;
    }
    Err(SendError::Unreachable {
        index,
        error: last_error,
    })
}

/// The answer's `Retry-After`, in seconds (at most a minute: a simulation keeps moving).
fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    let seconds: u64 = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds.clamp(1, 60)))
}

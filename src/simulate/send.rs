//! Posting simulated beacons to a server, several at once, retrying what a server asks to be
//! retried (503, connection failures), with a progress bar.

use super::traffic::SimulatedVisit;
use futures::{StreamExt, stream};
use indicatif::{ProgressBar, ProgressStyle};
use std::time::Duration;

const ATTEMPTS: u32 = 5;

/// Why sending stopped.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
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
pub async fn send_all(
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
    for attempt in 1..=ATTEMPTS {
        let sent = client
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.clone())
            .send()
            .await;
        match sent {
            Ok(response) if response.status().is_success() => return Ok(()),
            Ok(response) if response.status().is_server_error() => {
                last_error = format!("status {}", response.status());
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
            Err(error) => last_error = error.to_string(),
        }
        // Re-sending the same beacon (same timestamp) is harmless: it counts once.
        tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
    }
    Err(SendError::Unreachable {
        index,
        error: last_error,
    })
}

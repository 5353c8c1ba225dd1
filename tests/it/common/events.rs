//! Building events and talking to the API the way an ad server or a dashboard does.

use super::{Backend, TestServer};
use adevents::domain::bucket::BucketCount;
use adevents::domain::campaign::CampaignSettings;
use adevents::domain::time::EventTime;
use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

/// A fresh campaign (and advertiser) per test: the isolation of a shared keyspace.
#[derive(Debug, Clone, Copy)]
pub struct Campaign {
    pub advertiser_id: Uuid,
    pub campaign_id: Uuid,
}

impl Campaign {
    pub fn fresh() -> Self {
        Self {
            advertiser_id: Uuid::new_v4(),
            campaign_id: Uuid::new_v4(),
        }
    }

    pub fn key(&self) -> adevents::domain::ids::CampaignKey {
        adevents::domain::ids::CampaignKey {
            advertiser_id: self.advertiser_id.into(),
            campaign_id: self.campaign_id.into(),
        }
    }

    pub fn path(&self) -> String {
        format!(
            "/v1/advertisers/{}/campaigns/{}",
            self.advertiser_id, self.campaign_id
        )
    }

    pub fn impression(&self, impression_id: Uuid, ad_id: Uuid, at: DateTime<Utc>) -> Value {
        json!({
            "impression_id": impression_id,
            "advertiser_id": self.advertiser_id,
            "campaign_id": self.campaign_id,
            "ad_id": ad_id,
            "user_id": Uuid::new_v4(),
            "timestamp": at.to_rfc3339(),
        })
    }

    pub fn click(&self, impression_id: Uuid, ad_id: Uuid, at: DateTime<Utc>) -> Value {
        json!({
            "impression_id": impression_id,
            "advertiser_id": self.advertiser_id,
            "campaign_id": self.campaign_id,
            "ad_id": ad_id,
            "timestamp": at.timestamp_millis(),
        })
    }
}

pub fn at(text: &str) -> DateTime<Utc> {
    text.parse().expect("valid RFC 3339 instant")
}

/// POSTs `body` as JSON and returns the status and the JSON answer.
pub async fn post(server: &TestServer, path: &str, body: &Value) -> (StatusCode, Value) {
    send_json(server, path, body)
        .await
        .expect("POST answered with JSON")
}

async fn send_json(
    server: &TestServer,
    path: &str,
    body: &Value,
) -> reqwest::Result<(StatusCode, Value)> {
    let response = super::http()
        .post(server.url(path))
        .json(body)
        .send()
        .await?;
    let status = response.status();
    Ok((status, response.json().await?))
}

/// POSTs every event in batches of `batch`, asserting each batch is accepted whole. A batch
/// that gets no answer within the client's timeout is sent again, as an ad server does (a
/// batch is idempotent): a node starved of CPU by the rest of the suite can hold a 5,000-event
/// batch that long, and the tests that load this way specify what is stored, not how fast.
pub async fn post_all(server: &TestServer, path: &str, events: &[Value], batch: usize) {
    for chunk in events.chunks(batch) {
        let body = Value::Array(chunk.to_vec());
        let mut attempts = 1;
        let (status, answer) = loop {
            match send_json(server, path, &body).await {
                Err(error) if error.is_timeout() && attempts < 3 => attempts += 1,
                answered => break answered.expect("POST answered with JSON"),
            }
        };
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(answer["accepted"], chunk.len(), "{answer}");
    }
}

/// GETs `path?query` and returns the status and the JSON answer.
pub async fn get(server: &TestServer, path: &str, query: &str) -> (StatusCode, Value) {
    let response = super::http()
        .get(server.url(&format!("{path}?{query}")))
        .send()
        .await
        .expect("GET answered");
    let status = response.status();
    (status, response.json().await.expect("JSON answer"))
}

/// The NDJSON export of `query` (which must be a 200), its records by impression id.
pub async fn export_records(
    server: &TestServer,
    campaign: &Campaign,
    query: &str,
) -> std::collections::HashMap<String, Value> {
    let response = super::http()
        .get(server.url(&format!("{}/impressions?{query}", campaign.path())))
        .send()
        .await
        .expect("export answered");
    assert_eq!(response.status(), StatusCode::OK);
    let body = response.text().await.expect("NDJSON");
    body.lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("an NDJSON record"))
        .map(|record| {
            let id = record["impression_id"].as_str().expect("an id").to_owned();
            (id, record)
        })
        .collect()
}

/// The summary, which must be a 200.
pub async fn summary(server: &TestServer, campaign: &Campaign, query: &str) -> Value {
    let (status, body) = get(server, &format!("{}/summary", campaign.path()), query).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// Gives `campaign` `buckets` partitions per day from `from` (`"always"`: from the start of
/// time), straight in the store: the API only schedules changes for the future.
pub async fn configure_buckets(backend: Backend, campaign: &Campaign, buckets: u16, from: &str) {
    let settings = CampaignSettings {
        buckets: BucketCount::new(buckets).expect("valid"),
        effective_from: if from == "always" {
            EventTime::earliest()
        } else {
            at(from)
        },
        daily_cap: None,
        total_cap: None,
        tz: chrono_tz::Tz::UTC,
        look_backs: adevents::domain::conversion::attribution::LookBacks::DEFAULT,
    };
    backend
        .store()
        .await
        .put_settings(
            &adevents::domain::owner::Owner::Campaign(campaign.key()),
            &settings,
        )
        .await
        .expect("arranged");
}

//! `GET /v1/advertisers/{advertiser_id}/campaigns/{campaign_id}/summary`.

use super::AppState;
use super::error::ApiError;
use super::params::{Params, campaign_key};
use crate::query::summary::{Counts, Grouping, campaign_summary};
use axum::Json;
use axum::extract::{Path, RawQuery, State};
use serde_json::{Value, json};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GroupBy {
    Day,
    Hour,
    Ad,
    None,
}

pub async fn get_summary(
    State(state): State<AppState>,
    Path((advertiser_id, campaign_id)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let campaign = campaign_key(&advertiser_id, &campaign_id)?;
    let params = Params::parse(query.as_deref(), &["from", "to", "tz", "group_by"])?;
    let range = params.range()?;
    let group_by = match params.get("group_by").unwrap_or("day") {
        "day" => GroupBy::Day,
        "hour" => GroupBy::Hour,
        "ad" => GroupBy::Ad,
        "none" => GroupBy::None,
        other => {
            return Err(ApiError::invalid(
                "group_by",
                format!("{other:?} is not one of day, hour, ad, none"),
            ));
        }
    };
    let summary = campaign_summary(
        state.store.as_ref(),
        &state.settings,
        campaign,
        &range,
        state.options.fan_out,
        state.options.billable_window,
        match group_by {
            GroupBy::Day => Grouping::Day,
            GroupBy::Hour => Grouping::Hour,
            GroupBy::Ad => Grouping::Ad,
            GroupBy::None => Grouping::None,
        },
    )
    .await?;
    let rows: Vec<Value> = match group_by {
        GroupBy::Day => summary
            .by_day
            .iter()
            .map(|(day, counts)| {
                with_counts(json!({"day": day.format("%Y-%m-%d").to_string()}), counts)
            })
            .collect(),
        GroupBy::Hour => summary
            .by_hour
            .iter()
            .map(|(hour, counts)| with_counts(json!({"hour": hour}), counts))
            .collect(),
        GroupBy::Ad => summary
            .by_ad
            .iter()
            .map(|(ad, counts)| with_counts(json!({"ad_id": ad.to_string()}), counts))
            .collect(),
        GroupBy::None => Vec::new(),
    };
    Ok(Json(json!({
        "advertiser_id": campaign.advertiser_id.to_string(),
        "campaign_id": campaign.campaign_id.to_string(),
        "from": range.from().format("%Y-%m-%d").to_string(),
        "to": range.to().format("%Y-%m-%d").to_string(),
        "tz": range.tz().name(),
        "group_by": match group_by { GroupBy::Day => "day", GroupBy::Hour => "hour", GroupBy::Ad => "ad", GroupBy::None => "none" },
        "totals": with_counts(json!({}), &summary.totals),
        // How many UTC days were answered from their rollup (the rest from raw events).
        "sealed_days": summary.sealed_days,
        "rows": rows,
    })))
}

fn with_counts(mut row: Value, counts: &Counts) -> Value {
    row["impressions"] = json!(counts.impressions);
    row["clicks"] = json!(counts.clicks);
    row["ctr"] = json!(counts.ctr());
    row["unique_users"] = json!(counts.unique_users);
    row["billable_impressions"] = json!(counts.billable_impressions);
    row
}

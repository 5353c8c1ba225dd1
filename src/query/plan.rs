//! Which partitions a campaign or site query reads: for each UTC day, every bucket of every
//! bucket count in force that day. Pure: no store, no clock.

use crate::domain::beacon::{SiteId, VisitPartition};
use crate::domain::campaign::SettingsHistory;
use crate::domain::ids::CampaignKey;
use crate::domain::partition::EventPartition;
use crate::domain::time::Day;
use chrono::Duration;

/// The partitions of each UTC day, in day order.
pub(crate) fn campaign_partitions(
    campaign: CampaignKey,
    days: impl Iterator<Item = Day>,
    history: &SettingsHistory,
    settings_staleness: Duration,
) -> Vec<(Day, Vec<EventPartition>)> {
    days.map(|day| {
        let partitions = history
            .buckets_to_read(day, settings_staleness)
            .ids()
            .map(|bucket| EventPartition {
                campaign,
                day,
                bucket,
            })
            .collect();
        (day, partitions)
    })
    .collect()
}

/// The beacon partitions of one site's UTC day.
pub(crate) fn visit_partitions(
    site: &SiteId,
    day: Day,
    history: &SettingsHistory,
    settings_staleness: Duration,
) -> Vec<VisitPartition> {
    history
        .buckets_to_read(day, settings_staleness)
        .ids()
        .map(|bucket| VisitPartition {
            site: site.clone(),
            day,
            bucket,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::bucket::BucketCount;
    use crate::domain::campaign::CampaignSettings;
    use crate::domain::ids::{AdvertiserId, CampaignId};
    use chrono::{DateTime, NaiveDate, Utc};
    use uuid::Uuid;

    #[test]
    fn each_day_reads_every_bucket_in_force_that_day() {
        let campaign = CampaignKey {
            advertiser_id: AdvertiserId::new(Uuid::new_v4()),
            campaign_id: CampaignId::new(Uuid::new_v4()),
        };
        let history = SettingsHistory::new(vec![CampaignSettings {
            buckets: BucketCount::new(8).expect("valid"),
            effective_from: "2026-11-02T12:00:00Z"
                .parse::<DateTime<Utc>>()
                .expect("valid"),
            daily_cap: None,
            total_cap: None,
            tz: chrono_tz::Tz::UTC,
            look_backs: crate::domain::conversion::attribution::LookBacks::DEFAULT,
        }]);
        let first = Day::new(NaiveDate::from_ymd_opt(2026, 11, 1).expect("valid"));
        let last = Day::new(NaiveDate::from_ymd_opt(2026, 11, 3).expect("valid"));

        let plan = campaign_partitions(campaign, first.through(last), &history, Duration::zero());

        let counts: Vec<usize> = plan
            .iter()
            .map(|(_, partitions)| partitions.len())
            .collect();
        assert_eq!(counts, [1, 8, 8]);
        assert!(
            plan.iter()
                .all(|(day, partitions)| partitions.iter().all(|p| p.day == *day))
        );
    }
}

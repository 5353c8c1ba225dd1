//! `adevents rollup`: rebuild the rollups of closed days from the raw tables, for one
//! campaign or one site, whatever their seal state (an operator's repair after a late import,
//! a bug fix, or days older than the background sealer's look-back).

use super::{CommandError, OpenedStore, embedded_migrations};
use crate::cli::RollupArgs;
use crate::domain::beacon::SiteId;
use crate::domain::ids::{AdvertiserId, CampaignId, CampaignKey};
use crate::domain::sealing::SealingRule;
use crate::domain::time::Day;
use crate::sealer::{Sealer, SealerOptions};
use crate::settings::SettingsCache;
use chrono::Utc;
use std::sync::Arc;
use std::time::Duration;

pub async fn rollup(args: RollupArgs) -> Result<(), CommandError> {
    if args.from > args.to {
        return Err(CommandError::Rollup("--from is after --to".into()));
    }
    let migrations = embedded_migrations()?;
    let opened = OpenedStore::open(&args.store, &migrations).await?;
    opened.prepare().await;
    let store = opened.into_store();
    let settings = Arc::new(SettingsCache::new(
        Arc::clone(&store) as Arc<dyn crate::store::SettingsStore>,
        Duration::from_secs(10),
    ));
    let options = SealerOptions {
        rule: SealingRule::new(args.rollup_grace),
        window: args.billable_window,
        // By hand (after a bug fix, say), a day is aggregated from its raw events, never from
        // slice aggregates the fixed code may not have made.
        open_days: None,
        retain_raw: args.store.retain_raw(),
        ..SealerOptions::default()
    }
    .with_site_day_bytes(args.seal_memory);
    let sealer = Sealer::new(store, settings, options, Default::default());
    let rule = sealer.rule();
    let first = Day::new(args.from);
    let days: Vec<Day> = first.through(Day::new(args.to)).collect();
    // The whole range before any of it: a refused run leaves nothing half done.
    let now = Utc::now();
    if let Some(open) = days.iter().find(|day| !rule.may_seal(**day, now)) {
        return Err(not_closed(*open, &args));
    }
    match (args.advertiser, args.campaign, &args.site) {
        (Some(advertiser), Some(campaign), _) => {
            let campaign = CampaignKey {
                advertiser_id: AdvertiserId::new(advertiser),
                campaign_id: CampaignId::new(campaign),
            };
            for day in days {
                if sealer.keeps_rollup(day, now) {
                    println!("kept the rollup of {day}: its raw events are past --retain-raw");
                    continue;
                }
                sealer.seal_campaign_day(campaign, day).await?;
                println!("sealed {day} of campaign {}", campaign.campaign_id);
            }
        }
        (_, _, Some(site)) => {
            let site = SiteId::parse(site)
                .map_err(|message| CommandError::Rollup(format!("--site {message}")))?;
            for day in days {
                if sealer.keeps_rollup(day, now) {
                    println!("kept the rollup of {day}: its beacons are past --retain-raw");
                    continue;
                }
                let beacons = sealer.seal_site_day(&site, day).await?;
                println!("sealed {day} of site {site} from {beacons} beacons");
            }
        }
        _ => {
            return Err(CommandError::Rollup(
                "name a campaign (--advertiser and --campaign) or a --site".into(),
            ));
        }
    }
    Ok(())
}

fn not_closed(day: Day, args: &RollupArgs) -> CommandError {
    CommandError::Rollup(format!(
        "{day} is not closed yet (it takes events until {} after it ends)",
        humantime::format_duration(args.rollup_grace)
    ))
}

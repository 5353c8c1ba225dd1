//! `adevents privacy …`, one-off commands after an upgrade, on either store, with progress on
//! standard output; each is idempotent, so rerunning it is how an interrupted run resumes.
//! `truncate-addresses`: the addresses stored before `--store-ip` (or under a laxer setting)
//! rewritten to what it keeps. `index-events`: the events stored before the subject index
//! indexed, so that erasure and subject access find them.

use super::{CommandError, OpenedStore, embedded_migrations};
use crate::cli::{IndexEventsArgs, PrivacyArgs, PrivacyCommand};
use crate::domain::address::StoreIp;
use crate::domain::time::Day;
use crate::event_index::EventIndexer;
use crate::privacy::backfill::index_day;
use crate::processes::ProcessRegistry;
use crate::settings::SettingsCache;
use crate::store::{AddressStore, RewriteReport, Store};
use chrono::Utc;
use std::sync::Arc;
use std::time::Duration;

/// Partition reads in flight at once while indexing.
const INDEX_CONCURRENCY: usize = 16;

pub async fn privacy(args: PrivacyArgs) -> Result<(), CommandError> {
    match args.command {
        PrivacyCommand::TruncateAddresses(args) => {
            let migrations = embedded_migrations()?;
            let store = OpenedStore::open(&args.store, &migrations)
                .await?
                .into_store();
            let mut print = |line: &str| println!("{line}");
            rewrite_addresses(store.as_ref(), args.store_ip, &mut print).await?;
            Ok(())
        }
        PrivacyCommand::IndexEvents(args) => index_events(args).await,
    }
}

async fn index_events(args: IndexEventsArgs) -> Result<(), CommandError> {
    let to = args.to.unwrap_or_else(|| Utc::now().date_naive());
    if args.from > to {
        return Err(CommandError::Options("--from is after --to".into()));
    }
    let migrations = embedded_migrations()?;
    let opened = OpenedStore::open(&args.store, &migrations).await?;
    opened.prepare().await;
    let mut print = |line: &str| println!("{line}");
    index_stored_events(
        opened.into_store(),
        Day::new(args.from),
        Day::new(to),
        &mut print,
    )
    .await
}

/// What `index-events` does once its store is open: indexes every event stored from `from`
/// to `to` (UTC days, both included), telling `say` how each day went.
pub async fn index_stored_events(
    store: Arc<dyn Store>,
    from: Day,
    to: Day,
    say: &mut (dyn FnMut(&str) + Send),
) -> Result<(), CommandError> {
    let settings = SettingsCache::new(
        Arc::clone(&store) as Arc<dyn crate::store::SettingsStore>,
        Duration::from_secs(10),
    );
    // This process serves nothing and reports nowhere: the registry only tracks its flushes.
    let registry = Arc::new(ProcessRegistry::new(
        Arc::clone(&store) as Arc<dyn crate::store::ProcessStore>
    ));
    let indexer = EventIndexer::new(
        Arc::clone(&store) as Arc<dyn crate::store::EventIndexStore>,
        Arc::clone(&store) as Arc<dyn crate::store::SubjectStore>,
        registry,
    );
    for day in from.through(to) {
        let done = index_day(store.as_ref(), &settings, &indexer, day, INDEX_CONCURRENCY).await?;
        say(&format!(
            "{day}: {} events of {} campaigns, {} visitors of {} sites indexed (to resume, --from {day})",
            done.events, done.campaigns, done.visitors, done.sites
        ));
    }
    say(&format!(
        "done: every event stored from {from} to {to} is indexed"
    ));
    Ok(())
}
/// What the command does once its store is open: rewrites every stored address under
/// `policy`, telling `say` its progress and its outcome.
pub async fn rewrite_addresses(
    store: &dyn AddressStore,
    policy: StoreIp,
    say: &mut (dyn FnMut(&str) + Send),
) -> Result<RewriteReport, CommandError> {
    if policy == StoreIp::Full {
        say("--store-ip full keeps every address as it is: nothing to rewrite");
        return Ok(RewriteReport::default());
    }
    let mut progress = |report: RewriteReport| say(&line("so far", policy, &report));
    let report = store.rewrite_addresses(policy, &mut progress).await?;
    say(&line("done", policy, &report));
    Ok(report)
}

fn line(stage: &str, policy: StoreIp, report: &RewriteReport) -> String {
    format!(
        "{stage}: {} impressions read, {} addresses rewritten (--store-ip {policy})",
        report.rows_seen, report.rows_rewritten
    )
}

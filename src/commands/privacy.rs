//! `adevents privacy truncate-addresses`: the addresses stored before `--store-ip` (or under a
//! laxer setting) rewritten to what it keeps, on either store, a progress line per page of
//! rows on standard output. Idempotent: rerunning it is how an interrupted run resumes.

use super::{CommandError, OpenedStore, embedded_migrations};
use crate::cli::{PrivacyArgs, PrivacyCommand};
use crate::domain::address::StoreIp;
use crate::store::{AddressStore, RewriteReport};

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
    }
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

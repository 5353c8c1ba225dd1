//! How an impression's stored reports join into its measures: which reports count (valid,
//! from the client the ad was rendered for, inside the window, among its client's first five)
//! and what they say together.

use super::StoredReport;
use super::client::{AgentTag, Client, Network, ReportId};
use super::report::{ViewKind, ViewKinds};
use chrono::{DateTime, TimeDelta, Utc};
use std::collections::{BTreeMap, HashMap};

/// The reports one client may have accepted per impression.
pub(crate) const PLACES_PER_CLIENT: usize = 5;

/// What the impression's stored copies say about where and when it was shown: the clients its
/// copies carry, its time (the earliest copy's, where the impression counts) and the latest
/// arrival of its pixel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServedTo {
    networks: Vec<Network>,
    agents: Vec<AgentTag>,
    at: Option<DateTime<Utc>>,
    pixel_at: Option<DateTime<Utc>>,
}

impl ServedTo {
    /// Adds one stored copy of the impression (invalid copies too: the client that rendered
    /// the ad is who it is, whatever the traffic rules say of it).
    pub(crate) fn add_copy(
        &mut self,
        at: DateTime<Utc>,
        client: Client,
        pixel_at: Option<DateTime<Utc>>,
    ) {
        self.at = Some(self.at.map_or(at, |earliest| earliest.min(at)));
        if let Some(network) = client.network
            && !self.networks.contains(&network)
        {
            self.networks.push(network);
        }
        if let Some(agent) = client.agent
            && !self.agents.contains(&agent)
        {
            self.agents.push(agent);
        }
        self.pixel_at = self.pixel_at.max(pixel_at);
    }

    /// Whether `client` may be the one the ad was rendered for: the same network and user
    /// agent as a copy that carries them.
    fn admits(&self, client: &Client) -> bool {
        let network_ok = self.networks.is_empty()
            || client
                .network
                .is_some_and(|network| self.networks.contains(&network));
        let agent_ok = self.agents.is_empty()
            || client
                .agent
                .is_some_and(|agent| self.agents.contains(&agent));
        network_ok && agent_ok
    }
}

/// How long after an impression (or its pixel's arrival, when later) its reports count, and
/// how early a report may come (the clock skew events are allowed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ViewWindow {
    length: TimeDelta,
}

impl Default for ViewWindow {
    /// Ten minutes, the window of the Adform pipeline this measure follows.
    fn default() -> Self {
        Self {
            length: TimeDelta::minutes(10),
        }
    }
}

impl ViewWindow {
    pub(crate) fn new(length: std::time::Duration) -> Self {
        Self {
            length: TimeDelta::from_std(length).unwrap_or(TimeDelta::minutes(10)),
        }
    }

    /// Whether a report received at `received` is inside the window of an impression at `t`
    /// whose pixel arrived at `pixel_at`.
    fn admits(
        &self,
        t: DateTime<Utc>,
        pixel_at: Option<DateTime<Utc>>,
        received: DateTime<Utc>,
    ) -> bool {
        let opens = t - crate::domain::time::MAX_FUTURE_SKEW;
        let closes = t.max(pixel_at.unwrap_or(t)) + self.length;
        opens <= received && received <= closes
    }
}

/// One impression's measures from its accepted reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImpressionViews {
    pub(crate) kinds: ViewKinds,
    /// The largest `in_view_ms` an accepted report carried.
    pub(crate) in_view_ms: Option<u32>,
}

impl ImpressionViews {
    pub(crate) fn measurable(&self) -> bool {
        self.kinds.measurable()
    }

    pub(crate) fn viewable(&self) -> bool {
        self.kinds.has(ViewKind::Viewable)
    }

    pub(crate) fn engaged(&self) -> bool {
        self.kinds.engaged()
    }
}

/// Joins an impression's stored reports: a report counts when it is valid, from a client the
/// impression admits, inside the view window, and one of its client's first
/// [`PLACES_PER_CLIENT`] distinct reports by (first arrival, id).
pub(crate) fn join(
    served: &ServedTo,
    reports: &[StoredReport],
    window: ViewWindow,
) -> ImpressionViews {
    // Each distinct report at its first arrival; valid if any copy is.
    let mut distinct: BTreeMap<ReportId, StoredReport> = BTreeMap::new();
    for report in reports {
        distinct
            .entry(report.id)
            .and_modify(|seen| {
                let invalid = crate::domain::traffic::any_valid([seen.invalid, report.invalid]);
                if report.received < seen.received {
                    *seen = *report;
                }
                seen.invalid = invalid;
            })
            .or_insert(*report);
    }
    let mut by_client: HashMap<Client, Vec<&StoredReport>> = HashMap::new();
    for report in distinct.values().filter(|report| {
        report.invalid.is_none()
            && served.admits(&report.client)
            // From the impression's own time, as stored: the signed query's `t` is the one
            // an ad server meant, but only the stored one is what the impression counts at.
            && window.admits(
                served.at.unwrap_or(report.impression_time.instant()),
                served.pixel_at,
                report.received,
            )
    }) {
        by_client.entry(report.client).or_default().push(report);
    }
    let mut views = ImpressionViews::default();
    for mut reports in by_client.into_values() {
        reports.sort_by_key(|report| (report.received, report.id));
        for report in reports.into_iter().take(PLACES_PER_CLIENT) {
            views.kinds = views.kinds.union(report.report.kinds);
            views.in_view_ms = views.in_view_ms.max(report.report.in_view_ms);
        }
    }
    views
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::ImpressionId;
    use crate::domain::time::EventTime;
    use crate::domain::traffic::UserAgent;
    use crate::domain::view::ViewReport;
    use uuid::Uuid;

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().expect("time")
    }

    fn viewer() -> Client {
        Client::of(
            Some("198.51.100.20".parse().expect("ip")),
            UserAgent::new("Mozilla/5.0 viewer").as_ref(),
        )
    }

    fn stored(client: Client, kinds: &[ViewKind], received: &str, in_view: u32) -> StoredReport {
        let report = ViewReport {
            kinds: kinds
                .iter()
                .fold(ViewKinds::default(), |set, kind| set.with(*kind)),
            in_view_ms: Some(in_view),
            max_visible: None,
        };
        StoredReport {
            impression_id: ImpressionId::new(Uuid::from_u128(1)),
            impression_time: EventTime::from_stored(at("2026-11-28T10:00:00Z")),
            id: ReportId::of(&client, &report),
            received: at(received),
            client,
            report,
            invalid: None,
        }
    }

    fn served_to(client: Client) -> ServedTo {
        let mut served = ServedTo::default();
        served.add_copy(
            at("2026-11-28T10:00:00Z"),
            client,
            Some(at("2026-11-28T10:00:01Z")),
        );
        served
    }

    #[test]
    fn only_the_rendering_client_inside_the_window_counts() {
        let window = ViewWindow::default();
        let served = served_to(viewer());
        let seen = stored(
            viewer(),
            &[ViewKind::Viewable],
            "2026-11-28T10:00:05Z",
            1500,
        );
        let views = join(&served, &[seen], window);
        assert!(views.viewable() && views.measurable() && !views.engaged());
        assert_eq!(views.in_view_ms, Some(1500));

        let stranger = Client::of(Some("192.0.2.1".parse().expect("ip")), None);
        let forged = stored(
            stranger,
            &[ViewKind::Viewable],
            "2026-11-28T10:00:05Z",
            600_000,
        );
        assert_eq!(join(&served, &[forged], window), ImpressionViews::default());

        let late = stored(viewer(), &[ViewKind::Viewable], "2026-11-28T10:10:02Z", 1);
        assert!(!join(&served, &[late], window).viewable());
        let early = stored(viewer(), &[ViewKind::Viewable], "2026-11-28T09:49:59Z", 1);
        assert!(!join(&served, &[early], window).viewable());

        // An impression that carries no client (an ad server's POST without them) admits any.
        assert!(join(&ServedTo::default(), &[forged], window).viewable());
    }

    #[test]
    fn five_places_per_client_taken_by_first_arrival_and_a_retry_takes_none() {
        let window = ViewWindow::default();
        let served = served_to(viewer());
        let mut reports: Vec<StoredReport> = (0..5)
            .map(|second| {
                stored(
                    viewer(),
                    &[ViewKind::Measurable],
                    &format!("2026-11-28T10:00:0{second}Z"),
                    second,
                )
            })
            .collect();
        let sixth = stored(viewer(), &[ViewKind::Play], "2026-11-28T10:00:09Z", 9);
        reports.push(sixth);
        assert!(!join(&served, &reports, window).engaged());

        // The first report arrives again later (a retry): still its first arrival, no place.
        let mut retried = reports[0];
        retried.received = at("2026-11-28T10:00:08Z");
        reports.push(retried);
        assert!(!join(&served, &reports, window).engaged());

        // Its copy that arrived first is what counts, whichever row is read first.
        reports.reverse();
        assert!(!join(&served, &reports, window).engaged());
        assert_eq!(join(&served, &reports, window).in_view_ms, Some(4));
    }

    #[test]
    fn the_window_runs_from_the_pixel_when_it_came_later() {
        let mut served = ServedTo::default();
        served.add_copy(
            at("2026-11-28T10:00:00Z"),
            viewer(),
            Some(at("2026-11-28T10:30:00Z")),
        );
        let report = stored(
            viewer(),
            &[ViewKind::Viewable],
            "2026-11-28T10:35:00Z",
            1000,
        );
        assert!(join(&served, &[report], ViewWindow::default()).viewable());
    }

    #[test]
    fn the_window_runs_from_the_impressions_stored_time_not_the_reports_query() {
        // An ad server that signed its tag at 10:00 and posted the impression at 10:20.
        let mut served = ServedTo::default();
        served.add_copy(at("2026-11-28T10:20:00Z"), viewer(), None);
        let report = |received: &str| stored(viewer(), &[ViewKind::Viewable], received, 1000);
        let window = ViewWindow::default();
        assert!(join(&served, &[report("2026-11-28T10:25:00Z")], window).viewable());
        assert!(!join(&served, &[report("2026-11-28T10:30:01Z")], window).viewable());
        // Its earliest copy's time, where it counts.
        served.add_copy(at("2026-11-28T10:05:00Z"), viewer(), None);
        assert!(!join(&served, &[report("2026-11-28T10:25:00Z")], window).viewable());
    }
}

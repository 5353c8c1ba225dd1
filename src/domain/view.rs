//! Viewability and engagement (docs/API.md, "Viewability and engagement"): what a browser's
//! report says, which client sent it, and how an impression's stored reports join into its
//! measures. The join is a pure function of stored rows, so it answers the same in any arrival
//! order, on any process, in a seal, a slice aggregate or a raw read.

use super::ids::ImpressionId;
use super::time::EventTime;
use super::traffic::{InvalidReason, UserAgent};
use chrono::{DateTime, TimeDelta, Utc};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use uuid::Uuid;

/// What a report can say: measured, viewable, or one of the engagement kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewKind {
    Measurable,
    Viewable,
    Hover,
    Click,
    Expand,
    Play,
    Pause,
    Complete,
}

impl ViewKind {
    /// Every kind, in the order of its bit.
    const ALL: [Self; 8] = [
        Self::Measurable,
        Self::Viewable,
        Self::Hover,
        Self::Click,
        Self::Expand,
        Self::Play,
        Self::Pause,
        Self::Complete,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Measurable => "measurable",
            Self::Viewable => "viewable",
            Self::Hover => "hover",
            Self::Click => "click",
            Self::Expand => "expand",
            Self::Play => "play",
            Self::Pause => "pause",
            Self::Complete => "complete",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == text)
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A set of kinds, one bit each (the stored form).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ViewKinds(u8);

impl ViewKinds {
    /// The kinds that are engagement: every one but `measurable` and `viewable`.
    const ENGAGEMENT: u8 = !0b11;

    pub(crate) fn from_bits(bits: u8) -> Self {
        Self(bits)
    }

    pub(crate) fn bits(self) -> u8 {
        self.0
    }

    pub(crate) fn with(self, kind: ViewKind) -> Self {
        Self(self.0 | kind.bit())
    }

    pub(crate) fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    pub(crate) fn has(self, kind: ViewKind) -> bool {
        self.0 & kind.bit() != 0
    }

    /// A `viewable` report also says the impression was measured.
    pub(crate) fn measurable(self) -> bool {
        self.has(ViewKind::Measurable) || self.has(ViewKind::Viewable)
    }

    pub(crate) fn engaged(self) -> bool {
        self.0 & Self::ENGAGEMENT != 0
    }

    /// The engagement kinds, sorted by name (as exports list them).
    pub(crate) fn engagements(self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = ViewKind::ALL
            .into_iter()
            .filter(|kind| kind.bit() & Self::ENGAGEMENT != 0 && self.has(*kind))
            .map(ViewKind::as_str)
            .collect();
        names.sort_unstable();
        names
    }
}

/// The longest in-view time a report may carry: the whole view window.
pub(crate) const MAX_IN_VIEW_MS: u32 = 600_000;

/// One problem with a report's body, naming its field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewReportError {
    pub(crate) field: String,
    pub(crate) message: String,
}

impl ViewReportError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// What one report says: its kinds, the longest continuous time in view so far and the
/// largest share of the ad seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ViewReport {
    pub(crate) kinds: ViewKinds,
    pub(crate) in_view_ms: Option<u32>,
    pub(crate) max_visible: Option<u8>,
}

impl ViewReport {
    /// A report from its body's fields (`e`, `in_view_ms`, `max_visible`). Every problem is
    /// named: an unknown field or kind, a repeated field, a number out of range, a missing
    /// `e` (which may be empty only beside `in_view_ms`).
    pub(crate) fn from_fields(fields: Vec<(String, String)>) -> Result<Self, Vec<ViewReportError>> {
        let mut errors = Vec::new();
        let (mut kinds, mut in_view, mut visible) = (None, None, None);
        for (name, value) in fields {
            let slot = match name.as_str() {
                "e" => &mut kinds,
                "in_view_ms" => &mut in_view,
                "max_visible" => &mut visible,
                _ => {
                    errors.push(ViewReportError::new(
                        super::echo::cut(&name, super::echo::MAX_ECHO_CHARS),
                        "is not a field of a view report (e, in_view_ms, max_visible)",
                    ));
                    continue;
                }
            };
            if slot.is_some() {
                errors.push(ViewReportError::new(name, "is given more than once"));
            } else {
                *slot = Some(value);
            }
        }
        let in_view_ms = in_view
            .map(|text| bounded(&text, MAX_IN_VIEW_MS))
            .transpose()
            .map_err(|message| errors.push(ViewReportError::new("in_view_ms", message)))
            .ok()
            .flatten();
        let max_visible = visible
            .map(|text| bounded(&text, 100))
            .transpose()
            .map_err(|message| errors.push(ViewReportError::new("max_visible", message)))
            .ok()
            .flatten()
            .and_then(|percent| u8::try_from(percent).ok());
        let mut parsed = ViewKinds::default();
        match kinds {
            None => errors.push(ViewReportError::new("e", "is required")),
            Some(list) => {
                for name in list.split(',').filter(|name| !name.is_empty()) {
                    match ViewKind::parse(name) {
                        Some(kind) => parsed = parsed.with(kind),
                        None => errors.push(ViewReportError::new(
                            "e",
                            format!(
                                "names an unknown kind {} (measurable, viewable, hover, click, \
                                 expand, play, pause, complete)",
                                super::echo::echo(name)
                            ),
                        )),
                    }
                }
                if list.trim().is_empty() && in_view_ms.is_none() && errors.is_empty() {
                    errors.push(ViewReportError::new(
                        "e",
                        "may be empty only when in_view_ms is given",
                    ));
                }
            }
        }
        if errors.is_empty() {
            Ok(Self {
                kinds: parsed,
                in_view_ms,
                max_visible,
            })
        } else {
            Err(errors)
        }
    }
}

/// A decimal integer from 0 to `max`.
fn bounded(text: &str, max: u32) -> Result<u32, String> {
    let message = || format!("must be an integer from 0 to {max}");
    if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) || text.len() > 9 {
        return Err(message());
    }
    text.parse::<u32>()
        .ok()
        .filter(|value| *value <= max)
        .ok_or_else(message)
}

/// A client's network: IPv4 /24 or IPv6 /48, the part of an address that stays the same for
/// one viewer across requests and says little about who they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Network {
    V4([u8; 3]),
    V6([u8; 6]),
}

impl Network {
    pub(crate) fn of(address: IpAddr) -> Self {
        match address {
            IpAddr::V4(ip) => {
                let [a, b, c, _] = ip.octets();
                Self::V4([a, b, c])
            }
            IpAddr::V6(ip) => match ip.to_ipv4_mapped() {
                Some(mapped) => Self::of(IpAddr::V4(mapped)),
                None => {
                    let octets = ip.octets();
                    let mut prefix = [0; 6];
                    prefix.copy_from_slice(&octets[..6]);
                    Self::V6(prefix)
                }
            },
        }
    }

    /// The stored form: 3 bytes for IPv4, 6 for IPv6.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            Self::V4(prefix) => prefix,
            Self::V6(prefix) => prefix,
        }
    }

    pub(crate) fn from_bytes(bytes: &[u8]) -> Option<Self> {
        match bytes.len() {
            3 => Some(Self::V4(bytes.try_into().ok()?)),
            6 => Some(Self::V6(bytes.try_into().ok()?)),
            _ => None,
        }
    }
}

/// A user agent as a stable 64-bit tag: enough to tell one browser build from another, at a
/// fixed 8 bytes per row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AgentTag(i64);

impl AgentTag {
    pub(crate) fn of(agent: &UserAgent) -> Self {
        Self(xxhash_rust::xxh3::xxh3_64(agent.as_str().as_bytes()) as i64)
    }

    pub(crate) fn from_stored(tag: i64) -> Self {
        Self(tag)
    }

    pub(crate) fn stored(self) -> i64 {
        self.0
    }
}

/// Who sent a request, as far as the join tells clients apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Client {
    pub(crate) network: Option<Network>,
    pub(crate) agent: Option<AgentTag>,
}

impl Client {
    pub(crate) fn of(address: Option<IpAddr>, agent: Option<&UserAgent>) -> Self {
        Self {
            network: address.map(Network::of),
            agent: agent.map(AgentTag::of),
        }
    }
}

/// A report's identity within its impression: its client and its parsed body. A report sent
/// again is the same report; another body or another client is another one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReportId(Uuid);

impl ReportId {
    pub(crate) fn of(client: &Client, report: &ViewReport) -> Self {
        let mut bytes = Vec::with_capacity(32);
        let network = client.network.as_ref().map_or(&[][..], Network::as_bytes);
        bytes.push(network.len() as u8);
        bytes.extend_from_slice(network);
        bytes.extend(client.agent.map_or([0; 9], |agent| {
            let mut tagged = [1; 9];
            tagged[1..].copy_from_slice(&agent.0.to_be_bytes());
            tagged
        }));
        bytes.push(report.kinds.bits());
        bytes.extend(report.in_view_ms.map_or(u64::MAX, u64::from).to_be_bytes());
        bytes.push(report.max_visible.map_or(u8::MAX, |percent| percent));
        Self(Uuid::from_u128(xxhash_rust::xxh3::xxh3_128(&bytes)))
    }

    pub(crate) fn from_stored(id: Uuid) -> Self {
        Self(id)
    }

    pub(crate) fn as_uuid(&self) -> Uuid {
        self.0
    }
}

/// A report as the browser sent it, signed with its impression's pixel query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewReportEvent {
    pub(crate) campaign: super::ids::CampaignKey,
    pub(crate) impression_id: ImpressionId,
    /// The impression's `t`: the report is stored in the impression's partition.
    pub(crate) impression_time: EventTime,
    pub(crate) received: DateTime<Utc>,
    pub(crate) client: Client,
    pub(crate) report: ViewReport,
    pub(crate) invalid: Option<InvalidReason>,
}

impl ViewReportEvent {
    pub(crate) fn id(&self) -> ReportId {
        ReportId::of(&self.client, &self.report)
    }
}

/// One stored copy of a report: a report received twice (a retry on another process) is two
/// rows of one id, and counts at its first arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredReport {
    pub(crate) impression_id: ImpressionId,
    pub(crate) impression_time: EventTime,
    pub(crate) id: ReportId,
    pub(crate) received: DateTime<Utc>,
    pub(crate) client: Client,
    pub(crate) report: ViewReport,
    pub(crate) invalid: Option<InvalidReason>,
}

/// The reports one client may have accepted per impression.
pub(crate) const PLACES_PER_CLIENT: usize = 5;

/// What the impression's stored copies say about where it was shown: the clients its copies
/// carry and the latest arrival of its pixel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServedTo {
    networks: Vec<Network>,
    agents: Vec<AgentTag>,
    pixel_at: Option<DateTime<Utc>>,
}

impl ServedTo {
    /// Adds one stored copy of the impression (invalid copies too: the client that rendered
    /// the ad is who it is, whatever the traffic rules say of it).
    pub(crate) fn add_copy(&mut self, client: Client, pixel_at: Option<DateTime<Utc>>) {
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
        let opens = t - super::time::MAX_FUTURE_SKEW;
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
                let invalid = super::traffic::any_valid([seen.invalid, report.invalid]);
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
            && window.admits(
                report.impression_time.instant(),
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

/// The additive view measures of any set of valid impressions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ViewCounts {
    pub(crate) measurable: u64,
    pub(crate) viewable: u64,
    pub(crate) engaged: u64,
    /// The sum of `in_view_ms` over the viewable impressions that have one, and their number:
    /// the mean is exact from any sum of parts.
    pub(crate) in_view_ms_total: u64,
    pub(crate) in_view_measured: u64,
}

impl ViewCounts {
    pub(crate) fn add(&mut self, other: &Self) {
        self.measurable += other.measurable;
        self.viewable += other.viewable;
        self.engaged += other.engaged;
        self.in_view_ms_total += other.in_view_ms_total;
        self.in_view_measured += other.in_view_measured;
    }

    /// Counts one valid impression's measures.
    pub(crate) fn count(&mut self, views: &ImpressionViews) {
        self.measurable += u64::from(views.measurable());
        self.engaged += u64::from(views.engaged());
        if views.viewable() {
            self.viewable += 1;
            if let Some(ms) = views.in_view_ms {
                self.in_view_ms_total += u64::from(ms);
                self.in_view_measured += 1;
            }
        }
    }

    /// Viewable ÷ measurable; `None` when nothing was measured.
    pub(crate) fn viewable_rate(&self) -> Option<f64> {
        (self.measurable > 0).then(|| self.viewable as f64 / self.measurable as f64)
    }

    /// The mean in-view time of the viewable impressions that reported one, rounded half up.
    pub(crate) fn avg_in_view_ms(&self) -> Option<u64> {
        (self.in_view_measured > 0)
            .then(|| (self.in_view_ms_total + self.in_view_measured / 2) / self.in_view_measured)
    }

    /// The five numbers in their stored order.
    pub(crate) fn to_array(self) -> [u64; 5] {
        [
            self.measurable,
            self.viewable,
            self.engaged,
            self.in_view_ms_total,
            self.in_view_measured,
        ]
    }

    pub(crate) fn from_array([measurable, viewable, engaged, total, measured]: [u64; 5]) -> Self {
        Self {
            measurable,
            viewable,
            engaged,
            in_view_ms_total: total,
            in_view_measured: measured,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect()
    }

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().expect("time")
    }

    #[test]
    fn a_report_names_every_problem_with_its_fields() {
        let report = ViewReport::from_fields(fields(&[
            ("e", "measurable,viewable,play"),
            ("in_view_ms", "1200"),
            ("max_visible", "80"),
        ]))
        .expect("valid");
        assert!(report.kinds.measurable() && report.kinds.engaged());
        assert_eq!(report.in_view_ms, Some(1200));
        assert_eq!(report.max_visible, Some(80));

        let errors = ViewReport::from_fields(fields(&[
            ("e", "viewable,wink"),
            ("in_view_ms", "600001"),
            ("max_visible", "-1"),
            ("extra", "1"),
        ]))
        .expect_err("invalid");
        let named: Vec<&str> = errors.iter().map(|error| error.field.as_str()).collect();
        assert_eq!(named, ["extra", "in_view_ms", "max_visible", "e"]);

        assert!(ViewReport::from_fields(fields(&[("e", "")])).is_err());
        assert!(ViewReport::from_fields(fields(&[])).is_err());
        assert!(ViewReport::from_fields(fields(&[("e", ""), ("in_view_ms", "0")])).is_ok());
        assert!(ViewReport::from_fields(fields(&[("e", "hover"), ("e", "play")])).is_err());
        assert!(ViewReport::from_fields(fields(&[("in_view_ms", "1e3"), ("e", "")])).is_err());
    }

    #[test]
    fn networks_are_a_24_or_a_48() {
        let v4: IpAddr = "203.0.113.77".parse().expect("ip");
        let same: IpAddr = "203.0.113.1".parse().expect("ip");
        assert_eq!(Network::of(v4), Network::of(same));
        assert_eq!(Network::of(v4).as_bytes(), [203, 0, 113]);
        let v6: IpAddr = "2001:db8:1:2::1".parse().expect("ip");
        let v6_other: IpAddr = "2001:db8:1:ffff::9".parse().expect("ip");
        assert_eq!(Network::of(v6), Network::of(v6_other));
        assert_eq!(
            Network::from_bytes(Network::of(v6).as_bytes()),
            Some(Network::of(v6))
        );
        let mapped: IpAddr = "::ffff:203.0.113.9".parse().expect("ip");
        assert_eq!(Network::of(mapped), Network::of(v4));
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
        served.add_copy(client, Some(at("2026-11-28T10:00:01Z")));
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
        served.add_copy(viewer(), Some(at("2026-11-28T10:30:00Z")));
        let report = stored(
            viewer(),
            &[ViewKind::Viewable],
            "2026-11-28T10:35:00Z",
            1000,
        );
        assert!(join(&served, &[report], ViewWindow::default()).viewable());
    }

    #[test]
    fn means_round_half_up_and_rates_need_a_measured_impression() {
        let mut counts = ViewCounts::default();
        assert_eq!(counts.viewable_rate(), None);
        assert_eq!(counts.avg_in_view_ms(), None);
        for ms in [1000, 1001] {
            counts.count(&ImpressionViews {
                kinds: ViewKinds::default().with(ViewKind::Viewable),
                in_view_ms: Some(ms),
            });
        }
        counts.count(&ImpressionViews {
            kinds: ViewKinds::default().with(ViewKind::Measurable),
            in_view_ms: None,
        });
        assert_eq!(counts.avg_in_view_ms(), Some(1001));
        assert_eq!(counts.viewable_rate(), Some(2.0 / 3.0));
        assert_eq!(ViewCounts::from_array(counts.to_array()), counts);
    }
}

//! Impressions and clicks as validated values.

use super::ids::{AdId, CampaignKey, ImpressionId, UserId};
use super::time::EventTime;
use super::traffic::{InvalidReason, UserAgent};
use super::user_data::UserData;
use std::net::IpAddr;

/// An ad shown to a user. Identified by its `impression_id`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Impression {
    pub impression_id: ImpressionId,
    pub campaign: CampaignKey,
    pub ad_id: AdId,
    pub user_id: UserId,
    pub timestamp: EventTime,
    pub user_ip: Option<IpAddr>,
    pub user_data: UserData,
    /// The viewer's user agent (never the ad server's HTTP client's).
    pub user_agent: Option<UserAgent>,
    /// Why this copy is invalid traffic; `None`: valid.
    pub invalid: Option<InvalidReason>,
    /// When the impression pixel of this copy arrived (`None`: an ad server's POST): a view
    /// report counts within the view window after the later of this and `timestamp`.
    pub pixel_arrival: Option<chrono::DateTime<chrono::Utc>>,
    /// Whether `user_ip` is the viewer's address (a pixel's request, a posted `user_ip`)
    /// rather than the one an ad server posted from, which `user_ip` defaults to: only the
    /// viewer's is compared with view reports' clients, as only it is judged as traffic.
    pub ip_is_viewers: bool,
}

impl Impression {
    /// The client the ad was rendered for, as far as this copy tells it.
    pub(crate) fn client(&self) -> super::view::Client {
        let viewer_ip = self.user_ip.filter(|_| self.ip_is_viewers);
        super::view::Client::of(viewer_ip, self.user_agent.as_ref())
    }
}

/// A click on an impression. Identified by the impression it clicks: however often an
/// impression is clicked, it counts once, at its first click.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Click {
    pub impression_id: ImpressionId,
    pub campaign: CampaignKey,
    pub ad_id: AdId,
    pub timestamp: EventTime,
    /// The clicker's user agent.
    pub user_agent: Option<UserAgent>,
    /// Why this copy is invalid traffic; `None`: valid.
    pub invalid: Option<InvalidReason>,
}

/// What the stores and queries need of any event: its campaign, time and identity.
pub(crate) trait CampaignEvent {
    fn campaign(&self) -> CampaignKey;
    fn timestamp(&self) -> EventTime;
    /// The id the event's bucket is derived from.
    fn bucket_key(&self) -> ImpressionId;
}

impl CampaignEvent for Impression {
    fn campaign(&self) -> CampaignKey {
        self.campaign
    }
    fn timestamp(&self) -> EventTime {
        self.timestamp
    }
    fn bucket_key(&self) -> ImpressionId {
        self.impression_id
    }
}

impl CampaignEvent for Click {
    fn campaign(&self) -> CampaignKey {
        self.campaign
    }
    fn timestamp(&self) -> EventTime {
        self.timestamp
    }
    fn bucket_key(&self) -> ImpressionId {
        self.impression_id
    }
}

/// A view report lives in its impression's partition: its impression's time and id place it.
impl CampaignEvent for super::view::ViewReportEvent {
    fn campaign(&self) -> CampaignKey {
        self.campaign
    }
    fn timestamp(&self) -> EventTime {
        self.impression_time
    }
    fn bucket_key(&self) -> ImpressionId {
        self.impression_id
    }
}

//! The keys of the subject index in the embedded store: the directory's lines (by user) and
//! the entries of a user's conversions (by advertiser and week, as the event index is), shared
//! by the conversions' writes and the subject store's reads and deletes.

use super::keys;
use crate::domain::conversion::index::Week;
use crate::domain::ids::{AdvertiserId, UserId};
use crate::domain::privacy::{SubjectConversion, SubjectWeek};
use uuid::Uuid;

/// The conversions of a user: advertiser (16), week (4), user (16), then the id.
pub(super) fn subject_conversion_prefix(
    advertiser: AdvertiserId,
    week: Week,
    user: UserId,
) -> Vec<u8> {
    let mut key = advertiser.as_uuid().as_bytes().to_vec();
    key.extend_from_slice(&keys::week_bytes(week));
    key.extend_from_slice(user.as_uuid().as_bytes());
    key
}

pub(super) fn subject_conversion_key(entry: &SubjectConversion) -> Vec<u8> {
    let mut key = subject_conversion_prefix(entry.advertiser_id, entry.week, entry.user_id);
    key.extend_from_slice(entry.conversion_id.as_str().as_bytes());
    key
}

/// A directory line: user (16), advertiser (16), week (4).
pub(super) fn subject_week_key(line: &SubjectWeek) -> Vec<u8> {
    let mut key = line.user_id.as_uuid().as_bytes().to_vec();
    key.extend_from_slice(line.advertiser_id.as_uuid().as_bytes());
    key.extend_from_slice(&keys::week_bytes(line.week));
    key
}

/// The directory line that leads to the entry keyed `key` ([`subject_conversion_key`]): its
/// advertiser, week and user are the key's start.
pub(super) fn line_of_subject_conversion(key: &[u8]) -> Option<SubjectWeek> {
    Some(SubjectWeek {
        advertiser_id: AdvertiserId::new(Uuid::from_slice(key.get(..16)?).ok()?),
        week: keys::decode_week(key.get(16..20)?)?,
        user_id: UserId::new(Uuid::from_slice(key.get(20..36)?).ok()?),
    })
}

pub(super) fn decode_subject_week(key: &[u8]) -> Option<SubjectWeek> {
    Some(SubjectWeek {
        user_id: UserId::new(Uuid::from_slice(key.get(..16)?).ok()?),
        advertiser_id: AdvertiserId::new(Uuid::from_slice(key.get(16..32)?).ok()?),
        week: keys::decode_week(key.get(32..)?)?,
    })
}

//! Administration: campaign and site settings, API keys and tag secrets.

pub(super) mod campaigns;
pub(super) mod keys;
pub(super) mod settings_wire;
pub(super) mod sites;
pub(super) mod tag_secrets;

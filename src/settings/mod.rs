//! Campaign and site settings: the per-process cache every write and read goes through
//! ([`cache`]), and the rules by which a change is accepted and scheduled ([`change`]).

pub(crate) mod cache;
pub(crate) mod change;

pub use cache::SettingsCache;
pub(crate) use change::{ChangeError, CurrentSettings, Settings, SettingsChange};

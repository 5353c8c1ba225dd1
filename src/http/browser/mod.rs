//! What the binary serves to browsers as files: the tracker script (`/t.js`), the ad
//! measurement script (`/v.js`) and the dashboard.

pub(super) mod assets;

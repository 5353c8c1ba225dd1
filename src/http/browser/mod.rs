//! What the binary serves to browsers as files: the tracker script (`/t.js`) and the dashboard.

pub(super) mod assets;

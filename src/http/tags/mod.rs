//! Ad tags requested by viewers' browsers: the signed impression pixel (`/i`) and click
//! redirect (`/c`), and the strict reading of their signed query.

pub(super) mod pixel_click;
pub(super) mod tag_query;
pub(super) mod view_report;

//! The process's memory allocator: jemalloc, returning freed memory to the system within about
//! a second. Defined here, in the library, so the server, the benchmarks' in-process servers and
//! the tests all allocate the same way.
//!
//! Why not mimalloc, used before (docs/BENCHMARKS.md, "The compact sketch, the router's
//! middleware and jemalloc"): under beacons with fresh feature values the live sketches turn
//! over constantly (stored, dropped, replaced), and mimalloc's peak resident memory was about
//! 240 MiB above the 256 MiB sketch budget; jemalloc's, with a one-second decay, about 125 MiB
//! above it, at the same or a higher beacon rate.

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read from this symbol before the first allocation (the
/// `_RJEM_MALLOC_CONF` environment variable, read after it, can still change them): a background
/// thread purges unused pages after one second instead of ten, and straight away rather than
/// through a second, "muzzy" stage.
#[allow(non_upper_case_globals)]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub(crate) static malloc_conf: Option<&'static u8> = Some(&OPTIONS[0]);

const OPTIONS: &[u8] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

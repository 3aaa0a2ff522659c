//! mimalloc's one runtime option the crawler sets: how long freed memory is kept.

use std::os::raw::c_long;

use libmimalloc_sys::{mi_option_get, mi_option_set_default, mi_option_t};

/// `mi_option_purge_delay`: its place in mimalloc's `mi_option_e` (`mimalloc.h`), the same in
/// mimalloc 2 and 3. libmimalloc-sys names no constant for it.
const MI_OPTION_PURGE_DELAY: mi_option_t = 15;

/// The purge delay the crawler runs with, in milliseconds: mimalloc 2's default. Measured
/// against 0 (the same peak RSS and CPU within noise, but 1.4 to 1.5 times the page faults
/// and up to 2.4 times the `madvise` calls) and mimalloc 3's 1,000 (0.5 to 0.9 MiB more
/// peak RSS): BENCHMARKS.md, "Crawl speed".
const PURGE_DELAY_MS: c_long = 10;

/// Makes mimalloc return freed memory to the OS promptly: sets its purge delay to 10 ms
/// instead of mimalloc 3's one second, which kept 0.5 to 0.9 MiB more resident at a crawl's
/// peak for no CPU saved (BENCHMARKS.md, "Crawl speed").
///
/// Call it first thing in `main`, before the tokio runtime (or any other thread) starts, in
/// a program whose global allocator is [`MiMalloc`](crate::MiMalloc); the `crawler` binary
/// and the `crawler new` scaffold do:
///
/// ```
/// #[global_allocator]
/// static GLOBAL: crawler::MiMalloc = crawler::MiMalloc;
///
/// fn main() {
///     crawler::tune_allocator();
///     // then build the runtime and crawl
/// }
/// ```
///
/// It leaves the option as it is when
///
/// - `MIMALLOC_PURGE_DELAY` (or its old name `MIMALLOC_RESET_DELAY`) is set in the
///   environment: the user's choice wins;
/// - the process already runs more than one thread: mimalloc's options are plain globals
///   that every allocating thread reads without synchronisation, so they may be written
///   only while no other thread exists;
/// - the thread count cannot be read (it comes from `/proc/self/task`: on other systems than
///   Linux, set the environment variable instead).
///
/// Calling it more than once is harmless. With another global allocator it changes only an
/// unused mimalloc setting.
pub fn tune_allocator() {
    // Only this thread could start another one, and it is busy here: if it is the only
    // thread now, it stays the only one until this function returns.
    let only_thread = cfg!(target_os = "linux")
        && std::fs::read_dir("/proc/self/task").is_ok_and(|tasks| tasks.count() == 1);
    if only_thread {
        set_purge_delay_default(PURGE_DELAY_MS);
    }
}

// The workspace denies `unsafe_code` (Cargo.toml); this function is its one exception:
// mimalloc's options can only be set through its C API, and the mimalloc crate has no safe
// wrapper for them. Private, and called only from `tune_allocator` once it has checked that
// no other thread exists.
#[allow(unsafe_code)]
fn set_purge_delay_default(ms: c_long) {
    // SAFETY: both functions take a plain integer option id, bounds-check it
    // (`MI_OPTION_PURGE_DELAY` is in range: see its definition) and touch only mimalloc's
    // option table, a static array. They write it without synchronisation, which is sound
    // because the only caller has checked that no other thread exists, so nothing reads or
    // writes the table concurrently. `mi_option_get` reads the environment first if mimalloc
    // has not already (it does at start-up), so `mi_option_set_default` then changes the
    // value only if the environment did not set it.
    unsafe {
        let _ = mi_option_get(MI_OPTION_PURGE_DELAY);
        mi_option_set_default(MI_OPTION_PURGE_DELAY, ms);
    }
}

//! CPU time of the benchmark's own process and of its waited-for children, from
//! `/proc/self/stat` (Linux; 0 elsewhere).

/// utime + stime of this process in seconds.
pub(crate) fn cpu_seconds() -> f64 {
    proc_stat_seconds(11)
}

/// CPU seconds (user + system) of this process's children that have been waited for.
pub(crate) fn children_cpu_seconds() -> f64 {
    proc_stat_seconds(13)
}

/// The two CPU-time fields of /proc/self/stat from `first` (counted after the parenthesised
/// command name) summed, in seconds: utime and stime at 11, the waited-for children's
/// cutime and cstime at 13.
fn proc_stat_seconds(first: usize) -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(first) + ticks(first + 1)) / 100.0
}

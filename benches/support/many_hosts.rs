//! A broad crawl's memory: one page on each of many host names, and the process's RSS. The
//! crawl benchmark (`cargo bench --bench crawl -- hosts N C`) and the `many_hosts` test share
//! it.

use crawler::prelude::*;

/// One page on each of `hosts` host names (`h1.hosts.test` ...). No DNS is involved: the
/// lab is the crawl's HTTP proxy, so every name reaches it (it serves by path).
pub(crate) struct ManyHosts {
    /// How many host names.
    pub hosts: usize,
}

impl Spider for ManyHosts {
    type Item = ();

    fn name(&self) -> &str {
        "many-hosts"
    }

    fn start_requests(&self) -> Result<Vec<Request>> {
        (0..self.hosts)
            .map(|i| Request::get(format!("http://h{i}.hosts.test/")))
            .collect()
    }

    async fn parse(&self, _page: Response, _out: &mut Output<()>) -> Result<()> {
        Ok(())
    }
}

/// Current resident set size in MiB (VmRSS).
pub(crate) fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

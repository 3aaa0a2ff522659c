//! `crawler report`: a picture of politeness. Reads a crawl's politeness record
//! (`JOB_DIR/politeness.jsonl`, see [`crawler::sched::record`]) and writes one
//! self-contained HTML file: per host, the request rate achieved against what the server
//! allowed (the pace, the learned limit, the RateLimit quota, the Crawl-delay ceiling), holds
//! shaded and labelled with their trigger, refusals, retries and failures marked, the
//! latency, and the final counts by status. No script, no external file, no network.
//!
//! The page is well-formed XML as well as HTML, its size is bounded (at most
//! [`MAX_CHARTS`] charts of at most 720 points each, the other hosts in a table), and every
//! text taken from the record is escaped.
//!
//! - `read`: the record, read in two bounded passes.
//! - `svg`: one host's chart.
//! - `page`: the page around the charts.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crawler::sched::record::RECORD_FILE;
use crawler::{Error, ErrorKind};

mod page;
mod read;
mod svg;
#[cfg(test)]
mod tests;

/// Hosts charted at most (the busiest); the others are listed in a table.
pub const MAX_CHARTS: usize = 40;

/// What a written report holds, in brief.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReportSummary {
    /// Hosts in the record.
    pub hosts: usize,
    /// Hosts charted.
    pub charted: usize,
    /// Lines of the record that could not be read and were skipped.
    pub bad_lines: u64,
    /// Whether the record ends with a partial line (a crawl killed while writing it).
    pub truncated: bool,
}

/// The record a `report` argument names: a job directory's `politeness.jsonl`, or the
/// record file itself.
pub fn record_path(arg: &Path) -> Result<PathBuf, Error> {
    let meta = std::fs::metadata(arg)
        .map_err(|e| Error::new(ErrorKind::Io, format!("cannot read {}: {e}", arg.display())))?;
    if !meta.is_dir() {
        return Ok(arg.to_owned());
    }
    let path = arg.join(RECORD_FILE);
    if !path.is_file() {
        return Err(Error::new(
            ErrorKind::Io,
            format!(
                "{} holds no politeness record ({RECORD_FILE}): it is written by crawls run \
                 with this job directory (--job-dir) or with --report",
                arg.display()
            ),
        ));
    }
    Ok(path)
}

/// Draw the report of the record at `record` as an HTML page.
pub fn render(record: &Path) -> Result<(String, ReportSummary), Error> {
    let io = |e: std::io::Error| {
        Error::new(
            ErrorKind::Io,
            format!(
                "cannot read the politeness record {}: {e}",
                record.display()
            ),
        )
    };
    let overview = read::overview(record).map_err(io)?;
    if overview.lines == 0 && overview.bad_lines > 0 {
        return Err(Error::new(
            ErrorKind::Other,
            format!(
                "{} is not a politeness record: none of its {} lines could be read",
                record.display(),
                overview.bad_lines
            ),
        ));
    }
    let mut busiest: Vec<(&String, u64)> = overview
        .hosts
        .iter()
        .map(|(h, t)| (h, t.sent.max(t.answered()) + t.holds))
        .collect();
    busiest.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    let charted: Vec<&str> = busiest
        .iter()
        .take(MAX_CHARTS)
        .map(|(h, _)| h.as_str())
        .collect();
    let timeline =
        read::Timeline::new(overview.start_ms.unwrap_or(0), overview.end_ms.unwrap_or(0));
    let wanted: HashSet<&str> = charted.iter().copied().collect();
    let series = read::series(record, &wanted, timeline).map_err(io)?;
    let others: Vec<&str> = busiest
        .iter()
        .skip(MAX_CHARTS)
        .map(|(h, _)| h.as_str())
        .collect();
    let html = page::page(&page::Parts {
        record,
        overview: &overview,
        charted: &charted,
        series: &series,
        others: &others,
        timeline,
    });
    let summary = ReportSummary {
        hosts: overview.hosts.len() + usize::try_from(overview.other_hosts).unwrap_or(0),
        charted: charted.len(),
        bad_lines: overview.bad_lines,
        truncated: overview.truncated,
    };
    Ok((html, summary))
}

/// Draw the report of the record at `record` into the file `out`.
pub fn write_report(record: &Path, out: &Path) -> Result<ReportSummary, Error> {
    let (html, summary) = render(record)?;
    std::fs::write(out, html).map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!("cannot write the report to {}: {e}", out.display()),
        )
    })?;
    Ok(summary)
}

/// `text` safe in HTML and XML text and in quoted attributes.
pub(crate) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters are not allowed in XML; a record should hold none.
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// A crawl run with `--report FILE`: where its record is kept (the job directory's, or a
/// temporary file removed once the report is drawn) and where the report goes.
#[derive(Debug)]
pub(crate) struct CrawlReport {
    out: PathBuf,
    record: PathBuf,
    temporary: bool,
}

/// A temporary record is removed whatever happens to the crawl: also when it fails to build
/// and the report is never drawn.
impl Drop for CrawlReport {
    fn drop(&mut self) {
        if self.temporary {
            let _ = std::fs::remove_file(&self.record);
        }
    }
}

impl CrawlReport {
    /// Check that `out` can be written where it is meant to go (before a long crawl, not
    /// after it), and choose the record.
    pub(crate) fn new(out: PathBuf, job_dir: Option<&str>) -> Result<Self, Error> {
        let parent = out
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if !parent.is_dir() {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "--report {}: the directory {} does not exist",
                    out.display(),
                    parent.display()
                ),
            ));
        }
        Ok(match job_dir {
            Some(dir) => Self {
                out,
                record: Path::new(dir).join(RECORD_FILE),
                temporary: false,
            },
            None => {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_nanos());
                Self {
                    out,
                    record: std::env::temp_dir().join(format!(
                        "crawler-politeness-{}-{nanos}.jsonl",
                        std::process::id()
                    )),
                    temporary: true,
                }
            }
        })
    }

    /// The record the crawl must write to, when it is not the job directory's.
    pub(crate) fn record_override(&self) -> Option<&Path> {
        self.temporary.then_some(self.record.as_path())
    }

    /// Draw the report (the crawl is over and its record closed), and remove a temporary
    /// record.
    pub(crate) fn finish(self) -> Result<ReportSummary, Error> {
        // The temporary record goes when `self` drops, at the end of this call.
        let summary = write_report(&self.record, &self.out)?;
        tracing::info!(
            hosts = summary.hosts,
            "politeness report written to {}",
            self.out.display()
        );
        Ok(summary)
    }
}

//! [`BrowserConfig`]: which chromium, how many tabs, how long a page may take, what a page
//! may load, and which pages are rendered without asking.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crawler_core::{HostRule, Request, Settings};

use crate::error::{Error, Result};

/// Names the executable is looked for under on `PATH`, Debian's first.
const EXECUTABLES: &[&str] = &[
    "chromium",
    "chromium-browser",
    "google-chrome",
    "google-chrome-stable",
];

/// How pages are rendered. Built from the crawl's settings with
/// [`BrowserConfig::from_settings`], then adjusted with the builder methods.
#[derive(Debug, Clone)]
pub struct BrowserConfig {
    /// The chromium executable; found on `PATH` when not set.
    pub executable: Option<PathBuf>,
    /// Pages rendered at once (one tab each): the bound on the browser's memory.
    pub tabs: usize,
    /// Pages fetched and waiting for a tab, at most, besides those rendering: the engine
    /// hands out no new page while `tabs + queue` pages that render are in flight, so the
    /// next ones wait in the frontier, unfetched, rather than in memory with their
    /// deadline running (see [`Downloader::render_limit`](crawler_core::Downloader::render_limit)).
    pub queue: usize,
    /// The longest a page's render may take, from waiting for a tab to the DOM taken
    /// (the page's sub-requests, held by their hosts' slots, included).
    pub page_timeout: Duration,
    /// The longest chromium may take to start.
    pub launch_timeout: Duration,
    /// Resource types (as the DevTools protocol names them: `Image`, `Media`, `Font`,
    /// `Stylesheet`, `Script`, `XHR`, `Fetch`, …, case-insensitive) answered as blocked
    /// without a request. Default: images, media and fonts.
    pub block: Vec<String>,
    /// Render every page, not only the requests that ask for it (the `render` setting).
    pub render_all: bool,
    /// The `[[hosts]]` rules: the first that matches a page's host decides, with its
    /// `render`, whether the host's pages are rendered (as for every per-host setting).
    pub hosts: Vec<HostRule>,
    /// The User-Agent the browser presents to the pages' scripts (its requests carry the
    /// crawl's own, set by the downloader).
    pub user_agent: Option<String>,
    /// Renders of a page tried on a fresh browser after the browser crashed or was killed
    /// under it.
    pub crash_retries: u32,
}

impl Default for BrowserConfig {
    fn default() -> Self {
        Self {
            executable: None,
            tabs: 2,
            queue: 2,
            page_timeout: Duration::from_secs(30),
            launch_timeout: Duration::from_secs(20),
            block: vec!["image".into(), "media".into(), "font".into()],
            render_all: false,
            hosts: Vec::new(),
            user_agent: None,
            crash_retries: 2,
        }
    }
}

impl BrowserConfig {
    /// From the crawl's settings: `render`, the `browser_*` settings, the `[[hosts]]`
    /// rules, and the crawl's User-Agent for the browser to present.
    pub fn from_settings(settings: &Settings) -> Self {
        Self {
            executable: (!settings.browser_executable.trim().is_empty())
                .then(|| PathBuf::from(settings.browser_executable.trim())),
            tabs: settings.browser_tabs.max(1),
            queue: settings.browser_queue,
            page_timeout: settings.browser_page_timeout,
            block: settings.browser_block.clone(),
            render_all: settings.render,
            hosts: settings.hosts.clone(),
            user_agent: Some(settings.user_agent.clone()),
            ..Self::default()
        }
    }

    /// Use this chromium executable.
    pub fn executable(mut self, path: impl Into<PathBuf>) -> Self {
        self.executable = Some(path.into());
        self
    }

    /// Render at most `tabs` pages at once (at least 1).
    pub fn tabs(mut self, tabs: usize) -> Self {
        self.tabs = tabs.max(1);
        self
    }

    /// At most `queue` pages fetched and waiting for a tab besides those rendering.
    pub fn queue(mut self, queue: usize) -> Self {
        self.queue = queue;
        self
    }

    /// Pages that render in flight at once, from their hand-out to their end: the tabs and
    /// the queue in front of them.
    pub fn render_limit(&self) -> usize {
        self.tabs.max(1).saturating_add(self.queue)
    }

    /// The longest one page's render may take.
    pub fn page_timeout(mut self, timeout: Duration) -> Self {
        self.page_timeout = timeout;
        self
    }

    /// Block these resource types (replacing the default list; empty blocks nothing).
    pub fn block<S: Into<String>>(mut self, types: impl IntoIterator<Item = S>) -> Self {
        self.block = types.into_iter().map(Into::into).collect();
        self
    }

    /// Render every page.
    pub fn render_all(mut self, yes: bool) -> Self {
        self.render_all = yes;
        self
    }

    /// Render every page of the hosts matching `pattern` (a `[[hosts]]` glob:
    /// `*.example.com`, `127.0.0.1:*`), ahead of the rules already given.
    pub fn render_host(mut self, pattern: impl Into<String>) -> Self {
        let rule = serde_json::json!({ "match": pattern.into(), "render": true });
        // A rule of a string and a boolean always reads.
        if let Ok(rule) = serde_json::from_value::<HostRule>(rule) {
            self.hosts.insert(0, rule);
        }
        self
    }

    /// Whether `resource_type` (the protocol's name) is blocked.
    pub fn blocks(&self, resource_type: &str) -> bool {
        self.block
            .iter()
            .any(|b| b.eq_ignore_ascii_case(resource_type))
    }

    /// Whether every page of `request`'s host is rendered by this configuration: the first
    /// `[[hosts]]` rule matching the host decides when it says, else `render_all`.
    pub fn renders_host(&self, request: &Request) -> bool {
        let Some(host) = request.url.host_str() else {
            return false;
        };
        let key = match request.url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        self.hosts
            .iter()
            .find(|rule| rule.matches(&key))
            .and_then(|rule| rule.render)
            .unwrap_or(self.render_all)
    }

    /// The executable to run: the configured one, else the first of chromium's usual names
    /// on `PATH`.
    pub fn find_executable(&self) -> Result<PathBuf> {
        if let Some(path) = &self.executable {
            return if path.is_file() {
                Ok(path.clone())
            } else {
                Err(Error::new(format!(
                    "the browser executable {} does not exist",
                    path.display()
                )))
            };
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        for dir in std::env::split_paths(&path) {
            for name in EXECUTABLES {
                let candidate = dir.join(name);
                if is_executable(&candidate) {
                    return Ok(candidate);
                }
            }
        }
        Err(Error::new(
            "no chromium found on PATH (install it, e.g. `apt-get install chromium`, or set \
             the browser's executable)",
        ))
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_rules_match_names_and_subdomains() {
        let c = BrowserConfig::default()
            .render_host("shop.example")
            .render_host("*.js.example");
        let r = |u: &str| Request::get(u).expect("url");
        assert!(c.renders_host(&r("http://shop.example/a")));
        assert!(c.renders_host(&r("http://shop.example:8080/a")));
        assert!(!c.renders_host(&r("http://other.example/a")));
        assert!(c.renders_host(&r("http://a.js.example/")));
        assert!(!c.renders_host(&r("http://notjs.example/")));
        assert!(
            BrowserConfig::default()
                .render_all(true)
                .renders_host(&r("http://x.example/"))
        );
    }

    #[test]
    fn settings_render_all_but_where_a_host_rule_says_otherwise() {
        let mut s = Settings::default();
        s.set("render", "true").expect("render");
        s.set("browser_tabs", "3").expect("tabs");
        s.set("browser_queue", "5").expect("queue");
        s.set("hosts", r#"[{"match":"static.example","render":false}]"#)
            .expect("hosts");
        let c = BrowserConfig::from_settings(&s);
        assert_eq!((c.tabs, c.queue, c.render_limit()), (3, 5, 8));
        let r = |u: &str| Request::get(u).expect("url");
        assert!(c.renders_host(&r("http://shop.example/")));
        assert!(!c.renders_host(&r("http://static.example/")));
        let off = BrowserConfig::from_settings(&Settings::default());
        assert!(!off.renders_host(&r("http://shop.example/")));
        assert_eq!(off.executable, None);
    }

    #[test]
    fn blocks_by_type_case_insensitively() {
        let c = BrowserConfig::default();
        assert!(c.blocks("Image") && c.blocks("Font") && c.blocks("Media"));
        assert!(!c.blocks("Script") && !c.blocks("XHR"));
        assert!(!c.block(Vec::<String>::new()).blocks("Image"));
    }

    #[test]
    fn a_missing_executable_is_a_clear_error() {
        let e = BrowserConfig::default()
            .executable("/nonexistent/chromium")
            .find_executable()
            .expect_err("missing");
        assert!(e.to_string().contains("does not exist"));
    }
}

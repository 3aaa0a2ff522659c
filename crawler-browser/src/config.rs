//! [`BrowserConfig`]: which chromium, how many tabs, how long a page may take, what a page
//! may load, and which pages are rendered without asking.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crawler_core::{Request, Settings};

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
    /// The longest a page's render may take, from waiting for a tab to the DOM taken
    /// (the page's sub-requests, held by their hosts' slots, included).
    pub page_timeout: Duration,
    /// The longest chromium may take to start.
    pub launch_timeout: Duration,
    /// Resource types (as the DevTools protocol names them: `Image`, `Media`, `Font`,
    /// `Stylesheet`, `Script`, `XHR`, `Fetch`, …, case-insensitive) answered as blocked
    /// without a request. Default: images, media and fonts.
    pub block: Vec<String>,
    /// Render every page, not only the requests that ask for it.
    pub render_all: bool,
    /// Render every page of these hosts (exact names, or `*.example.com` for subdomains).
    pub render_hosts: Vec<String>,
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
            page_timeout: Duration::from_secs(30),
            launch_timeout: Duration::from_secs(20),
            block: vec!["image".into(), "media".into(), "font".into()],
            render_all: false,
            render_hosts: Vec::new(),
            user_agent: None,
            crash_retries: 2,
        }
    }
}

impl BrowserConfig {
    /// The defaults, with the crawl's User-Agent and its `download_timeout` as the page
    /// deadline.
    pub fn from_settings(settings: &Settings) -> Self {
        Self {
            user_agent: Some(settings.user_agent.clone()),
            page_timeout: settings.download_timeout,
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

    /// Render every page of `host` (or `*.domain` for its subdomains).
    pub fn render_host(mut self, host: impl Into<String>) -> Self {
        self.render_hosts.push(host.into());
        self
    }

    /// Whether `resource_type` (the protocol's name) is blocked.
    pub fn blocks(&self, resource_type: &str) -> bool {
        self.block
            .iter()
            .any(|b| b.eq_ignore_ascii_case(resource_type))
    }

    /// Whether every page of `request`'s host is rendered by this configuration.
    pub fn renders_host(&self, request: &Request) -> bool {
        if self.render_all {
            return true;
        }
        let Some(host) = request.url.host_str() else {
            return false;
        };
        self.render_hosts
            .iter()
            .any(|rule| match rule.strip_prefix("*.") {
                Some(domain) => {
                    host.eq_ignore_ascii_case(domain)
                        || host
                            .len()
                            .checked_sub(domain.len() + 1)
                            .and_then(|cut| host.get(cut..))
                            .is_some_and(|tail| {
                                tail.starts_with('.') && tail[1..].eq_ignore_ascii_case(domain)
                            })
                }
                None => host.eq_ignore_ascii_case(rule),
            })
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
        assert!(!c.renders_host(&r("http://other.example/a")));
        assert!(c.renders_host(&r("http://a.js.example/")));
        assert!(c.renders_host(&r("http://js.example/")));
        assert!(!c.renders_host(&r("http://notjs.example/")));
        assert!(
            BrowserConfig::default()
                .render_all(true)
                .renders_host(&r("http://x.example/"))
        );
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

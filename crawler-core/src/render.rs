//! Asking for a page to be rendered by a browser: [`RenderOptions`], carried in the
//! request's meta under [`RENDER_META`] so that it persists with the request (sled, Redis)
//! like everything else a request carries.
//!
//! Core only describes the wish; the `crawler-browser` crate (the `browser` feature of the
//! `crawler` crate) renders. Without it, a request marked for rendering is fetched as a
//! plain HTTP request.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::request::Request;

/// The meta key that holds a request's [`RenderOptions`].
pub const RENDER_META: &str = "render";

/// What to do in the browser before the rendered DOM is taken as the page's body.
///
/// After the page's load event they run in this order: `wait_for` (what the page shows
/// first), `script` (a click), `scroll`, `network_idle` (what the page, the script or the
/// scroll brought in), `wait`, then `screenshot`. Each is bounded by the handler's page
/// deadline, so none of them can hang a crawl.
///
/// Options with no wait of their own (no `wait_for`, no `wait`: [`Request::render`] among
/// them) wait for the network to go quiet, unless told not to: a page whose data comes by
/// script after its load event (most of them) is taken with its data, not empty.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RenderOptions {
    /// Wait until an element matches this CSS selector.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_for: Option<String>,
    /// Wait until no sub-request has been in flight for 500 ms (a page that never goes
    /// quiet is taken after half the page's deadline, with a warning). Unset: wait when no
    /// other wait is set ([`RenderOptions::waits_for_network`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_idle: Option<bool>,
    /// Wait this long (after the other waits).
    #[serde(
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub wait: Option<Duration>,
    /// JavaScript to run in the page once it has loaded (a click, filling a form).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// Scroll to the end of the page, repeatedly while it keeps growing (infinite lists),
    /// up to this many times.
    #[serde(skip_serializing_if = "is_zero")]
    pub scroll: u32,
    /// Save a PNG screenshot of the page to this path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub screenshot: Option<String>,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

impl RenderOptions {
    /// The defaults: the page's load event, then until the network goes quiet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the render waits for the network to go quiet: as set, or, unset, when no
    /// other wait (`wait_for`, `wait`) says what the page needs.
    pub fn waits_for_network(&self) -> bool {
        self.network_idle
            .unwrap_or(self.wait_for.is_none() && self.wait.is_none())
    }

    /// Wait until an element matches `selector`.
    pub fn wait_for(mut self, selector: impl Into<String>) -> Self {
        self.wait_for = Some(selector.into());
        self
    }

    /// Wait until the page's network has been idle for 500 ms, whatever else waits.
    pub fn network_idle(mut self) -> Self {
        self.network_idle = Some(true);
        self
    }

    /// Take the page without waiting for its network to go quiet: for a page whose content
    /// is in its HTML or after `wait_for`, and whose scripts keep fetching (a ticker, a
    /// beacon). What is still in flight then is counted and warned about.
    pub fn without_network_idle(mut self) -> Self {
        self.network_idle = Some(false);
        self
    }

    /// Wait a fixed time.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Run `script` in the page.
    pub fn script(mut self, script: impl Into<String>) -> Self {
        self.script = Some(script.into());
        self
    }

    /// Scroll to the end up to `times` times while the page grows.
    pub fn scroll(mut self, times: u32) -> Self {
        self.scroll = times;
        self
    }

    /// Save a PNG screenshot to `path`.
    pub fn screenshot(mut self, path: impl Into<String>) -> Self {
        self.screenshot = Some(path.into());
        self
    }

    /// The options `request` carries, if it asks for rendering. Options that do not read
    /// (written by hand into meta) count as the defaults rather than as no rendering: the
    /// request clearly asked for a browser.
    pub fn of(request: &Request) -> Option<Self> {
        let value = request.meta.get(RENDER_META)?;
        match value {
            serde_json::Value::Bool(false) | serde_json::Value::Null => None,
            serde_json::Value::Bool(true) => Some(Self::default()),
            other => Some(serde_json::from_value(other.clone()).unwrap_or_else(|e| {
                tracing::warn!(url = %request.url, "render options unreadable, using defaults: {e}");
                Self::default()
            })),
        }
    }
}

impl Request {
    /// Render this page in a browser (the `browser` feature) before the spider sees it: the
    /// response's body is the DOM after the page's scripts ran.
    pub fn render(self) -> Self {
        self.render_with(RenderOptions::default())
    }

    /// Render this page in a browser with `options` (waits, a script, scrolling, a
    /// screenshot).
    pub fn render_with(mut self, options: RenderOptions) -> Self {
        let value = if options == RenderOptions::default() {
            serde_json::Value::Bool(true)
        } else {
            // Plain data of strings, numbers and booleans: serialising cannot fail.
            serde_json::to_value(options).unwrap_or(serde_json::Value::Bool(true))
        };
        self.meta.insert(RENDER_META.to_owned(), value);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_render_is_a_flag_and_options_round_trip() {
        let r = Request::get("http://127.0.0.1/").unwrap();
        assert_eq!(RenderOptions::of(&r), None);
        let plain = r.clone().render();
        assert_eq!(plain.meta[RENDER_META], serde_json::Value::Bool(true));
        assert_eq!(RenderOptions::of(&plain), Some(RenderOptions::default()));
        let opts = RenderOptions::new()
            .wait_for("li.book")
            .network_idle()
            .wait(Duration::from_millis(300))
            .script("document.querySelector('button').click()")
            .scroll(3)
            .screenshot("/tmp/x.png");
        let rich = r.render_with(opts.clone());
        let text = serde_json::to_string(&rich).unwrap();
        let back: Request = serde_json::from_str(&text).unwrap();
        assert_eq!(RenderOptions::of(&back), Some(opts));
    }

    #[test]
    fn false_means_no_rendering_and_junk_means_defaults() {
        let mut r = Request::get("http://127.0.0.1/").unwrap();
        r.meta
            .insert(RENDER_META.into(), serde_json::Value::Bool(false));
        assert_eq!(RenderOptions::of(&r), None);
        r.meta
            .insert(RENDER_META.into(), serde_json::json!({"x": 1}));
        assert_eq!(RenderOptions::of(&r), Some(RenderOptions::default()));
    }

    #[test]
    fn without_a_wait_of_their_own_options_wait_for_the_network() {
        assert!(RenderOptions::default().waits_for_network());
        assert!(RenderOptions::new().scroll(2).waits_for_network());
        assert!(!RenderOptions::new().wait_for("li").waits_for_network());
        assert!(
            !RenderOptions::new()
                .wait(Duration::from_secs(1))
                .waits_for_network()
        );
        assert!(
            RenderOptions::new()
                .wait_for("li")
                .network_idle()
                .waits_for_network()
        );
        let r = Request::get("http://127.0.0.1/").unwrap();
        let off = r.render_with(RenderOptions::new().without_network_idle());
        let text = serde_json::to_string(&off).unwrap();
        let back: Request = serde_json::from_str(&text).unwrap();
        assert!(!RenderOptions::of(&back).unwrap().waits_for_network());
    }
}

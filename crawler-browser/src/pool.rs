//! The browser process and its tabs: one chromium, started on first use, replaced when it
//! dies; a semaphore bounds the tabs open at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use chromiumoxide::browser::{Browser, BrowserConfig as LaunchConfig};
use chromiumoxide::cdp::browser_protocol::browser::{
    SetDownloadBehaviorBehavior, SetDownloadBehaviorParams,
};
use futures_util::StreamExt;
use tokio::sync::{Mutex, Semaphore};
use tokio::task::JoinHandle;

use crate::config::BrowserConfig;
use crate::error::{Error, Result};

/// One running chromium.
pub(crate) struct Instance {
    pub(crate) browser: Browser,
    /// Cleared when the DevTools connection ends (the browser exited, crashed or was killed).
    pub(crate) alive: Arc<AtomicBool>,
    pub(crate) generation: u64,
    pub(crate) pid: Option<u32>,
    handler: JoinHandle<()>,
    /// A fresh profile per process: no state leaks between crawls or restarts, and it is
    /// removed with the instance.
    _profile: tempfile::TempDir,
}

/// How long dropping a browser waits for its process to exit, so that its profile
/// directory can be removed (a browser still running writes into it again).
const EXIT_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

impl Drop for Instance {
    fn drop(&mut self) {
        self.handler.abort();
        if let Some(child) = self.browser.get_mut_child() {
            let child = child.as_mut_inner();
            let _ = child.start_kill();
            // A short, bounded wait (a dropped browser is rare: a restart or the crawl's
            // end): the profile is removed after this, and would stay in the temporary
            // directory if the process were still writing to it.
            let until = std::time::Instant::now() + EXIT_WAIT;
            while matches!(child.try_wait(), Ok(None)) && std::time::Instant::now() < until {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
}

/// The browser and the tab permits.
pub(crate) struct Pool {
    config: BrowserConfig,
    pub(crate) tabs: Semaphore,
    current: Mutex<Option<Arc<Instance>>>,
    generation: AtomicU64,
    /// Browsers started after the first (crashes and kills recovered from).
    pub(crate) restarts: AtomicU64,
    /// Fetched pages in the renderer now (in a tab or waiting for one), and the most that
    /// ever were at once.
    pages: AtomicUsize,
    pub(crate) peak_pages: AtomicUsize,
}

/// Counts a page as in the renderer for as long as it lives (the render may be cancelled).
pub(crate) struct InRender<'a>(&'a Pool);

impl Drop for InRender<'_> {
    fn drop(&mut self) {
        self.0.pages.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Pool {
    pub(crate) fn new(config: BrowserConfig) -> Self {
        Self {
            tabs: Semaphore::new(config.tabs.max(1)),
            config,
            current: Mutex::new(None),
            generation: AtomicU64::new(0),
            restarts: AtomicU64::new(0),
            pages: AtomicUsize::new(0),
            peak_pages: AtomicUsize::new(0),
        }
    }

    /// A fetched page enters the renderer: counted until the guard is dropped.
    pub(crate) fn enter(&self) -> InRender<'_> {
        let now = self.pages.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak_pages.fetch_max(now, Ordering::Relaxed);
        InRender(self)
    }

    pub(crate) fn config(&self) -> &BrowserConfig {
        &self.config
    }

    /// The running browser, started (or restarted) if there is none alive.
    pub(crate) async fn browser(&self) -> Result<Arc<Instance>> {
        let mut current = self.current.lock().await;
        if let Some(inst) = current.as_ref()
            && inst.alive.load(Ordering::Acquire)
        {
            return Ok(Arc::clone(inst));
        }
        if current.take().is_some() {
            self.restarts.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("the browser is gone; starting a new one");
        }
        let inst = Arc::new(self.launch().await?);
        *current = Some(Arc::clone(&inst));
        Ok(inst)
    }

    /// The browser of `generation` failed: forget it, so the next page starts a new one.
    pub(crate) async fn discard(&self, generation: u64) {
        let mut current = self.current.lock().await;
        if current.as_ref().is_some_and(|i| i.generation == generation) {
            if let Some(inst) = current.take() {
                inst.alive.store(false, Ordering::Release);
            }
            self.restarts.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The running browser's process id, if one is running.
    pub(crate) async fn pid(&self) -> Option<u32> {
        self.current.lock().await.as_ref().and_then(|i| i.pid)
    }

    async fn launch(&self) -> Result<Instance> {
        let executable = self.config.find_executable()?;
        let profile = tempfile::Builder::new()
            .prefix("crawler-browser-")
            .tempdir()
            .map_err(|e| Error::with("cannot make the browser's profile directory", e))?;
        let mut builder = LaunchConfig::builder()
            .chrome_executable(&executable)
            // Our own flags only: chromiumoxide's defaults turn on things a crawler does not
            // want (and the ones below switch off the browser's own traffic, which would
            // go around robots.txt and the slots).
            .disable_default_args()
            .no_sandbox()
            .user_data_dir(profile.path())
            .launch_timeout(self.config.launch_timeout)
            .request_timeout(self.config.page_timeout)
            .args([
                "disable-gpu",
                "disable-quic",
                "no-first-run",
                // No tab of its own at start (the pages open theirs): an idle browser's
                // processes went from 9 to 6, its footprint (PSS) from 387 to 233 MiB.
                // Under load the renderers of the open pages set the peak (BENCHMARKS.md,
                // "Pages built by JavaScript").
                "no-startup-window",
                "disable-background-networking",
                "disable-component-update",
                "disable-sync",
                "disable-default-apps",
                "disable-extensions",
                "disable-dev-shm-usage",
                "mute-audio",
                "hide-scrollbars",
                "metrics-recording-only",
                "no-default-browser-check",
                "disable-breakpad",
                // Whatever the browser would send on its own, outside a page's paused
                // requests (favicons fetched by the browser process, background services),
                // goes to a proxy that is not there and fails: every request that reaches
                // a server is one we sent, through robots.txt and its host's slot. Answered
                // requests never touch the network, so the proxy costs them nothing.
                // `<-loopback>` removes the implicit bypass of 127.0.0.1 and localhost.
                "proxy-server=http://127.0.0.1:9",
                "proxy-bypass-list=<-loopback>",
            ]);
        if let Some(ua) = &self.config.user_agent {
            builder = builder.arg(format!("user-agent={ua}"));
        }
        let launch = builder
            .build()
            .map_err(|e| Error::new(format!("bad browser configuration: {e}")))?;
        let (mut browser, mut handler) = Browser::launch(launch).await.map_err(|e| {
            Error::with(
                format!("cannot start the browser {}", executable.display()),
                e,
            )
        })?;
        let alive = Arc::new(AtomicBool::new(true));
        let flag = Arc::clone(&alive);
        let handler = tokio::spawn(async move {
            // The handler drives the DevTools connection; it ends when the browser does.
            while let Some(event) = handler.next().await {
                if let Err(e) = event
                    && is_fatal(&e)
                {
                    tracing::debug!("browser connection failed: {e}");
                    break;
                }
            }
            flag.store(false, Ordering::Release);
        });
        // A navigation that turns into a download (a link to a file, a script that sets
        // `location`) is cancelled, not saved: a crawl writes nothing into the user's
        // downloads folder, and the body went through the crawl as a sub-request anyway.
        let deny = SetDownloadBehaviorParams::new(SetDownloadBehaviorBehavior::Deny);
        match tokio::time::timeout(self.config.launch_timeout, browser.execute(deny)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(Error::with("cannot switch the browser's downloads off", e)),
            Err(_) => {
                return Err(Error::new(
                    "the browser did not answer in time when its downloads were switched off",
                ));
            }
        }
        let pid = browser.get_mut_child().and_then(|c| c.as_mut_inner().id());
        let generation = self.generation.fetch_add(1, Ordering::Relaxed);
        tracing::info!(?pid, executable = %executable.display(), "browser started");
        Ok(Instance {
            browser,
            alive,
            generation,
            pid,
            handler,
            _profile: profile,
        })
    }
}

/// Whether a handler error means the connection to the browser is gone.
fn is_fatal(e: &chromiumoxide::error::CdpError) -> bool {
    use chromiumoxide::error::CdpError;
    matches!(
        e,
        CdpError::Ws(_) | CdpError::Io(_) | CdpError::ChannelSendError(_)
    )
}

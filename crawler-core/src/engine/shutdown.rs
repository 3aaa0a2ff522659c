//! Stopping a crawl: the stop handle, and the signals that pull it.

use std::sync::Arc;

use tokio::sync::watch;

/// Asks a running crawl to stop. The first request stops scheduling and lets requests in
/// flight finish; the second abandons them (they stay counted as pending), and during the
/// final drain it stops writing the feeds at once (the requests whose items were not yet
/// written stay unacknowledged, so a resumed job fetches them again).
#[derive(Debug, Clone)]
pub struct Shutdown(Arc<watch::Sender<u32>>);

impl Default for Shutdown {
    fn default() -> Self {
        Self(Arc::new(watch::channel(0).0))
    }
}

impl Shutdown {
    /// A new, untriggered handle.
    pub fn new() -> Self {
        Self::default()
    }

    /// Ask the crawl to stop (again).
    pub fn request(&self) {
        self.0.send_modify(|n| *n += 1);
    }

    /// Ask the crawl to stop unless a stop was already asked for (a close condition: reached
    /// twice, it must not count as the second request that abandons the requests in
    /// flight). Returns whether this call was the one that asked.
    pub(super) fn request_first(&self) -> bool {
        self.0.send_if_modified(|n| {
            if *n == 0 {
                *n = 1;
                true
            } else {
                false
            }
        })
    }

    /// How many times a stop has been asked for.
    pub fn requested(&self) -> u32 {
        *self.0.borrow()
    }

    pub(super) fn subscribe(&self) -> watch::Receiver<u32> {
        self.0.subscribe()
    }
}

/// Resolves once a stop has been asked for twice (at once if it already has been).
pub(super) async fn second_stop(rx: &mut watch::Receiver<u32>) {
    while *rx.borrow_and_update() < 2 {
        if rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Turn Ctrl-C and (on Unix) SIGTERM into stop requests, for as long as the crawl runs.
pub(super) async fn listen_for_signals(shutdown: Shutdown) {
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    loop {
        #[cfg(unix)]
        let name = tokio::select! {
            r = tokio::signal::ctrl_c() => match r {
                Ok(()) => "interrupt",
                Err(_) => return,
            },
            Some(()) = async {
                match term.as_mut() {
                    Some(t) => t.recv().await,
                    None => std::future::pending().await,
                }
            } => "SIGTERM",
        };
        #[cfg(not(unix))]
        let name = match tokio::signal::ctrl_c().await {
            Ok(()) => "interrupt",
            Err(_) => return,
        };
        shutdown.request();
        if shutdown.requested() == 1 {
            tracing::warn!(
                "{name}: stopping: finishing requests in flight, then the job can be resumed \
                 (send it again to stop now)"
            );
        } else {
            tracing::warn!("{name} again: stopping now");
        }
    }
}

//! The signals that stop a crawl, and waiting for the second stop.

use crawler_core::Shutdown;
use tokio::sync::watch;

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

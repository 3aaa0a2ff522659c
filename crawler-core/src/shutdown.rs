//! Stopping a crawl: the stop handle (the engine listens to it; the fleet's store pulls it
//! when Redis is lost).

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
    pub fn request_first(&self) -> bool {
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

    /// How many stops have been asked for, as it changes (the engine waits on it).
    pub fn subscribe(&self) -> watch::Receiver<u32> {
        self.0.subscribe()
    }
}

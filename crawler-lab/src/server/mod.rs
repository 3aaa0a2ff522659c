//! A small HTTP/1.1 server over tokio's TCP streams.
//!
//! Hand-written rather than hyper or axum because the lab must misbehave in ways a correct
//! server library refuses to: reset a connection mid-body, send more bytes than it declared,
//! trickle or never finish. It also keeps the hot path allocation-light (one read buffer and
//! one write buffer per connection, reused), which is how the open scenario stays far ahead of
//! any crawler benchmark.
//!
//! The folder owns the wire and nothing else: accepting connections and the keep-alive loop
//! ([`connection`](mod@connection)), parsing request heads ([`parse`]: no I/O), writing
//! responses, the broken ones included ([`write`](mod@write)), and the two types the handler
//! works with, [`Req`] and [`Reply`]. What to answer is the [`handler`](crate::handler)'s
//! business: the server must not choose a status, header or body itself, except the bare
//! refusals of requests it cannot parse.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::handler::Shared;

mod connection;
mod parse;
mod reply;
mod request;
mod write;

pub(crate) use reply::{BodyKind, Reply};
pub(crate) use request::Req;

use connection::connection;

/// Graceful shutdown waits this long for responses in progress.
const DRAIN: Duration = Duration::from_secs(5);

/// Accepts connections until shutdown, then lets responses in progress finish (bounded).
pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    // Responses are written whole; Nagle would only add latency.
                    let _ = stream.set_nodelay(true);
                    conns.spawn(connection(stream, peer, shared.clone(), shutdown.clone()));
                }
                // Out of descriptors and the like: back off instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            },
            _ = shutdown.changed() => break,
        }
        while conns.try_join_next().is_some() {}
    }
    drop(listener);
    let _ = tokio::time::timeout(DRAIN, async { while conns.join_next().await.is_some() {} }).await;
}

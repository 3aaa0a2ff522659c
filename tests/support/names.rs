//! Two host names for one lab: `127.0.0.1` and `localhost`, for the limiter-group tests.

use std::net::{Ipv4Addr, ToSocketAddrs};

/// Whether `localhost` resolves first to 127.0.0.1, where the lab on `port` listens. The
/// frontier groups a name by the address it resolves to first, so a machine that puts ::1
/// first cannot run a crawl of the lab under both names; the test says so and stops.
pub(super) fn localhost_reaches_the_lab(port: u16) -> bool {
    let first = ("localhost", port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next());
    let ok = first.map(|a| a.ip()) == Some(Ipv4Addr::LOCALHOST.into());
    if !ok {
        eprintln!("skipped: localhost resolves to {first:?} first, not to the lab's 127.0.0.1");
    }
    ok
}

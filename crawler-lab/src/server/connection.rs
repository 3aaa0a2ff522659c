//! One connection: read a request, let the handler answer it, record it, write it, repeat.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::parse::{Parsed, parse_head, text};
use super::write::{Sent, refuse, send};
use super::{Reply, Req};
use crate::handler::{self, Shared};
use crate::recorder::Observation;

/// Largest request head accepted.
const MAX_HEAD: usize = 64 * 1024;
/// Largest request body accepted (only the login form reads one; others are dropped).
const MAX_BODY: u64 = 1 << 20;
/// An idle keep-alive connection is closed after this long.
const IDLE: Duration = Duration::from_secs(30);
/// Reads until `buf` holds at least `want` bytes; false on EOF, error, idle or shutdown.
async fn fill(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    want: usize,
    shutdown: &mut watch::Receiver<bool>,
) -> bool {
    while buf.len() < want {
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(4096);
        }
        tokio::select! {
            read = stream.read_buf(buf) => match read {
                Ok(0) | Err(_) => return false,
                Ok(_) => {}
            },
            _ = shutdown.changed() => return false,
            _ = tokio::time::sleep(IDLE) => return false,
        }
    }
    true
}

pub(super) async fn connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let peer_ip = peer.ip().to_string();
    let mut rbuf: Vec<u8> = Vec::with_capacity(4096);
    let mut wbuf: Vec<u8> = Vec::with_capacity(8192);
    let mut reply = Reply::default();
    loop {
        let head = loop {
            match parse_head(&rbuf) {
                Parsed::Done(head) => break head,
                Parsed::Bad(status) => {
                    let _ = refuse(&mut stream, status).await;
                    return;
                }
                Parsed::Partial if rbuf.len() > MAX_HEAD => {
                    let _ = refuse(&mut stream, 431).await;
                    return;
                }
                Parsed::Partial => {
                    let want = rbuf.len() + 1;
                    if *shutdown.borrow()
                        || !fill(&mut stream, &mut rbuf, want, &mut shutdown).await
                    {
                        return;
                    }
                }
            }
        };
        if head.chunked {
            let _ = refuse(&mut stream, 411).await;
            return;
        }
        if head.content_length > MAX_BODY {
            let _ = refuse(&mut stream, 413).await;
            return;
        }
        let consumed = head.len + head.content_length as usize;
        if !fill(&mut stream, &mut rbuf, consumed, &mut shutdown).await {
            return;
        }
        let arrived = shared.start.elapsed();
        let target = text(&rbuf, &Some(head.target.clone())).unwrap_or("/");
        // Absolute-form targets (sent through proxies) name the same resource.
        let target = match target.strip_prefix("http://") {
            Some(rest) => rest.find('/').map_or("/", |i| &rest[i..]),
            None => target,
        };
        let req = Req {
            method: text(&rbuf, &Some(head.method.clone())).unwrap_or("GET"),
            target,
            user_agent: text(&rbuf, &head.user_agent),
            if_none_match: text(&rbuf, &head.if_none_match),
            if_modified_since: text(&rbuf, &head.if_modified_since),
            client: text(&rbuf, &head.lab_client)
                .filter(|c| !c.is_empty())
                .unwrap_or(&peer_ip),
            cookie: text(&rbuf, &head.cookie),
            content_type: text(&rbuf, &head.content_type),
            authorization: text(&rbuf, &head.authorization),
            referer: text(&rbuf, &head.referer),
            tag: text(&rbuf, &head.tag),
            body: &rbuf[head.len..consumed],
        };
        reply.clear();
        handler::handle(&shared, &req, &mut reply, &mut shutdown).await;
        let head_only = req.method == "HEAD";
        let keep_alive = head.keep_alive && !reply.close && !*shutdown.borrow();
        let replied_at = shared.start.elapsed();
        if reply.record {
            shared.recorder.record(&Observation {
                at: arrived,
                replied_at,
                client: req.client,
                method: req.method,
                path: req.target,
                status: reply.status,
                user_agent: req.user_agent,
                if_none_match: req.if_none_match,
                if_modified_since: req.if_modified_since,
                referer: req.referer,
                cookie: req.cookie,
                authorization: req.authorization,
                tag: req.tag,
                bytes: if head_only || reply.status == 304 {
                    0
                } else {
                    reply.body_len()
                },
                wait_until: reply
                    .announce
                    .map(|s| replied_at + Duration::from_secs_f64(s.clamp(0.0, 1e9))),
                fault: reply.fault,
                challenge: reply.challenge,
            });
        }
        let sent = send(
            &mut stream,
            &mut wbuf,
            &reply,
            head_only,
            keep_alive,
            &mut shutdown,
        )
        .await;
        match sent {
            // Dropping without a FIN first, so zero linger turns the close into a RST.
            Sent::Abort => return,
            Sent::Broken => {
                let _ = stream.shutdown().await;
                return;
            }
            Sent::Whole if !keep_alive => {
                let _ = stream.shutdown().await;
                return;
            }
            Sent::Whole => {}
        }
        if consumed >= rbuf.len() {
            rbuf.clear();
        } else {
            rbuf.drain(..consumed);
        }
    }
}

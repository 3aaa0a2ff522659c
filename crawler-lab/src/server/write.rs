//! Writing responses: the status line and headers, and the bodies, whole, streamed or broken
//! on purpose.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::{BodyKind, Reply};
use crate::faults;
use crate::util::put;

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        411 => "Length Required",
        413 => "Content Too Large",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

/// Formats the Date header at most once per second per thread.
fn with_date(f: impl FnOnce(&[u8])) {
    thread_local! {
        static DATE: RefCell<(u64, Vec<u8>)> = const { RefCell::new((u64::MAX, Vec::new())) };
    }
    let now = SystemTime::now();
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    DATE.with_borrow_mut(|(at, text)| {
        if *at != secs {
            *at = secs;
            text.clear();
            text.extend_from_slice(httpdate::fmt_http_date(now).as_bytes());
        }
        f(text);
    });
}

pub(super) async fn refuse(stream: &mut TcpStream, status: u16) -> std::io::Result<()> {
    let mut w = Vec::with_capacity(128);
    put!(
        &mut w,
        "HTTP/1.1 {status} {}\r\nServer: crawler-lab\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        reason(status)
    );
    stream.write_all(&w).await?;
    stream.shutdown().await
}

/// How writing a response ended.
pub(super) enum Sent {
    /// Completely; the connection may be reused.
    Whole,
    /// Incompletely or on purpose broken; close it.
    Broken,
    /// Drop the connection with a reset.
    Abort,
}

impl From<bool> for Sent {
    fn from(ok: bool) -> Self {
        if ok { Sent::Whole } else { Sent::Broken }
    }
}

/// Writes the response.
pub(super) async fn send(
    stream: &mut TcpStream,
    w: &mut Vec<u8>,
    reply: &Reply,
    head_only: bool,
    keep_alive: bool,
    shutdown: &mut watch::Receiver<bool>,
) -> Sent {
    w.clear();
    put!(
        w,
        "HTTP/1.1 {} {}\r\nServer: crawler-lab\r\nDate: ",
        reply.status,
        reason(reply.status)
    );
    match &reply.date {
        Some(d) => w.extend_from_slice(d.as_bytes()),
        None => with_date(|d| w.extend_from_slice(d)),
    }
    w.extend_from_slice(b"\r\n");
    let no_body = reply.status == 304 || (100..200).contains(&reply.status) || reply.status == 204;
    let chunked = matches!(
        reply.kind,
        BodyKind::Endless | BodyKind::Blob { chunked: true, .. }
    );
    if !no_body {
        if chunked {
            w.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
        } else {
            let declared = match reply.kind {
                BodyKind::Overlong => reply.body.len() as u64 / 2,
                BodyKind::ResetHalfway => reply.body.len() as u64,
                _ => reply.body_len(),
            };
            put!(w, "Content-Length: {declared}\r\n");
        }
    }
    w.extend_from_slice(&reply.headers);
    if !keep_alive {
        w.extend_from_slice(b"Connection: close\r\n");
    }
    w.extend_from_slice(b"\r\n");
    if no_body || head_only {
        return stream.write_all(w).await.is_ok().into();
    }
    match &reply.kind {
        BodyKind::Buffered => {
            w.extend_from_slice(&reply.body);
            stream.write_all(w).await.is_ok().into()
        }
        BodyKind::Shared(body) => {
            if body.len() < 16 * 1024 {
                w.extend_from_slice(body);
                stream.write_all(w).await.is_ok().into()
            } else {
                (stream.write_all(w).await.is_ok() && stream.write_all(body).await.is_ok()).into()
            }
        }
        BodyKind::Blob { len, chunked } => (stream.write_all(w).await.is_ok()
            && stream_blob(stream, *len, *chunked, shutdown).await)
            .into(),
        BodyKind::Endless => {
            (stream.write_all(w).await.is_ok() && stream_endless(stream, shutdown).await).into()
        }
        BodyKind::Trickle => {
            if stream.write_all(w).await.is_err() {
                return Sent::Broken;
            }
            for piece in reply.body.chunks(faults::SLOW_PIECE) {
                if stream.write_all(piece).await.is_err() || stream.flush().await.is_err() {
                    return Sent::Broken;
                }
                tokio::select! {
                    _ = tokio::time::sleep(faults::SLOW_INTERVAL) => {}
                    _ = shutdown.changed() => return Sent::Broken,
                }
            }
            Sent::Whole
        }
        BodyKind::ResetHalfway => {
            w.extend_from_slice(&reply.body[..reply.body.len() / 2]);
            let _ = stream.write_all(w).await;
            let _ = stream.flush().await;
            // Zero linger turns the close into a RST: the client sees a reset, not an EOF.
            let _ = stream.set_zero_linger();
            Sent::Abort
        }
        BodyKind::Overlong => {
            w.extend_from_slice(&reply.body);
            let _ = stream.write_all(w).await;
            Sent::Broken
        }
    }
}

/// Repeating filler for generated bodies.
fn filler() -> &'static [u8] {
    static FILL: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    FILL.get_or_init(|| {
        let line = b"crawler-lab generated body: 0123456789 abcdefghijklmnopqrstuvwxyz\n";
        line.iter().copied().cycle().take(64 * 1024).collect()
    })
}

async fn stream_blob(
    stream: &mut TcpStream,
    len: u64,
    chunked: bool,
    shutdown: &mut watch::Receiver<bool>,
) -> bool {
    let fill = filler();
    let mut left = len;
    let mut frame = Vec::with_capacity(16);
    while left > 0 {
        if *shutdown.borrow() {
            return false;
        }
        let n = left.min(fill.len() as u64) as usize;
        if chunked {
            frame.clear();
            put!(&mut frame, "{n:x}\r\n");
            if stream.write_all(&frame).await.is_err() {
                return false;
            }
        }
        if stream.write_all(&fill[..n]).await.is_err() {
            return false;
        }
        if chunked && stream.write_all(b"\r\n").await.is_err() {
            return false;
        }
        left -= n as u64;
    }
    !chunked || stream.write_all(b"0\r\n\r\n").await.is_ok()
}

async fn stream_endless(stream: &mut TcpStream, shutdown: &mut watch::Receiver<bool>) -> bool {
    let chunk = &filler()[..16 * 1024];
    let mut frame = Vec::with_capacity(chunk.len() + 16);
    put!(&mut frame, "{:x}\r\n", chunk.len());
    frame.extend_from_slice(chunk);
    frame.extend_from_slice(b"\r\n");
    let started = tokio::time::Instant::now();
    let mut sent = 0u64;
    // Bounded so a forgotten client cannot keep the lab busy forever.
    while sent < faults::ENDLESS_CAP && started.elapsed() < faults::ENDLESS_TIME {
        if *shutdown.borrow() || stream.write_all(&frame).await.is_err() {
            return false;
        }
        sent += chunk.len() as u64;
    }
    false
}

//! The wire: the reqwest client, one send with its body cap, and the class of each
//! transport error.

use bytes::BytesMut;
use crawler_core::{Failure, FailureKind, HttpVersion, Request, Settings, TlsVersion, Url};

use super::HttpDownloader;
use crate::error::Error;
use crate::guard::{AddressPolicy, Guarded, REFUSED};

impl HttpDownloader {
    /// Send `req` and read its response whole (at most `max_body` bytes of body); `proxy`
    /// is set to the proxy it goes through, if any, before it is sent.
    pub(super) async fn send(
        &self,
        req: &Request,
        max_body: u64,
        proxy: &mut Option<std::sync::Arc<str>>,
    ) -> Result<Sent, Failure> {
        let method = http::Method::from_bytes(req.method.as_bytes()).map_err(|_| {
            Failure::new(
                FailureKind::Other,
                format!("invalid method '{}'", req.method),
            )
        })?;
        let (client, via) = self.client_for(req)?;
        let via_proxy = via.is_some();
        *proxy = via;
        let mut builder = client.request(method, req.url.clone());
        for (k, v) in &req.headers {
            builder = builder.header(k.as_str(), v.as_str());
        }
        if let Some(body) = &req.body {
            builder = builder.body(body.clone());
        }
        let request = builder.build().map_err(classify)?;
        // Only an archive needs the request as sent; without one nothing is copied.
        let request_headers = self
            .tap
            .as_ref()
            .map(|tap| tap.wire_headers(request.headers(), request.url()));
        let mut resp = client.execute(request).await.map_err(|e| {
            if via_proxy {
                classify_via_proxy(e)
            } else {
                classify(e)
            }
        })?;
        let status = resp.status().as_u16();
        let version = resp.version();
        let url = resp.url().clone();
        let remote = resp.remote_addr().map(|a| a.ip());
        let tls_version = resp
            .extensions()
            .get::<reqwest::tls::TlsInfo>()
            .and_then(reqwest::tls::TlsInfo::version)
            .map(tls_version_name);
        if let Some(hook) = &self.headers_hook
            && let Some(why) = hook.headers_received(req, status, resp.headers())
        {
            return Err(Failure {
                kind: FailureKind::DownloadStopped,
                message: why,
                status: Some(status),
                bytes: 0,
            });
        }
        if let Some(len) = resp.content_length() {
            // A declared length over the cap fails before a byte of body is read. (With
            // compression the declared length is the compressed size; the streaming check
            // below also covers the decompressed size.)
            if len > max_body && resp.headers().get("content-encoding").is_none() {
                return Err(too_large(max_body, status));
            }
        }
        let headers = std::mem::take(resp.headers_mut());
        let mut body = BytesMut::new();
        // A body that fails after the head arrived carries the status it came with (as
        // `too_large` does): the server answered, and its slot reads it as an answer, not as
        // a refused connection; the page is retried as a connection failure.
        // What was read before a failure is counted as received (the stats' bytes): a
        // 10 MiB body aborted at the cap cost 10 MiB of the network.
        while let Some(chunk) = resp.chunk().await.map_err(|e| Failure {
            status: Some(status),
            bytes: body.len() as u64,
            ..classify(e)
        })? {
            if body.len() as u64 + chunk.len() as u64 > max_body {
                return Err(Failure {
                    bytes: (body.len() + chunk.len()) as u64,
                    ..too_large(max_body, status)
                });
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Sent {
            url,
            status,
            headers,
            body: body.freeze(),
            remote,
            version,
            tls_version,
            request_headers,
        })
    }
}

/// A TLS version as the request log names it.
fn tls_version_name(version: reqwest::tls::Version) -> &'static str {
    use reqwest::tls::Version;
    match version {
        Version::TLS_1_3 => "TLSv1.3",
        Version::TLS_1_2 => "TLSv1.2",
        Version::TLS_1_1 => "TLSv1.1",
        Version::TLS_1_0 => "TLSv1.0",
        _ => "TLS?",
    }
}

/// A response read in full.
pub(super) struct Sent {
    pub(super) url: Url,
    pub(super) status: u16,
    pub(super) headers: http::HeaderMap,
    pub(super) body: bytes::Bytes,
    /// The address it came from (the proxy's, behind one).
    pub(super) remote: Option<std::net::IpAddr>,
    /// The HTTP version it came in.
    pub(super) version: http::Version,
    /// The TLS version of its connection, when the client records it (see `build_client`).
    pub(super) tls_version: Option<&'static str>,
    /// The request headers as sent, when an archive taps the exchanges.
    pub(super) request_headers: Option<http::HeaderMap>,
}

fn too_large(cap: u64, status: u16) -> Failure {
    Failure {
        kind: FailureKind::TooLarge,
        message: format!("body larger than max_body_size ({cap} bytes)"),
        status: Some(status),
        bytes: 0,
    }
}

/// How long an idle keep-alive connection is kept for reuse.
const POOL_IDLE: std::time::Duration = std::time::Duration::from_secs(20);

/// The client for pages and robots.txt. It follows no redirect: a 3xx goes back to the
/// engine, whose next hop is a new request through the target's robots.txt and its host's
/// slot (robots.txt redirects are followed, counted and checked by the robots cache). Its
/// resolver refuses what `policy` refuses for requests that may (`private_ok`) or may not
/// reach private space.
pub(super) fn build_client(
    settings: &Settings,
    route: &Route,
    policy: &std::sync::Arc<AddressPolicy>,
    resolver: &std::sync::Arc<crate::dns::Resolver>,
    private_ok: bool,
) -> Result<reqwest::Client, Error> {
    let mut builder = reqwest::Client::builder().dns_resolver(std::sync::Arc::new(Guarded {
        resolver: std::sync::Arc::clone(resolver),
        policy: std::sync::Arc::clone(policy),
        private_ok,
    }));
    builder = match route.http_version {
        // ALPN offers h2 then http/1.1 and the server picks; plain http stays on HTTP/1.1.
        HttpVersion::Auto => builder,
        HttpVersion::Http1 => builder.http1_only(),
        // ALPN offers h2 alone (a server without it fails the handshake), and plain http
        // speaks HTTP/2 from the first byte (h2c with prior knowledge).
        HttpVersion::Http2 => builder.http2_prior_knowledge(),
    };
    if !route.tls_verify {
        builder = builder.tls_danger_accept_invalid_certs(true);
    }
    if settings.tls_min_version == TlsVersion::Tls13 {
        builder = builder.tls_version_min(reqwest::tls::Version::TLS_1_3);
    }
    if let Some(path) = settings.tls_ca_file.as_deref() {
        builder = builder.tls_certs_merge(ca_certificates(path)?);
    }
    if let Some((cert, key)) = &route.client_cert {
        builder = builder.identity(client_identity(cert, key.as_deref())?);
    }
    if let Some(proxy) = route.proxy.as_deref() {
        // Echoed redacted: a proxy URL often carries a password.
        let proxy = reqwest::Proxy::all(proxy).map_err(|e| {
            Error::new(
                format!(
                    "invalid proxy URL '{}'",
                    crawler_core::redact::redact_url(proxy)
                ),
                e,
            )
        })?;
        builder = builder.proxy(proxy);
    }
    builder
        .user_agent(settings.user_agent.as_str())
        .connect_timeout(settings.connect_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .gzip(true)
        .brotli(true)
        .deflate(true)
        // zstd as the others: decoded while streaming, so `send`'s cap on the decoded bytes
        // stops a zstd bomb at `max_body_size` as it stops a gzip one.
        .zstd(true)
        .tcp_nodelay(true)
        // The TLS version of each response's connection, for the debug request log. On
        // whatever the log level (a crawl's `log_level` applies after its clients are
        // built): each response over TLS then carries a copy of the server's certificate
        // (a kilobyte or two, small beside decrypting its body).
        .tls_info(true)
        // A broad crawl touches each host briefly: an idle keep-alive connection costs a
        // file descriptor and ~20 KiB until it expires, so keep no more per host than the
        // host may use at once, and not for long (servers commonly close idle connections
        // after 5 to 75 s; a host paced slower than this reconnects, which it can afford).
        .pool_max_idle_per_host(settings.concurrency_per_host.max(1))
        .pool_idle_timeout(POOL_IDLE)
        // No resend hidden in the transport: a stream the server refused (REFUSED_STREAM) or
        // a connection it is closing (GOAWAY) comes back as a `connection` failure, which the
        // host's slot sees and the engine retries after its backoff, so a server shedding
        // load is not sent the same request again at once, and nothing is lost.
        .retry(reqwest::retry::never())
        .build()
        .map_err(|e| Error::new("cannot build the HTTP client", e))
}

/// What a request's client depends on beside the address policy: the options `[[hosts]]`
/// rules may set per host. Requests of hosts with the same options share one client (and its
/// connection pool).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Route {
    /// The HTTP version spoken.
    pub(super) http_version: HttpVersion,
    /// Whether the server's certificate is verified.
    pub(super) tls_verify: bool,
    /// The proxy requests go through (`None`: direct, or the environment's `HTTP_PROXY`).
    /// A client per distinct proxy: each has its own connection pool, so a request never
    /// rides a connection to another proxy.
    pub(super) proxy: Option<String>,
    /// The client certificate's PEM file, and its key's when apart (`tls_client_cert`,
    /// `tls_client_key`), shown to servers that ask for one.
    pub(super) client_cert: Option<(String, Option<String>)>,
}

impl Route {
    /// The route of hosts no `[[hosts]]` rule changes.
    pub(super) fn of(settings: &Settings) -> Self {
        Self {
            http_version: settings.http_version,
            tls_verify: true,
            proxy: non_empty(settings.proxy.as_deref()),
            client_cert: client_cert(
                settings.tls_client_cert.as_deref(),
                settings.tls_client_key.as_deref(),
            ),
        }
    }

    /// The route of the hosts `rule` matches.
    pub(super) fn of_rule(settings: &Settings, rule: &crawler_core::HostRule) -> Self {
        Self {
            http_version: rule.http_version.unwrap_or(settings.http_version),
            tls_verify: rule.tls_verify.unwrap_or(true),
            proxy: non_empty(rule.proxy.as_deref())
                .or_else(|| non_empty(settings.proxy.as_deref())),
            // A rule's certificate comes with its own key (or none), never the crawl's.
            client_cert: match rule.tls_client_cert.as_deref() {
                Some(cert) => client_cert(Some(cert), rule.tls_client_key.as_deref()),
                None => client_cert(
                    settings.tls_client_cert.as_deref(),
                    settings.tls_client_key.as_deref(),
                ),
            },
        }
    }

    /// This route through `proxy` instead (a request's own proxy).
    pub(super) fn via(&self, proxy: &str) -> Self {
        Self {
            proxy: non_empty(Some(proxy)),
            ..self.clone()
        }
    }
}

/// A proxy setting's URL, trimmed; `None` when unset or blank.
fn non_empty(proxy: Option<&str>) -> Option<String> {
    proxy
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
}

/// The client certificate's files, trimmed; `None` without a certificate.
fn client_cert(cert: Option<&str>, key: Option<&str>) -> Option<(String, Option<String>)> {
    let cert = non_empty(cert)?;
    Some((cert, non_empty(key)))
}

/// The client identity of the PEM file `cert` (chain and key, or chain alone with the key
/// in `key`).
fn client_identity(cert: &str, key: Option<&str>) -> Result<reqwest::Identity, Error> {
    let read = |path: &str, what: &str| {
        std::fs::read(path).map_err(|e| Error::new(format!("cannot read {what} '{path}'"), e))
    };
    let mut pem = read(cert, "tls_client_cert")?;
    if let Some(key) = key {
        pem.push(b'\n');
        pem.extend(read(key, "tls_client_key")?);
    }
    // reqwest wants the key and the chain in one PEM buffer; it reports neither a missing
    // key nor a missing certificate by name, so both are checked here first.
    let text = String::from_utf8_lossy(&pem);
    if !text.contains("-----BEGIN CERTIFICATE-----") {
        return Err(Error::new(
            format!("tls_client_cert '{cert}' holds no certificate"),
            std::io::Error::other("no -----BEGIN CERTIFICATE----- block"),
        ));
    }
    if !text.contains("PRIVATE KEY-----") {
        return Err(Error::new(
            format!("no private key for tls_client_cert '{cert}' (in it, or in tls_client_key)"),
            std::io::Error::other("no -----BEGIN ... PRIVATE KEY----- block"),
        ));
    }
    reqwest::Identity::from_pem(&pem).map_err(|e| {
        Error::new(
            format!("tls_client_cert '{cert}' and its key are not a PEM certificate and key"),
            e,
        )
    })
}

/// The certificates of the `tls_ca_file` PEM file at `path`.
fn ca_certificates(path: &str) -> Result<Vec<reqwest::Certificate>, Error> {
    let pem = std::fs::read(path)
        .map_err(|e| Error::new(format!("cannot read tls_ca_file '{path}'"), e))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem)
        .map_err(|e| Error::new(format!("tls_ca_file '{path}' is not PEM"), e))?;
    if certs.is_empty() {
        return Err(Error::new(
            format!("tls_ca_file '{path}' holds no certificate"),
            std::io::Error::other("no -----BEGIN CERTIFICATE----- block"),
        ));
    }
    Ok(certs)
}

/// Whether the error's causes include the connection failing under it (reset, aborted,
/// closed before the message's end).
fn cut_off(e: &reqwest::Error) -> bool {
    use std::io::ErrorKind::{
        BrokenPipe, ConnectionAborted, ConnectionReset, NotConnected, UnexpectedEof,
    };
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                ConnectionReset | ConnectionAborted | BrokenPipe | NotConnected | UnexpectedEof
            )
        {
            return true;
        }
        cause = c.source();
    }
    false
}

/// Put a reqwest error of a request sent through a proxy in its class: a connection that
/// failed before any response is the proxy's (the only connection an `http://` request
/// makes is to the proxy; an `https://` one's tunnel is the proxy's answer to `CONNECT`),
/// so it is a `proxy` failure, not the target's (whose pace it does not lower).
fn classify_via_proxy(e: reqwest::Error) -> Failure {
    let connect = e.is_connect();
    let mut failure = classify(e);
    let tunnel = failure.message.to_ascii_lowercase().contains("tunnel");
    if failure.kind == FailureKind::Connection && (connect || tunnel) {
        failure.kind = FailureKind::Proxy;
        failure.message = format!("proxy failed: {}", failure.message);
    }
    // A proxy URL's password never reaches a message (registered when the route was made).
    failure.message = crawler_core::redact::scrub(&failure.message).into_owned();
    failure
}

/// Put a reqwest error in the class the stats and the retry policy use.
pub(super) fn classify(e: reqwest::Error) -> Failure {
    let chain = crate::error_chain::error_chain(&e);
    let lower = chain.to_ascii_lowercase();
    let kind = if lower.contains(REFUSED) {
        FailureKind::Forbidden
    } else if e.is_redirect() {
        FailureKind::TooManyRedirects
    } else if e.is_timeout() {
        FailureKind::Timeout
    } else if lower.contains("message head is too large") {
        // More headers, or longer ones, than the HTTP library accepts: the same request
        // gets the same answer, so it is not retried.
        return Failure {
            kind: FailureKind::TooLarge,
            message: format!("response headers over the HTTP client's limits: {chain}"),
            status: None,
            bytes: 0,
        };
    } else if lower.contains("http2 error") {
        // The HTTP/2 layer failed under the request: a stream the server refused
        // (REFUSED_STREAM), a connection it closed (GOAWAY), a reset or protocol error. A
        // connection failure whatever the request was: another attempt, on a new stream or
        // connection, may well succeed (before the decode check below: reqwest reports a
        // reset under a compressed body as a decode error).
        FailureKind::Connection
    } else if cut_off(&e) {
        // A connection reset or closed mid-exchange (a body shorter than its
        // Content-Length, a reset mid-body): reqwest reports a body cut while decoding as a
        // decode error, but the network failed, not the encoding, and another attempt may
        // well get the whole body.
        FailureKind::Connection
    } else if lower.contains("dns error") || lower.contains("failed to lookup address") {
        FailureKind::Dns
    } else if lower.contains("noapplicationprotocol") {
        // The server and the client have no HTTP version in common in the TLS handshake
        // (ALPN): `http_version = "2"` against a server without HTTP/2. Not retried: the
        // same server will answer the same.
        return Failure {
            kind: FailureKind::Tls,
            message: format!(
                "the server offers no HTTP version this request may use (http_version = \"2\" \
                 against a server without HTTP/2?): {chain}"
            ),
            status: None,
            bytes: 0,
        };
    } else if (lower.contains("tls") || lower.contains("handshake"))
        && (lower.contains("reset")
            || lower.contains("broken pipe")
            || lower.contains("unexpected eof")
            || lower.contains("connection closed"))
    {
        // The peer hung up mid-handshake (an overloaded TLS terminator): the network failed,
        // not the certificate, and another attempt may well succeed.
        FailureKind::Connection
    } else if lower.contains("certificate")
        || lower.contains("tls")
        || lower.contains("handshake")
        // rustls's words for a handshake the peer refused (an alert: no TLS version in
        // common under `tls_min_version`, no cipher) or could not agree on: the same server
        // answers the same, so not retried.
        || lower.contains("received fatal alert")
        || lower.contains("peer is incompatible")
    {
        FailureKind::Tls
    } else if e.is_decode() {
        FailureKind::Decode
    } else if e.is_connect() || e.is_body() || e.is_request() {
        FailureKind::Connection
    } else {
        FailureKind::Other
    };
    Failure {
        kind,
        message: chain,
        status: e.status().map(|s| s.as_u16()),
        bytes: 0,
    }
}

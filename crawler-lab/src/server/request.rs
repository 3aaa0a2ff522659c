//! The request as the handler sees it.

/// A parsed request, borrowing the connection's read buffer.
pub(crate) struct Req<'a> {
    pub method: &'a str,
    pub target: &'a str,
    pub user_agent: Option<&'a str>,
    pub if_none_match: Option<&'a str>,
    pub if_modified_since: Option<&'a str>,
    pub client: &'a str,
    /// `Cookie` request header.
    pub cookie: Option<&'a str>,
    /// `Content-Type` request header (the login form's POST).
    pub content_type: Option<&'a str>,
    /// `Authorization` request header.
    pub authorization: Option<&'a str>,
    /// `Referer` request header.
    pub referer: Option<&'a str>,
    /// `X-Crawl-Tag` request header: a free-form tag a client may send so tests can see
    /// which requests a middleware touched.
    pub tag: Option<&'a str>,
    /// The request body (at most `MAX_BODY` bytes).
    pub body: &'a [u8],
}

impl Req<'_> {
    pub(crate) fn path(&self) -> &str {
        self.target.split_once('?').map_or(self.target, |(p, _)| p)
    }

    pub(crate) fn query(&self, key: &str) -> Option<&str> {
        let (_, q) = self.target.split_once('?')?;
        q.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k == key).then_some(v)
        })
    }
}

//! Starting, inspecting and stopping a lab server.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::{Error, Kind};
use crate::faults::FaultKind;
use crate::handler::{Live, Shared};
use crate::recorder::Recorder;
use crate::scenario::Scenario;
use crate::site::{CATEGORIES, Catalogue};
use crate::sitemap::Sitemaps;

/// Smallest catalogue.
pub const MIN_BOOKS: usize = 100;
/// Largest catalogue.
pub const MAX_BOOKS: usize = 100_000;
/// Catalogue size when neither the builder nor the scenario sets one.
pub const DEFAULT_BOOKS: usize = 1000;
/// "You might also like" links on a book page by default.
const DEFAULT_RELATED: u32 = 4;
/// Requests the recorder stores by default before it only counts them.
pub const DEFAULT_RECORD_LIMIT: usize = 1_000_000;
/// Default allowance for requests already in flight when a wait was announced.
pub const DEFAULT_GRACE: Duration = Duration::from_millis(100);

/// Configures a [`Lab`]; see [`Lab::builder`].
#[derive(Clone, Debug)]
pub struct LabBuilder {
    books: Option<usize>,
    seed: u64,
    ip: IpAddr,
    port: u16,
    scenario: Scenario,
    by_client: Vec<(String, Scenario)>,
    by_prefix: Vec<(String, Scenario)>,
    grace: Duration,
    record_limit: usize,
    mutations: Vec<f64>,
    script: Option<crate::script::Script>,
    related: u32,
    js_assets: Option<String>,
}

impl Default for LabBuilder {
    fn default() -> Self {
        Self {
            books: None,
            seed: 1,
            ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 0,
            scenario: Scenario::open(),
            by_client: Vec::new(),
            by_prefix: Vec::new(),
            grace: DEFAULT_GRACE,
            record_limit: DEFAULT_RECORD_LIMIT,
            mutations: Vec::new(),
            script: None,
            related: DEFAULT_RELATED,
            js_assets: None,
        }
    }
}

impl LabBuilder {
    /// Answer requests with `script` first: what it returns is sent as is (and recorded);
    /// `None` hands the request on to the scenario and the site. See the crate docs.
    pub fn script(
        mut self,
        script: impl Fn(&crate::ScriptRequest<'_>) -> Option<crate::ScriptReply> + Send + Sync + 'static,
    ) -> Self {
        self.script = Some(crate::script::Script::new(script));
        self
    }

    /// Serve the JavaScript catalogue's scripts and images (`/js/page-N.html` loads
    /// `BASE/js/app.js` and `BASE/js/cover-N.png`) from `base`, another lab (give it a host
    /// name of its own, e.g. `http://localhost:PORT/`, so it is a second host with its own
    /// robots.txt and budget). Default: this lab.
    pub fn js_assets(mut self, base: impl Into<String>) -> Self {
        self.js_assets = Some(base.into());
        self
    }

    /// Catalogue size, from 100 to 100,000 books (checked by [`LabBuilder::start`]). Default:
    /// the scenario's preference (2,000 for chaos), else 1,000.
    pub fn books(mut self, books: usize) -> Self {
        self.books = Some(books);
        self
    }

    /// Seed of every generated value: titles, prices, categories, chaos faults, mutations.
    /// Default 1.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The scenario for every request no more specific rule claims. Default: open.
    pub fn scenario(mut self, scenario: Scenario) -> Self {
        self.scenario = scenario;
        self
    }

    /// A scenario for one client key (`X-Lab-Client` header or peer IP), checked before the
    /// path rules. Each rule keeps its own limiter state.
    pub fn scenario_for_client(mut self, client: impl Into<String>, scenario: Scenario) -> Self {
        self.by_client.push((client.into(), scenario));
        self
    }

    /// A scenario for paths starting with `prefix` (the longest matching prefix wins).
    pub fn scenario_for_prefix(mut self, prefix: impl Into<String>, scenario: Scenario) -> Self {
        self.by_prefix.push((prefix.into(), scenario));
        self
    }

    /// The address to listen on. Default 127.0.0.1; tests that build a network namespace of
    /// their own give the lab a public-looking address there (the address policy's tests).
    pub fn ip(mut self, ip: IpAddr) -> Self {
        self.ip = ip;
        self
    }

    /// Port to listen on; 0 (the default) picks a free one.
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Allowance after a wait is announced during which arriving requests are not counted as
    /// violations (they were already in flight). Default 100 ms.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// How many requests the recorder stores; later ones are only counted. Default 1,000,000.
    pub fn record_limit(mut self, limit: usize) -> Self {
        self.record_limit = limit;
        self
    }

    /// Starts the lab already mutated (as if [`Lab::mutate`] had been called), so a second
    /// process with the same seed and mutations serves the same changed site.
    pub fn mutate(mut self, fraction: f64) -> Self {
        self.mutations.push(fraction.clamp(0.0, 1.0));
        self
    }

    /// How many "you might also like" links each book page carries (default 4, at most
    /// 1,000). Benchmarks raise it for a heavier page: 44 gives book pages of about 7 KB with
    /// 60 links, the profile of many real shops.
    pub fn related_links(mut self, n: u32) -> Self {
        self.related = n.min(1_000);
        self
    }

    /// Binds 127.0.0.1 and starts serving on the current tokio runtime.
    pub async fn start(self) -> Result<Lab, Error> {
        let books = self.books.or(self.scenario.books).unwrap_or(DEFAULT_BOOKS);
        if !(MIN_BOOKS..=MAX_BOOKS).contains(&books) {
            return Err(Error::new(Kind::BooksOutOfRange {
                got: books,
                min: MIN_BOOKS,
                max: MAX_BOOKS,
            }));
        }
        for s in std::iter::once(&self.scenario)
            .chain(self.by_client.iter().map(|(_, s)| s))
            .chain(self.by_prefix.iter().map(|(_, s)| s))
        {
            s.validate()?;
        }
        if let Some((p, _)) = self.by_prefix.iter().find(|(p, _)| !p.starts_with('/')) {
            return Err(Error::invalid(format!(
                "path prefix `{p}` must start with `/`"
            )));
        }
        let addr = SocketAddr::from((self.ip, self.port));
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| Error::new(Kind::Bind { addr, source }))?;
        let addr = listener
            .local_addr()
            .map_err(|source| Error::new(Kind::Bind { addr, source }))?;
        let base = format!("http://{addr}/");
        let mut by_prefix: Vec<(String, Live)> = self
            .by_prefix
            .into_iter()
            .map(|(p, s)| (p, Live::new(s)))
            .collect();
        by_prefix.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        let shared = Arc::new(Shared {
            start: Instant::now(),
            base: base.clone(),
            catalogue: Catalogue::new(self.seed, books as u32, self.mutations)
                .with_related(self.related),
            sitemaps: Sitemaps::default(),
            recorder: Recorder::new(self.grace, self.record_limit),
            default: Live::new(self.scenario),
            by_client: self
                .by_client
                .into_iter()
                .map(|(c, s)| (c, Live::new(s)))
                .collect(),
            by_prefix,
            script: self.script,
            js_assets: self.js_assets,
        });
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(crate::server::serve(listener, shared.clone(), stopped));
        Ok(Lab {
            shared,
            addr,
            url: base,
            stop,
            task: Some(task),
        })
    }
}

/// Facts about one book, for tests that check what a crawler extracted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Book {
    /// Id, from 1.
    pub id: u32,
    /// Path of the detail page: `/catalogue/book-ID.html`.
    pub path: String,
    /// Full title (unique: it ends with the id).
    pub title: String,
    /// Price as the page shows it, e.g. `£12.34`.
    pub price: String,
    /// Copies in stock, as in `In stock (K available)`.
    pub stock: u32,
    /// Category slug.
    pub category: &'static str,
}

/// A running lab server on 127.0.0.1. Stops on [`Lab::shutdown`] or when dropped.
pub struct Lab {
    shared: Arc<Shared>,
    addr: SocketAddr,
    url: String,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Lab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lab")
            .field("url", &self.url)
            .field("scenario", &self.shared.default.scenario.name())
            .field("books", &self.shared.catalogue.books)
            .finish()
    }
}

impl Lab {
    /// A builder with the defaults: 1,000 books, seed 1, open scenario, a free port.
    pub fn builder() -> LabBuilder {
        LabBuilder::default()
    }

    /// `http://127.0.0.1:PORT/` (or the address given to [`LabBuilder::ip`]), with the
    /// trailing slash.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// The lab's URL joined with a path (`/catalogue/page-1.html` or `catalogue/page-1.html`).
    pub fn url_for(&self, path: &str) -> String {
        format!("{}{}", self.url, path.trim_start_matches('/'))
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A handle on the request log.
    pub fn recorder(&self) -> Recorder {
        self.shared.recorder.clone()
    }

    /// The default scenario's name.
    pub fn scenario_name(&self) -> &str {
        self.shared.default.scenario.name()
    }

    /// Catalogue size.
    pub fn books(&self) -> usize {
        self.shared.catalogue.books as usize
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.shared.catalogue.seed
    }

    /// Number of listing pages in `/catalogue/` (20 books each).
    pub fn catalogue_pages(&self) -> u32 {
        self.shared.catalogue.catalogue_pages()
    }

    /// What the site says about a book, or `None` outside `1..=books`.
    pub fn book(&self, id: u32) -> Option<Book> {
        let cat = &self.shared.catalogue;
        if !cat.contains(id) {
            return None;
        }
        let rev = cat.revision(id);
        let cents = cat.price_cents(id, rev);
        Some(Book {
            id,
            path: format!("/catalogue/book-{id}.html"),
            title: cat.title(id),
            price: format!("\u{a3}{}.{:02}", cents / 100, cents % 100),
            stock: cat.stock(id, rev),
            category: CATEGORIES[cat.category_of(id)].0,
        })
    }

    /// The ids of the books the members' area lists for [`crate::USERNAME`], in page order
    /// (`/account/books/ID.html`).
    pub fn account_books(&self) -> Vec<u32> {
        let cat = &self.shared.catalogue;
        crate::account::account_books(cat.seed, cat.books)
    }

    /// Changes about `fraction` of the books (price, stock, description, and so their ETag and
    /// Last-Modified, and the listings and sitemaps that show them); returns the changed ids.
    /// Which books change depends only on the seed and how many mutations came before.
    pub fn mutate(&self, fraction: f64) -> Vec<u32> {
        self.shared.catalogue.mutate(fraction)
    }

    /// How many mutations the site has had.
    pub fn version(&self) -> usize {
        self.shared.catalogue.version()
    }

    /// The fault a path (or full URL) answers with for a client without its own scenario:
    /// chaos book pages and the `/fault/` endpoints; `None` for a healthy page.
    pub fn expected_fault(&self, path: &str) -> Option<FaultKind> {
        self.shared.expected_fault(path)
    }

    /// Every book page that answers with a fault, with its kind (also served as JSON at
    /// `/_lab/faults`).
    pub fn faulty_paths(&self) -> Vec<(String, FaultKind)> {
        (1..=self.shared.catalogue.books)
            .filter_map(|id| {
                let p = format!("/catalogue/book-{id}.html");
                self.expected_fault(&p).map(|k| (p, k))
            })
            .collect()
    }

    /// Forgets recorded requests and every client's limiter and block state.
    pub fn reset(&self) {
        self.shared.recorder.clear();
        self.shared.all_live().for_each(Live::reset);
    }

    /// Stops accepting, lets responses in progress finish (up to 5 s; endless and trickling
    /// bodies stop at once), and returns when the server is down.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // The server task sees the signal and winds down on its own.
        let _ = self.stop.send(true);
    }
}

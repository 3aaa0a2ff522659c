//! Item pipelines: ordered, async stages every item passes through before the feeds.

use std::future::Future;
use std::pin::Pin;

use crate::error::Result;
use crate::settings::Settings;
use crate::subrequest::SubRequests;

/// What a pipeline stage decided about an item.
#[derive(Debug)]
pub enum Processed<I> {
    /// Pass the (possibly changed) item on to the next stage.
    Keep(I),
    /// Drop the item; the reason is logged and counted.
    Drop(String),
}

/// One stage of item processing (validation, cleaning, de-duplication, storage).
///
/// Stages run in the order they were added. Items from different pages may be processed
/// concurrently, so a stage with state keeps it behind a lock.
pub trait Pipeline<I>: Send + Sync + 'static {
    /// Given the crawl this stage is part of, once, before [`Pipeline::open`]: its settings,
    /// and a way to send requests through it (a stage that downloads what items name, as
    /// the files pipeline does, fetches under the crawl's politeness). Default: ignored.
    fn attach(&self, _crawl: &PipelineContext) {}

    /// Called once before the crawl starts.
    fn open(&self) -> impl Future<Output = Result<()>> + Send {
        async { Ok(()) }
    }

    /// Process one item.
    fn process(&self, item: I) -> impl Future<Output = Result<Processed<I>>> + Send;

    /// Called once after the last item.
    fn close(&self) -> impl Future<Output = Result<()>> + Send {
        async { Ok(()) }
    }

    /// Whether this stage wants the whole crawl closed, and why: asked after each item it
    /// processes (kept or dropped). Return a reason (a quota reached, a store full) and the
    /// crawl stops as if a spider called
    /// [`Output::close_spider`](crate::Output::close_spider): no new requests, those in
    /// flight finish, the reason is [`Stats::close_reason`](crate::Stats::close_reason).
    /// Default: never.
    fn close_crawl(&self) -> Option<String> {
        None
    }
}

/// What a pipeline stage may use of its crawl ([`Pipeline::attach`]).
#[derive(Debug, Clone)]
pub struct PipelineContext {
    settings: std::sync::Arc<Settings>,
    subrequests: SubRequests,
    /// Whether a stage took the sub-request handle (so items may wait for fetches).
    fetches: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl PipelineContext {
    /// The context of a crawl with these settings, whose sub-requests go to `subrequests`.
    pub fn new(settings: std::sync::Arc<Settings>, subrequests: SubRequests) -> Self {
        Self {
            settings,
            subrequests,
            fetches: std::sync::Arc::default(),
        }
    }

    /// The crawl's settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Requests sent through the crawl: queued for their host's slot (paced, held with
    /// the pages), gated by robots.txt, retried, counted in `Stats::subrequests`.
    pub fn subrequests(&self) -> &SubRequests {
        self.fetches
            .store(true, std::sync::atomic::Ordering::Relaxed);
        &self.subrequests
    }

    /// Whether a stage took [`PipelineContext::subrequests`]: its items may wait for
    /// fetches, so the engine does not count a page whose items are in the pipelines
    /// against `concurrency` (the fetches they wait for need a turn).
    pub fn fetches(&self) -> bool {
        self.fetches.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A boxed future, as [`DynPipeline`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Object-safe form of [`Pipeline`], so stages of different types share one list.
/// The engine keeps its stages as `Box<dyn DynPipeline<Item>>`; implement [`Pipeline`],
/// never this.
pub trait DynPipeline<I>: Send + Sync {
    /// [`Pipeline::attach`].
    fn attach(&self, crawl: &PipelineContext);
    /// [`Pipeline::open`], boxed.
    fn open(&self) -> BoxFuture<'_, Result<()>>;
    /// [`Pipeline::process`], boxed.
    fn process(&self, item: I) -> BoxFuture<'_, Result<Processed<I>>>;
    /// [`Pipeline::close`], boxed.
    fn close(&self) -> BoxFuture<'_, Result<()>>;
    /// [`Pipeline::close_crawl`].
    fn close_crawl(&self) -> Option<String>;
    /// The stage's type name, for logs.
    fn name(&self) -> &'static str;
}

impl<I: Send + 'static, P: Pipeline<I>> DynPipeline<I> for P {
    fn attach(&self, crawl: &PipelineContext) {
        Pipeline::attach(self, crawl);
    }
    fn open(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(Pipeline::open(self))
    }
    fn process(&self, item: I) -> BoxFuture<'_, Result<Processed<I>>> {
        Box::pin(Pipeline::process(self, item))
    }
    fn close(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(Pipeline::close(self))
    }
    fn close_crawl(&self) -> Option<String> {
        Pipeline::close_crawl(self)
    }
    fn name(&self) -> &'static str {
        std::any::type_name::<P>()
    }
}

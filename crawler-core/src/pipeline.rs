//! Item pipelines: ordered, async stages every item passes through before the feeds.

use std::future::Future;
use std::pin::Pin;

use crate::error::Result;

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

/// A boxed future, as [`DynPipeline`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Object-safe form of [`Pipeline`], so stages of different types share one list.
/// The engine keeps its stages as `Box<dyn DynPipeline<Item>>`; implement [`Pipeline`],
/// never this.
pub trait DynPipeline<I>: Send + Sync {
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

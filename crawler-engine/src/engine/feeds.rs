//! The feed writer thread: items in, leases out once their items are on disk (for a
//! batched feed or an object: once their batch is complete).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::feed_writer::FeedWriter;
use crawler_core::Lease;
use crawler_core::Result;

/// Items buffered between the workers and the feed writer; a slow disk slows the crawl
/// instead of growing memory.
const FEED_BUFFER: usize = 1024;
/// The feed writer's group commit: how long written items may wait for their fsync (and
/// their requests for their acknowledgement). The job store hands its own writes to the disk
/// every 50 ms as well, so an acknowledgement is durable about 100 ms after its items were
/// written at most.
const GROUP_COMMIT: Duration = Duration::from_millis(50);

/// What flows to the feed writer: items, and markers saying "every item of this request
/// has been sent".
pub(super) enum FeedMsg<I> {
    Item(I),
    Flushed(Lease),
}

/// The engine's end of the feed writer thread.
pub(super) struct FeedThread<I> {
    /// Items, and the markers that release their leases.
    pub(super) items: mpsc::Sender<FeedMsg<I>>,
    /// Leases whose items are on disk, for acknowledgement.
    pub(super) acks: mpsc::UnboundedReceiver<Lease>,
    /// Set on a second stop request: the writer stops at once, acknowledging nothing more.
    pub(super) abort: Arc<AtomicBool>,
    /// The thread: how many items it wrote, or why it stopped.
    pub(super) task: JoinHandle<Result<u64>>,
}

impl<I: serde::Serialize + Send + 'static> FeedThread<I> {
    /// Start the writer on the opened feeds; with `fsync`, each group commit syncs.
    pub(super) fn spawn(writers: Vec<FeedWriter>, fsync: bool) -> Self {
        let (items_tx, items_rx) = mpsc::channel::<FeedMsg<I>>(FEED_BUFFER);
        let (acks_tx, acks_rx) = mpsc::unbounded_channel::<Lease>();
        let abort = Arc::new(AtomicBool::new(false));
        let task = {
            let abort = Arc::clone(&abort);
            tokio::task::spawn_blocking(move || {
                write_feeds(writers, items_rx, acks_tx, fsync, &abort)
            })
        };
        Self {
            items: items_tx,
            acks: acks_rx,
            abort,
            task,
        }
    }
}

/// The feed writer thread: write items as they come and hand back the leases whose items
/// are on disk, in group commits: at most every [`GROUP_COMMIT`] (at once when the queue
/// runs dry and `fsync` is off) the files are flushed and, with `fsync`, synced, and only
/// then are the leases collected since the last commit released for acknowledgement. So an
/// acknowledgement never reaches the job store before the items of its request reach the
/// disk. On an error nothing more is released: those requests are fetched again on resume.
fn write_feeds<I: serde::Serialize>(
    mut writers: Vec<FeedWriter>,
    mut rx: mpsc::Receiver<FeedMsg<I>>,
    acks: mpsc::UnboundedSender<Lease>,
    fsync: bool,
    abort: &AtomicBool,
) -> Result<u64> {
    let runtime = tokio::runtime::Handle::current();
    let mut written = 0u64;
    let mut done: Vec<Lease> = Vec::new();
    let mut last_commit = std::time::Instant::now();
    // How many leases at the front of `done` have all their items in complete batches:
    // those released at the next commit even while a batch is open (the leases after them
    // wait for it to close).
    let mut settled_upto = 0usize;
    let all_settled = |writers: &[FeedWriter]| writers.iter().all(FeedWriter::settled);
    let releasable = |writers: &[FeedWriter], done: &[Lease], settled_upto: usize| {
        if all_settled(writers) {
            done.len()
        } else {
            settled_upto
        }
    };
    let commit = |writers: &mut Vec<FeedWriter>,
                  done: &mut Vec<Lease>,
                  settled_upto: &mut usize|
     -> Result<()> {
        for w in writers.iter_mut() {
            if fsync { w.sync()? } else { w.flush()? }
        }
        let n = releasable(writers, done, *settled_upto);
        for lease in done.drain(..n) {
            let _ = acks.send(lease);
        }
        *settled_upto = 0;
        Ok(())
    };
    loop {
        if abort.load(Ordering::Relaxed) {
            // Stop now: what is buffered is flushed when the files close; the leases not
            // yet released stay open.
            return Ok(written);
        }
        // Leases that a commit would release now (none while every one waits for a batch).
        let waiting = releasable(&writers, &done, settled_upto) > 0;
        let due = waiting && last_commit.elapsed() >= GROUP_COMMIT;
        if due {
            commit(&mut writers, &mut done, &mut settled_upto)?;
            last_commit = std::time::Instant::now();
        }
        let msg = match rx.try_recv() {
            Ok(msg) => msg,
            Err(mpsc::error::TryRecvError::Disconnected) => break,
            Err(mpsc::error::TryRecvError::Empty) if !waiting => {
                // Idle: the files on disk trail the crawl by as little as possible.
                for w in &mut writers {
                    w.flush()?;
                }
                match rx.blocking_recv() {
                    Some(msg) => msg,
                    None => break,
                }
            }
            Err(mpsc::error::TryRecvError::Empty) if !fsync => {
                commit(&mut writers, &mut done, &mut settled_upto)?;
                last_commit = std::time::Instant::now();
                continue;
            }
            Err(mpsc::error::TryRecvError::Empty) => {
                // Leases are waiting for the next group commit: wait for more items until
                // it is due, so one fsync covers them all.
                for w in &mut writers {
                    w.flush()?;
                }
                let wait = GROUP_COMMIT.saturating_sub(last_commit.elapsed());
                match runtime.block_on(tokio::time::timeout(wait, rx.recv())) {
                    Ok(Some(msg)) => msg,
                    Ok(None) => break,
                    Err(_) => continue,
                }
            }
        };
        match msg {
            FeedMsg::Item(item) => {
                for w in &mut writers {
                    w.write(&item)?;
                }
                written += 1;
            }
            FeedMsg::Flushed(lease) => done.push(lease),
        }
        if all_settled(&writers) {
            // A batch just closed (or none is open): every lease so far has its items in
            // complete batches, whatever the next item opens.
            settled_upto = done.len();
        }
    }
    for w in writers {
        w.finish()?;
    }
    for lease in done {
        let _ = acks.send(lease);
    }
    Ok(written)
}

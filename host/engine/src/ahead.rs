//! Instances made ahead of the call that uses them.
//!
//! Instantiating a plugin and tearing the used instance down afterwards (resetting its memory
//! slot) are most of what a small election costs, yet neither needs the request. So after each
//! call the engine's preparer thread drops the used instance and makes the plugin's next one, and
//! the next call finds it ready: the calling thread then only converts the request and calls
//! `elect`. Every instance still serves exactly one call, so no state survives from one election
//! to the next. The work is moved, not removed: the preparer thread spends the CPU the calling
//! thread no longer does.

use super::plugin::CallState;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use wasmtime::Store;
use wasmtime::component::Instance;

/// Used instances the preparer thread may have queued for dropping. Each still holds its pool
/// slot, so the queue is short: past it, a used instance is dropped on the calling thread and no
/// refill is asked for (the next call instantiates itself), and a preparer that falls behind
/// never takes the slots calls need.
const QUEUE: usize = 4;

/// A fresh instance, never called, and its store.
pub(super) struct Ready {
    /// The store the instance lives in, limits and CPU deadline armed again at the call.
    pub(super) store: Store<CallState>,
    /// The instance.
    pub(super) instance: Instance,
}

/// What an attempt to make an instance ahead gave.
pub(super) enum Made {
    /// A fresh instance.
    Ready(Ready),
    /// Instantiation failed (the pool is full, a limit was hit): the next call instantiates
    /// itself and reports the error.
    Failed,
    /// Instantiation had effects a call must see (it logged, wrote to stdout or stderr, or built
    /// its WASI context before the call's clock was known): this plugin is always instantiated by
    /// the call itself.
    Unsuitable,
}

/// Makes one plugin's next instance (the plugin's linked component, limits and name).
type Maker = Box<dyn Fn() -> Made + Send + Sync>;

/// One plugin's instance made ahead, if there is one.
pub(super) struct Spare {
    make: Maker,
    ready: Mutex<Option<Ready>>,
    /// A refill is queued or running.
    refilling: AtomicBool,
    /// False once instantiating this plugin ahead proved [`Made::Unsuitable`].
    suitable: AtomicBool,
}

impl Spare {
    /// A plugin's spare slot, empty until its first call asks for a refill.
    pub(super) fn new(make: Maker) -> Arc<Self> {
        Arc::new(Self {
            make,
            ready: Mutex::new(None),
            refilling: AtomicBool::new(false),
            suitable: AtomicBool::new(true),
        })
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Ready>> {
        // The slot holds no invariant a panic elsewhere could break.
        self.ready.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The preparer thread's queue, and how many instances made ahead exist.
pub(super) struct Preparer {
    jobs: SyncSender<Job>,
    /// Instances made ahead and not yet taken, across all plugins.
    held: Arc<AtomicUsize>,
    /// Most instances made ahead at once, so that they never take the pool slots calls need.
    cap: usize,
}

/// Drop a used instance (resetting its memory slot), then make the plugin's next instance
/// (`Some`), unless it has one.
struct Job {
    used: Store<CallState>,
    refill: Option<Arc<Spare>>,
}

impl Preparer {
    /// Starts the preparer thread; it ends when the last [`Preparer`] handle is dropped. At most
    /// `cap` instances are held ahead at once.
    pub(super) fn start(cap: usize) -> std::io::Result<Arc<Self>> {
        let (jobs, queue) = std::sync::mpsc::sync_channel::<Job>(QUEUE);
        let held = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&held);
        std::thread::Builder::new()
            .name("conclave-prepare".into())
            .spawn(move || {
                for Job {
                    used,
                    refill: spare,
                } in queue
                {
                    drop(used);
                    if let Some(spare) = spare {
                        refill(&spare, &counted, cap);
                    }
                }
            })?;
        Ok(Arc::new(Self { jobs, held, cap }))
    }

    /// The instance made ahead for `spare`, if one is ready.
    pub(super) fn take(&self, spare: &Spare) -> Option<Ready> {
        let ready = spare.slot().take();
        if ready.is_some() {
            self.held.fetch_sub(1, Ordering::SeqCst);
        }
        ready
    }

    /// Hands `used` (its call over) to the preparer thread to drop, and asks for `spare`'s next
    /// instance; one wake-up of the thread for both. With the queue full the store is dropped
    /// here instead, and the next call instantiates its own.
    pub(super) fn recycle(&self, spare: &Arc<Spare>, used: Store<CallState>) {
        let wanted = spare.suitable.load(Ordering::Relaxed)
            && self.held.load(Ordering::SeqCst) < self.cap
            && !spare.refilling.swap(true, Ordering::SeqCst);
        let job = Job {
            used,
            refill: wanted.then(|| Arc::clone(spare)),
        };
        if let Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) =
            self.jobs.try_send(job)
        {
            if job.refill.is_some() {
                spare.refilling.store(false, Ordering::SeqCst);
            }
            drop(job);
        }
    }
}

/// Makes `spare`'s next instance on the preparer thread, unless it has one or `cap` are held.
fn refill(spare: &Spare, held: &AtomicUsize, cap: usize) {
    let wanted = spare.slot().is_none() && held.load(Ordering::SeqCst) < cap;
    if wanted {
        match (spare.make)() {
            Made::Ready(ready) => {
                held.fetch_add(1, Ordering::SeqCst);
                *spare.slot() = Some(ready);
            }
            Made::Failed => {}
            Made::Unsuitable => spare.suitable.store(false, Ordering::Relaxed),
        }
    }
    spare.refilling.store(false, Ordering::SeqCst);
}

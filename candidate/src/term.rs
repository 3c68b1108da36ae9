//! One term of leadership: a cancellation token, the tasks started in it, and what the Lease said
//! when it began. Everything the term owns is dropped when it ends.

use conclave_core::time::Timestamp;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::task::{AbortHandle, JoinHandle};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};
use tokio_util::task::TaskTracker;

/// What the Lease said when the term began. Serializes with RFC 3339 times.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TermLease {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This instance's identity (the holder).
    pub identity: String,
    /// `spec.strategy` when the term began.
    pub strategy: Option<String>,
    /// `spec.leaseTransitions` when the term began.
    pub lease_transitions: Option<i32>,
    /// `spec.acquireTime` when the term began.
    #[serde(serialize_with = "crate::time::serialize_option")]
    pub acquire_time: Option<Timestamp>,
    /// Wall-clock time at which this instance observed itself as holder.
    #[serde(serialize_with = "crate::time::serialize")]
    pub observed_at: Timestamp,
}

/// One period of leadership, handed to the user's closure.
///
/// Clone it freely into tasks. Work must stop when [`Term::cancelled`] resolves: the term's
/// token is cancelled when the Lease is handed over, lost or the process shuts down, and the
/// Lease is released only after every task started with [`Term::spawn`] has finished (or the drain
/// timeout passed).
#[derive(Debug, Clone)]
pub struct Term {
    inner: Arc<TermInner>,
}

#[derive(Debug)]
struct TermInner {
    number: u64,
    lease: TermLease,
    token: CancellationToken,
    /// Cancelled once the Lease no longer counts as held by this term.
    held: CancellationToken,
    tracker: TaskTracker,
    aborts: Mutex<Vec<AbortHandle>>,
}

impl Term {
    pub(crate) fn new(number: u64, lease: TermLease) -> Self {
        Self {
            inner: Arc::new(TermInner {
                number,
                lease,
                token: CancellationToken::new(),
                held: CancellationToken::new(),
                tracker: TaskTracker::new(),
                aborts: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The term number: 1 for the first term this elector led, then 2, ...
    #[must_use]
    pub fn number(&self) -> u64 {
        self.inner.number
    }

    /// What the Lease said when the term began.
    #[must_use]
    pub fn lease(&self) -> &TermLease {
        &self.inner.lease
    }

    /// The term's token; cancelled when the term ends. Child tokens are cancelled with it.
    #[must_use]
    pub fn token(&self) -> &CancellationToken {
        &self.inner.token
    }

    /// Cancelled once this instance no longer counts the Lease as its own: the renew deadline of
    /// its last successful renewal passed (also while the term drains, its renewals failing),
    /// another holder is named, the Lease was deleted or released, or the term is over. Until
    /// then the Lease is held even after [`Term::token`] is cancelled: a graceful end (a
    /// shutdown, a hand-off) keeps renewing it while the term's tasks drain. Work that may run
    /// during the drain but must never outlive the Lease (writes that only the leader may make)
    /// checks this token, not the drain's own bounds: a drain that began with renewals already
    /// failing would otherwise go on writing past the renew deadline, up to the Lease's expiry,
    /// when another instance may lead.
    #[must_use]
    pub fn held(&self) -> &CancellationToken {
        &self.inner.held
    }

    /// Resolves when the term ends.
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.inner.token.cancelled()
    }

    /// Whether the term has ended (its token is cancelled).
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.inner.token.is_cancelled()
    }

    /// Starts a task that belongs to this term. The Lease is not released until it returns (up
    /// to the drain timeout); past that it is reported as leaked and aborted.
    pub fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let handle = self.inner.tracker.spawn(task);
        let mut aborts = self
            .inner
            .aborts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Forget finished tasks now and then so a long term does not grow this list forever.
        if aborts.len() >= 64 && aborts.len().is_power_of_two() {
            aborts.retain(|a| !a.is_finished());
        }
        aborts.push(handle.abort_handle());
        handle
    }

    /// How many of the term's tasks are still running.
    #[must_use]
    pub fn running_tasks(&self) -> usize {
        self.inner.tracker.len()
    }

    /// Ends the term: cancels its token and stops accepting the wait for new tasks (tasks may
    /// still be spawned while unwinding; they are waited for too).
    pub(crate) fn stop(&self) {
        self.inner.token.cancel();
        self.inner.tracker.close();
    }

    /// The Lease no longer counts as held by this term (see [`Term::held`]).
    pub(crate) fn let_go(&self) {
        self.inner.held.cancel();
    }

    /// Resolves when the term is stopped and all of its tasks have finished.
    pub(crate) async fn drained(&self) {
        self.inner.tracker.wait().await;
    }

    /// Aborts the tasks still running and returns how many there were (the leaked ones).
    pub(crate) fn abort_running(&self) -> usize {
        let running = self.inner.tracker.len();
        let aborts = std::mem::take(
            &mut *self
                .inner
                .aborts
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for abort in aborts {
            abort.abort();
        }
        running
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn term() -> Term {
        Term::new(
            1,
            TermLease {
                namespace: "default".into(),
                name: "lease".into(),
                identity: "me".into(),
                strategy: None,
                lease_transitions: None,
                acquire_time: None,
                observed_at: Timestamp::default(),
            },
        )
    }

    #[tokio::test]
    async fn cooperative_tasks_drain_and_stubborn_ones_are_counted_and_aborted() {
        let term = term();
        for _ in 0..3 {
            let t = term.clone();
            term.spawn(async move { t.cancelled().await });
        }
        let stubborn = term.spawn(std::future::pending::<()>());
        term.stop();
        assert!(term.is_cancelled());
        let waited = tokio::time::timeout(Duration::from_millis(200), term.drained()).await;
        assert!(
            waited.is_err(),
            "the stubborn task keeps the term from draining"
        );
        assert_eq!(term.running_tasks(), 1);
        assert_eq!(term.abort_running(), 1);
        assert!(stubborn.await.unwrap_err().is_cancelled());
        tokio::time::timeout(Duration::from_secs(30), term.drained())
            .await
            .unwrap();
        assert_eq!(term.running_tasks(), 0);
    }

    #[tokio::test]
    async fn many_short_tasks_do_not_accumulate_abort_handles() {
        let term = term();
        for _ in 0..1000 {
            term.spawn(async {}).await.unwrap();
        }
        assert!(term.inner.aborts.lock().unwrap().len() < 200);
    }
}

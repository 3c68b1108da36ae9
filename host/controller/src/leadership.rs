//! Whether this replica leads: the handle the [`Writer`](super::writer::Writer) checks before
//! every write, as linkerd's status controller checks its lease before every patch.
//!
//! A term of the controller's own Lease begins with [`Leadership::begin`] and its token; the
//! elector cancels that token the moment the term ends. Why it ended decides what may still be
//! written:
//! - the Lease was lost (renewal failed until the renew deadline, or another replica holds it):
//!   nothing more, from that moment on;
//! - the process is shutting down: the elector still holds the Lease while the term drains (it
//!   renews it until the release), so a step already under way may finish its writes, within a
//!   grace period counted from the end of the term ([`Leadership::ended`]), and only while the
//!   elector still counts the Lease as held (`conclave_candidate::Term::held`: the renew deadline
//!   of its last successful renewal has not passed). The grace alone did not bound it: a shutdown
//!   that came while renewals were already failing let writes go on for the whole grace, past the
//!   renew deadline and up to where the standby may take over (issue 47, finding 6).

use super::sync::lock;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A shared handle on this replica's current term of the controller Lease. Clones share it.
#[derive(Clone, Debug)]
pub struct Leadership(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    shutdown: CancellationToken,
    drain_grace: Duration,
    term: Mutex<Option<Term>>,
}

#[derive(Debug)]
struct Term {
    token: CancellationToken,
    /// Cancelled once the elector no longer counts the Lease as held.
    held: CancellationToken,
    ended_at: Option<Instant>,
}

impl Leadership {
    /// No term yet. `shutdown` is the process's shutdown token; `drain_grace` is how long after
    /// the end of a term cut short by it writes may still be sent.
    #[must_use]
    pub fn new(shutdown: CancellationToken, drain_grace: Duration) -> Self {
        Self(Arc::new(Inner {
            shutdown,
            drain_grace,
            term: Mutex::new(None),
        }))
    }

    /// A term began; it lasts until `term` is cancelled, and its drain until `held` is (the
    /// Lease counts as held by this replica no more).
    pub fn begin(&self, term: CancellationToken, held: CancellationToken) {
        *lock(&self.0.term) = Some(Term {
            token: term,
            held,
            ended_at: None,
        });
    }

    /// The current term's token was cancelled now; the drain grace of a shutdown counts from
    /// here.
    pub fn ended(&self) {
        if let Some(term) = lock(&self.0.term).as_mut() {
            term.ended_at.get_or_insert_with(Instant::now);
        }
    }

    /// Whether a write may be sent now: a term is running, or it ended because the process is
    /// shutting down, less than the drain grace ago, and the Lease still counts as held.
    #[must_use]
    pub fn is_leading(&self) -> bool {
        let term = lock(&self.0.term);
        let Some(term) = term.as_ref() else {
            return false;
        };
        if !term.token.is_cancelled() {
            return true;
        }
        self.0.shutdown.is_cancelled()
            && !term.held.is_cancelled()
            && term
                .ended_at
                .is_none_or(|at| at.elapsed() < self.0.drain_grace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(8);

    #[test]
    fn a_lost_term_ends_leadership_at_once() {
        let leadership = Leadership::new(CancellationToken::new(), GRACE);
        assert!(!leadership.is_leading(), "no term yet");
        let term = CancellationToken::new();
        leadership.begin(term.clone(), CancellationToken::new());
        assert!(leadership.clone().is_leading());
        term.cancel();
        assert!(!leadership.is_leading(), "the Lease was lost");
        leadership.begin(CancellationToken::new(), CancellationToken::new());
        assert!(leadership.is_leading(), "the next term");
    }

    #[tokio::test(start_paused = true)]
    async fn a_shutdown_lets_the_writes_under_way_finish_within_the_grace() {
        let shutdown = CancellationToken::new();
        let leadership = Leadership::new(shutdown.clone(), GRACE);
        let term = CancellationToken::new();
        leadership.begin(term.clone(), CancellationToken::new());
        shutdown.cancel();
        term.cancel();
        assert!(leadership.is_leading(), "draining, the Lease still held");
        leadership.ended();
        tokio::time::advance(GRACE - Duration::from_millis(1)).await;
        assert!(leadership.is_leading());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(!leadership.is_leading(), "the grace is over");
    }

    /// Issue 47, finding 6 (second suspicion, confirmed): a shutdown while the controller's own
    /// renewals were already failing. The elector counts the Lease as lost at the renew deadline
    /// of its last successful renewal, during the drain: writes stop then, however much of the
    /// grace is left.
    #[tokio::test(start_paused = true)]
    async fn a_drain_writes_only_while_the_lease_counts_as_held() {
        let shutdown = CancellationToken::new();
        let leadership = Leadership::new(shutdown.clone(), GRACE);
        let (term, held) = (CancellationToken::new(), CancellationToken::new());
        leadership.begin(term.clone(), held.clone());
        shutdown.cancel();
        term.cancel();
        leadership.ended();
        assert!(leadership.is_leading(), "draining, the Lease still held");
        tokio::time::advance(Duration::from_secs(1)).await;
        held.cancel();
        assert!(
            !leadership.is_leading(),
            "the renew deadline passed while draining: nothing more is written"
        );
    }
}

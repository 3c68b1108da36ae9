//! Start times of the elections in progress, for `conclave_election_latency_seconds`.
//!
//! An election can take several reconciles of its Lease key (ping, wait for acks, retry after a
//! failure); its latency runs from the trigger of the first of them to the Lease write. Every
//! reconcile reports how it ended, so a start is kept only while the election goes on and can
//! never be picked up by a later, unrelated election.

use super::key::LeaseKey;
use super::sync::lock;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// How one reconcile of a Lease key ended, as far as its election's start time is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// The Lease was written at `at`: the election is over and its latency is observed.
    Written {
        /// The strategy the election ran under (the metric's label).
        strategy: String,
        /// When the write returned.
        at: Instant,
    },
    /// The election goes on in a later reconcile of the same key (pings outstanding, or the step
    /// is retried after a failure): its start is kept.
    Continues,
    /// Nothing needs writing, or no election can run now (no candidates, a conflict, an unknown
    /// or unhandled strategy, nobody electable): the start, if any, is forgotten.
    Settled,
}

/// The start of each election in progress, by Lease key.
#[derive(Debug, Default)]
pub struct ElectionStarts(Mutex<HashMap<LeaseKey, Instant>>);

impl ElectionStarts {
    /// Records how a reconcile of `key`, triggered at `triggered_at`, ended. Returns the latency
    /// of the election (first trigger to write) when it wrote.
    pub fn finish(
        &self,
        key: &LeaseKey,
        triggered_at: Instant,
        progress: &Progress,
    ) -> Option<Duration> {
        let mut starts = lock(&self.0);
        match progress {
            Progress::Written { at, .. } => {
                let started = starts.remove(key).unwrap_or(triggered_at);
                Some(at.saturating_duration_since(started))
            }
            Progress::Continues => {
                starts.entry(key.clone()).or_insert(triggered_at);
                None
            }
            Progress::Settled => {
                starts.remove(key);
                None
            }
        }
    }

    /// Whether an election of `key` is in progress (its last reconcile left it going on).
    pub fn in_progress(&self, key: &LeaseKey) -> bool {
        lock(&self.0).contains_key(key)
    }

    /// Forgets every start (a new term: elections of an earlier term are not this one's).
    pub fn reset(&self) {
        lock(&self.0).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> LeaseKey {
        LeaseKey::new("ns", name)
    }

    fn written(at: Instant) -> Progress {
        Progress::Written {
            strategy: "S".into(),
            at,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn latency_runs_from_the_first_trigger_of_the_election_to_its_write() {
        let starts = ElectionStarts::default();
        let first = Instant::now();
        assert_eq!(starts.finish(&key("l"), first, &Progress::Continues), None);
        let later = first + Duration::from_secs(5);
        let at = later + Duration::from_millis(10);
        assert_eq!(
            starts.finish(&key("l"), later, &written(at)),
            Some(Duration::from_millis(5010))
        );
        assert_eq!(
            starts.finish(&key("l"), later, &written(at)),
            Some(Duration::from_millis(10)),
            "the written election's start is gone"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_exit_that_writes_nothing_forgets_the_start() {
        let starts = ElectionStarts::default();
        let old = Instant::now();
        starts.finish(&key("l"), old, &Progress::Continues);
        let now = old + Duration::from_secs(3600);
        starts.finish(&key("l"), now, &Progress::Settled);
        let at = now + Duration::from_millis(20);
        assert_eq!(
            starts.finish(&key("l"), now, &written(at)),
            Some(Duration::from_millis(20)),
            "a later election is measured from its own trigger, not from an hour ago"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_term_forgets_every_start() {
        let starts = ElectionStarts::default();
        let old = Instant::now();
        starts.finish(&key("a"), old, &Progress::Continues);
        starts.finish(&key("b"), old, &Progress::Continues);
        starts.reset();
        let now = old + Duration::from_secs(7200);
        let at = now + Duration::from_millis(1);
        for name in ["a", "b"] {
            assert_eq!(
                starts.finish(&key(name), now, &written(at)),
                Some(Duration::from_millis(1)),
                "{name}"
            );
        }
    }
}

//! 100 consecutive terms in one process: every term's tasks finish, per-term state is dropped,
//! nothing is reported leaked, and live heap memory stays flat.

mod common;

use common::*;
use conclave_candidate::{Elector, LeaderState, Term, Transition};
use conclave_emulator::EmulatorConfig;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// Counts live heap bytes of this test binary.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Per-term state the term's tasks share: big enough that keeping it would show.
const STATE_BYTES: usize = 256 * 1024;
const TERMS: u64 = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_terms_leave_no_task_and_no_memory_behind() {
    // A short watch history keeps the emulator's own memory bounded.
    let emulator = emulator_with(EmulatorConfig {
        history_capacity: 32,
        ..EmulatorConfig::default()
    })
    .await;
    let client = client(&emulator);
    let states: Arc<Mutex<Vec<Weak<Vec<u8>>>>> = Arc::default();
    let recorded = states.clone();
    let elector = Elector::coordinated(
        common::client(&emulator),
        lease_config("terms", "a"),
        candidate_config("1.31.0"),
    )
    .unwrap();
    let a = Running::start(elector, move |term: Term| {
        let state = Arc::new(vec![1u8; STATE_BYTES]);
        recorded.lock().unwrap().push(Arc::downgrade(&state));
        async move {
            for _ in 0..5 {
                let (worker, state) = (term.clone(), state.clone());
                term.spawn(async move {
                    let mut ticker = tokio::time::interval(std::time::Duration::from_millis(5));
                    loop {
                        tokio::select! {
                            () = worker.cancelled() => break,
                            _ = ticker.tick() => { std::hint::black_box(state.len()); }
                        }
                    }
                });
            }
        }
    });
    let mut events = a.handle.transitions();
    wait_for("a ready", || async { a.handle.is_ready().then_some(()) }).await;
    let mut live_after = Vec::new();
    for n in 1..=TERMS {
        assign(&client, "terms", "a").await;
        wait_state(&a.handle, "a leads", |s| {
            s == LeaderState::Leading { term: n }
        })
        .await;
        preempt(&client, "terms", "b").await;
        let stopped = next_transition(&mut events, "a stops", |t| {
            matches!(t, Transition::StoppedLeading { .. })
        })
        .await;
        assert!(
            matches!(
                stopped,
                Transition::StoppedLeading {
                    leaked_tasks: 0,
                    ..
                }
            ),
            "term {n}: {stopped:?}"
        );
        next_transition(&mut events, "a releases", |t| {
            matches!(t, Transition::Released { .. })
        })
        .await;
        next_transition(&mut events, "a follows", |t| {
            matches!(t, Transition::Following { .. })
        })
        .await;
        let states = states.lock().unwrap();
        assert_eq!(states.len() as u64, n, "one state per term");
        assert!(
            states.iter().all(|w| w.upgrade().is_none()),
            "term {n}: per-term state still alive"
        );
        drop(states);
        live_after.push(LIVE.load(Ordering::Relaxed));
    }
    assert_eq!(a.handle.metrics().leaked_tasks("default/terms", "a"), 0);
    assert_eq!(a.handle.metrics().terms("default/terms", "a"), TERMS);
    // Flat: the live heap after the last term is within 1 MiB of the live heap after term 10. A
    // leaked term (its 256 KiB state, tasks and timers) would add over 25 MiB across 90 terms.
    let (early, late) = (live_after[9], live_after[TERMS as usize - 1]);
    eprintln!("live heap after term 10: {early} B, after term {TERMS}: {late} B");
    assert!(
        late - early < 1024 * 1024,
        "live heap grew from {early} to {late} bytes over {} terms",
        TERMS - 10
    );
    a.stop().await.unwrap();
}

//! Under Conclave's own controller (`conclave run`, the binary built from host/): three
//! candidates on different versions, the oldest emulation version leads; an upgrade hands over
//! through preferredHolder, the new leader starts only after the old one released, and no
//! process exits. Runs against the emulator.
//!
//! Needs the `conclave` binary (`cargo build -p conclave`): `$CONCLAVE_BIN`, else
//! `target/debug/conclave`. Without it the test prints SKIP and returns, unless
//! `CONCLAVE_REQUIRE_BIN` is set.

mod common;

use common::*;
use conclave_candidate::{CandidateConfig, Elector, LeaderState, StopReason, Transition};
use std::process::{Child, Command, Stdio};

/// `conclave run`, killed on drop.
struct Controller(Child);

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(
    emulator: &conclave_emulator::RunningEmulator,
    who: &str,
    binary: &str,
    emulation: &str,
) -> Running {
    let elector = Elector::coordinated(
        client(emulator),
        lease_config("component", who),
        CandidateConfig::new(binary, emulation, STRATEGY),
    )
    .unwrap();
    Running::start(elector, idle_leader())
}

#[tokio::test(flavor = "multi_thread")]
async fn under_conclave_the_oldest_leads_and_an_upgrade_hands_over_gracefully() {
    let Some(binary) = conclave_binary() else {
        return;
    };
    let emulator = emulator().await;
    let dir = std::env::temp_dir().join(format!("conclave-candidate-under-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    emulator.write_kubeconfig(&kubeconfig).unwrap();
    let log = std::fs::File::create(dir.join("controller.log")).unwrap();
    let _controller = Controller(
        Command::new(binary)
            .args(["run", "--kubeconfig"])
            .arg(&kubeconfig)
            .args([
                "--namespace",
                NS,
                "--controller-namespace",
                NS,
                "--metrics-addr",
                "127.0.0.1:0",
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("conclave run starts"),
    );
    let client = client(&emulator);
    let c = start(&emulator, "c", "1.33.0", "1.33.0");
    let b = start(&emulator, "b", "1.33.0", "1.31.0");
    let a = start(&emulator, "a", "1.33.0", "1.32.0");
    let mut b_events = b.handle.transitions();
    wait_for("b (oldest emulation version) to lead", || async {
        let holder = get_spec(&client, "component")
            .await
            .and_then(|s| s.holder_identity);
        (b.handle.is_leading() && holder.as_deref() == Some("b")).then_some(())
    })
    .await;
    assert!(!a.handle.is_leading() && !c.handle.is_leading());

    // Upgrade: c restarts with a newer version; the leader stays.
    c.stop().await.unwrap();
    let c = start(&emulator, "c2", "1.34.0", "1.34.0");
    wait_for("c2 registered", || async {
        c.handle.is_ready().then_some(())
    })
    .await;
    assert!(b.handle.is_leading());

    // An older candidate joins: Conclave pre-empts b in favour of d.
    let d = start(&emulator, "d", "1.33.0", "1.30.0");
    let mut d_events = d.handle.transitions();
    let stopped = next_transition(&mut b_events, "b stops", |t| {
        matches!(t, Transition::StoppedLeading { .. })
    })
    .await;
    assert!(
        matches!(&stopped, Transition::StoppedLeading { reason: StopReason::Preempted { preferred_holder }, leaked_tasks: 0, .. } if preferred_holder == "d"),
        "{stopped:?}"
    );
    let released = next_transition(&mut b_events, "b releases", |t| {
        matches!(t, Transition::Released { .. })
    })
    .await;
    let leading = next_transition(&mut d_events, "d leads", |t| {
        matches!(t, Transition::Leading { .. })
    })
    .await;
    let (
        Transition::Released {
            at: released_at, ..
        },
        Transition::Leading { observed_at, .. },
    ) = (&released, &leading)
    else {
        unreachable!()
    };
    assert!(observed_at > released_at, "d started only after b released");
    wait_for("the Lease to name d", || async {
        (get_spec(&client, "component")
            .await
            .and_then(|s| s.holder_identity)
            .as_deref()
            == Some("d"))
        .then_some(())
    })
    .await;
    for (name, running) in [("a", &a), ("b", &b), ("c2", &c), ("d", &d)] {
        assert!(!running.task.is_finished(), "{name} exited");
    }
    assert_eq!(*b.handle.leader_state().borrow(), LeaderState::Following);
    for running in [a, b, c, d] {
        running.stop().await.unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

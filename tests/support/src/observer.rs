//! Observers: a look at the cluster repeated on a thread of its own while a test drives it.

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Client;

use crate::Error;
use crate::control_plane::client_from_kubeconfig;

/// Repeats a look at the cluster every `interval` on a thread, a Tokio runtime and a client of
/// its own until dropped, folding each answer into a state the test reads at any time.
///
/// A drill's observer must keep looking while the test's own task blocks in helm, kubectl or
/// ctr. Spawned on the test's runtime instead, an observer of the controller's Lease was starved
/// for minutes in CI and missed a take-over that a direct read right after it saw.
pub struct Observer<S> {
    state: Arc<Mutex<S>>,
    looks: Arc<AtomicU64>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl<S: Clone + Send + 'static> Observer<S> {
    /// Starts looking with `look` (given a client of the observer's own) every `interval`; each
    /// answer, or the error or the timeout after `look_timeout`, goes to `fold` with the state.
    /// Returns once the observer's client is built, so the first look is under way.
    pub fn start<T, Look, Answer, Fold>(
        kubeconfig: PathBuf,
        interval: Duration,
        look_timeout: Duration,
        initial: S,
        look: Look,
        mut fold: Fold,
    ) -> Result<Self, Error>
    where
        Look: Fn(Client) -> Answer + Send + 'static,
        Answer: Future<Output = Result<T, Error>>,
        Fold: FnMut(&mut S, Result<T, Error>) + Send + 'static,
    {
        let state = Arc::new(Mutex::new(initial));
        let record = Arc::clone(&state);
        let looks = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&looks);
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready, started) = std::sync::mpsc::channel::<Result<(), Error>>();
        let thread = std::thread::Builder::new()
            .name("conclave-observer".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(source) => {
                        let _ = ready.send(Err(Error::Io {
                            context: "starting an observer's runtime".into(),
                            source,
                        }));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let client = match client_from_kubeconfig(&kubeconfig).await {
                        Ok(client) => client,
                        Err(error) => {
                            let _ = ready.send(Err(error));
                            return;
                        }
                    };
                    let _ = ready.send(Ok(()));
                    loop {
                        let answer = tokio::select! {
                            _ = &mut stopped => return,
                            answer = tokio::time::timeout(look_timeout, look(client.clone())) => answer,
                        };
                        let answer = answer.unwrap_or_else(|_| {
                            Err(Error::Timeout {
                                what: "an observer's look".into(),
                                seconds: look_timeout.as_secs(),
                            })
                        });
                        fold(&mut record.lock().expect("observer state lock"), answer);
                        counted.fetch_add(1, Ordering::Relaxed);
                        tokio::select! {
                            _ = &mut stopped => return,
                            () = tokio::time::sleep(interval) => {}
                        }
                    }
                });
            })
            .map_err(|source| Error::Io {
                context: "starting an observer's thread".into(),
                source,
            })?;
        let observer = Self {
            state,
            looks,
            stop: Some(stop),
            thread: Some(thread),
        };
        match started.recv() {
            Ok(Ok(())) => Ok(observer),
            Ok(Err(error)) => Err(error),
            Err(_) => Err(Error::InvalidArgument(
                "an observer's thread ended before it started looking".into(),
            )),
        }
    }

    /// How many looks have been folded so far (answered, failed or timed out): a check that
    /// relies on an observer can tell that it really looked.
    pub fn looks(&self) -> u64 {
        self.looks.load(Ordering::Relaxed)
    }

    /// The state as folded so far.
    pub fn state(&self) -> S {
        self.state.lock().expect("observer state lock").clone()
    }
}

impl<S> Drop for Observer<S> {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

//! Work on a thread of its own until the test stops it: samplers and pollers that must keep
//! their pace while the test's own runtime waits on something else.

#![allow(dead_code)]

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::pki::client_from_kubeconfig;

pub struct Background<T> {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<T>,
}

impl<T: Send + 'static> Background<T> {
    /// Runs `work`, which watches the flag it is given and returns once it says stop (or
    /// earlier, by itself).
    pub fn start(work: impl FnOnce(Arc<AtomicBool>) -> T + Send + 'static) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let stop = stop.clone();
            move || work(stop)
        });
        Self { stop, thread }
    }

    /// `step` on `state` every `every` until stopped; the state is the result.
    pub fn sample(every: Duration, mut state: T, mut step: impl FnMut(&mut T) + Send + 'static) -> Self {
        Self::start(move |stop| {
            while !stop.load(Ordering::Relaxed) {
                step(&mut state);
                std::thread::sleep(every);
            }
            state
        })
    }

    /// `work` on a current-thread runtime with an admin client for each kubeconfig.
    pub fn with_clients<F, Fut>(kubeconfigs: Vec<PathBuf>, work: F) -> Self
    where
        F: FnOnce(Vec<kube::Client>, Arc<AtomicBool>) -> Fut + Send + 'static,
        Fut: Future<Output = T>,
    {
        Self::start(move |stop| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let mut clients = Vec::new();
                for k in &kubeconfigs {
                    clients.push(client_from_kubeconfig(k).await);
                }
                work(clients, stop).await
            })
        })
    }

    /// Stops the work and returns its result.
    pub fn finish(self) -> T {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }

    /// Waits up to `timeout` for the work to end by itself, then stops it.
    pub fn finish_within(self, timeout: Duration) -> T {
        let deadline = Instant::now() + timeout;
        while !self.thread.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        self.finish()
    }
}

//! Waiting for a condition: poll a check until it holds, or fail the test after a timeout with
//! what was awaited and, when given, more context (a log tail, the last answer seen).
//!
//! One semantics, a sync form ([`Poll::until`]) and an async one ([`Poll::until_async`], which
//! sleeps on tokio's timer): the check runs at once, then after every interval; once it has
//! failed past the timeout, the wait panics with "timed out after <timeout> waiting for <what>"
//! and the context. A check returns `bool` or `Option<T>`; the wait returns `()` or the `T`.

#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, Instant};

/// How often a check runs unless [`Poll::every`] says otherwise.
pub const EVERY: Duration = Duration::from_millis(200);

/// What a check returns: `true` or `Some(_)` once the wait is over.
pub trait Outcome {
    type Value;
    fn done(self) -> Option<Self::Value>;
}

impl Outcome for bool {
    type Value = ();
    fn done(self) -> Option<()> {
        self.then_some(())
    }
}

impl<T> Outcome for Option<T> {
    type Value = T;
    fn done(self) -> Option<T> {
        self
    }
}

enum Limit {
    /// From the start of the wait.
    Timeout(Duration),
    /// A moment several waits share.
    Deadline(Instant),
}

/// A wait: its limit, what it waits for, its interval and the context of its failure message.
pub struct Poll<C = fn() -> String> {
    limit: Limit,
    what: String,
    every: Duration,
    context: Option<C>,
}

impl Poll {
    /// Waits at most `timeout` for `what`, polling every [`EVERY`].
    pub fn new(timeout: Duration, what: impl Into<String>) -> Self {
        Self::with(Limit::Timeout(timeout), what)
    }

    /// Waits for `what` until `deadline`, a moment shared with other waits.
    pub fn by(deadline: Instant, what: impl Into<String>) -> Self {
        Self::with(Limit::Deadline(deadline), what)
    }

    fn with(limit: Limit, what: impl Into<String>) -> Self {
        Self {
            limit,
            what: what.into(),
            every: EVERY,
            context: None,
        }
    }
}

impl<C: Fn() -> String> Poll<C> {
    /// Polls every `every`.
    pub fn every(mut self, every: Duration) -> Self {
        self.every = every;
        self
    }

    /// Appends what `context` returns (e.g. "daemon log:\n…") to the failure message.
    pub fn context<D: Fn() -> String>(self, context: D) -> Poll<D> {
        Poll {
            limit: self.limit,
            what: self.what,
            every: self.every,
            context: Some(context),
        }
    }

    /// Runs `check` until it holds, sleeping the thread in between.
    pub fn until<R: Outcome>(self, mut check: impl FnMut() -> R) -> R::Value {
        let deadline = self.deadline();
        loop {
            if let Some(value) = check().done() {
                return value;
            }
            self.fail_after(deadline);
            std::thread::sleep(self.every);
        }
    }

    /// Runs `check` until it holds, sleeping on tokio's timer in between.
    pub async fn until_async<R, F, Fut>(self, mut check: F) -> R::Value
    where
        R: Outcome,
        F: FnMut() -> Fut,
        Fut: Future<Output = R>,
    {
        let deadline = self.deadline();
        loop {
            if let Some(value) = check().await.done() {
                return value;
            }
            self.fail_after(deadline);
            tokio::time::sleep(self.every).await;
        }
    }

    fn deadline(&self) -> Instant {
        match self.limit {
            Limit::Timeout(timeout) => Instant::now() + timeout,
            Limit::Deadline(deadline) => deadline,
        }
    }

    /// Panics once `deadline` has passed.
    fn fail_after(&self, deadline: Instant) {
        if Instant::now() <= deadline {
            return;
        }
        let mut message = match self.limit {
            Limit::Timeout(timeout) => format!("timed out after {timeout:?} waiting for {}", self.what),
            Limit::Deadline(_) => format!("timed out waiting for {} (past the deadline it shares)", self.what),
        };
        if let Some(context) = &self.context {
            message.push_str("; ");
            message.push_str(&context());
        }
        panic!("{message}");
    }
}

/// Polls the async `check` every [`EVERY`] until it returns `Some`, or panics with `what` after
/// `timeout`: [`Poll::until_async`] without context.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    Poll::new(timeout, what).until_async(check).await
}

//! One API client over several API servers.
//!
//! A pod's in-cluster config names one address. Where that address is its own node's API server
//! (pods reaching the API node-locally, as on a node without kube-proxy), a bad kube-apiserver
//! push blinds the anchor of the very node that took it: no mirror pod status, no Event, no
//! rollout Lease. `--api-server` lists the other API servers; requests go to the current one,
//! and a transport failure (or a 502/503/504) moves it, and every later request, to the next.
//! So does silence: an API server whose etcd is gone, or a powered-off node's address that
//! drops packets, answers nothing at all, and a caller's own timeout would otherwise leave it
//! current for every request after. A read not answered within [`ATTEMPT_TIMEOUT`] goes on to
//! the next server, and a request its caller abandons unanswered moves the pool on. The same
//! credentials (token or client certificate, CA) are used for each, so every API server's
//! serving certificate must name the address it is reached at.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use kube::{Client, Config};

/// A client that sends each request to the current server and moves on from one that fails.
/// With one server it is that server's plain client.
pub fn client(config: Config, extra_servers: &[http::Uri]) -> Result<Client, kube::Error> {
    let default_namespace = config.default_namespace.clone();
    let mut urls = vec![config.cluster_url.clone()];
    for url in extra_servers {
        if !urls.contains(url) {
            urls.push(url.clone());
        }
    }
    if urls.len() == 1 {
        return Client::try_from(config);
    }
    let servers = urls
        .into_iter()
        .map(|url| {
            let mut config = config.clone();
            config.cluster_url = url.clone();
            // The pool moves on from a server that answers 503; the client's own retries would
            // keep asking it, with backoff, for minutes.
            config.default_retry = false;
            Client::try_from(config).map(|client| Server { url, client })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let pool = Arc::new(Pool {
        servers,
        current: AtomicUsize::new(0),
    });
    let service = tower::service_fn(move |request: Request<Body>| {
        let pool = pool.clone();
        async move { pool.send(request).await }
    });
    Ok(Client::new(service, default_namespace))
}

/// How long a read waits for a server's answer (its status line and headers, not the body: a
/// watch's stream is not cut) before it is asked of the next server. A loaded API server that
/// answers later costs one more request; a silent one costs this much, once.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(4);

struct Server {
    url: http::Uri,
    client: Client,
}

struct Pool {
    servers: Vec<Server>,
    current: AtomicUsize,
}

impl Pool {
    /// Tries each server at most once, starting at the current one. A request whose body cannot
    /// be replayed, or a POST (a create might have happened before the answer was lost), is not
    /// sent twice: it fails, and the next request goes to the next server. A read unanswered
    /// after [`ATTEMPT_TIMEOUT`] goes on to the next server (the last one is waited for as long
    /// as the caller waits); a write is never cut short here, since it may still be applied.
    async fn send(&self, request: Request<Body>) -> Result<Response<Body>, kube::Error> {
        let (parts, body) = request.into_parts();
        let n = self.servers.len();
        let replayable = parts.method != Method::POST && body.try_clone().is_some();
        let attempts = if replayable { n } else { 1 };
        let read = matches!(parts.method, Method::GET | Method::HEAD);
        let start = self.current.load(Ordering::Relaxed);
        let mut body = Some(body);
        for step in 0..attempts {
            let last = step + 1 == attempts;
            let index = (start + step) % n;
            let this_body = if last {
                body.take()
            } else {
                body.as_ref().and_then(Body::try_clone)
            };
            let request = Request::from_parts(parts.clone(), this_body.expect("checked replayable"));
            let unanswered = Unanswered { pool: self, index };
            let answer = self.servers[index].client.send(request);
            let answer = if read && !last {
                match tokio::time::timeout(ATTEMPT_TIMEOUT, answer).await {
                    Ok(answer) => answer,
                    Err(_) => {
                        drop(unanswered);
                        continue;
                    }
                }
            } else {
                answer.await
            };
            unanswered.answered();
            match answer {
                Ok(response) if !is_unavailable(response.status()) => return Ok(response),
                Ok(response) => {
                    self.move_on(index, &format!("answered {}", response.status()));
                    if last {
                        return Ok(response);
                    }
                }
                Err(e) => {
                    self.move_on(index, &e.to_string());
                    if last {
                        return Err(e);
                    }
                }
            }
        }
        unreachable!("the last attempt returns")
    }

    /// Moves the current server past `failed`, unless another request already did.
    fn move_on(&self, failed: usize, reason: &str) {
        let next = (failed + 1) % self.servers.len();
        if self
            .current
            .compare_exchange(failed, next, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            tracing::info!(
                failed = %self.servers[failed].url,
                next = %self.servers[next].url,
                reason,
                "API server unavailable; using the next one"
            );
        }
    }
}

/// Armed while a server has not answered: dropped so (a read's attempt timed out, or the
/// caller gave up on the request), it moves the pool past that server.
struct Unanswered<'p> {
    pool: &'p Pool,
    index: usize,
}

impl Unanswered<'_> {
    fn answered(self) {
        std::mem::forget(self);
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        self.pool.move_on(self.index, "no answer in time");
    }
}

fn is_unavailable(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::BAD_GATEWAY | StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT
    )
}

#[cfg(test)]
mod tests {
    //! Unreachable servers are made by binding a port and closing it; the servers that answer
    //! are `test_http`'s, since a test needs one that answers 503 on demand, which a real
    //! kube-apiserver cannot be made to do.
    use super::*;
    use std::sync::atomic::AtomicU32;

    fn closed_port() -> http::Uri {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        format!("http://127.0.0.1:{port}").parse().unwrap()
    }

    async fn serve(code: u16) -> (http::Uri, Arc<AtomicU32>) {
        crate::test_http::serve(code, "{}").await
    }

    fn config(url: http::Uri) -> Config {
        let mut config = Config::new(url);
        config.connect_timeout = Some(std::time::Duration::from_secs(2));
        config
    }

    async fn get(client: &Client) -> Result<u16, kube::Error> {
        let request = Request::get("/version").body(Vec::new()).unwrap();
        let response = client.send(request.map(Body::from)).await?;
        Ok(response.status().as_u16())
    }

    #[tokio::test]
    async fn a_get_goes_on_to_the_next_server_and_later_requests_stay_there() {
        let (alive, hits) = serve(200).await;
        let client = super::client(config(closed_port()), &[alive]).unwrap();
        assert_eq!(get(&client).await.unwrap(), 200, "retried on the live server");
        assert_eq!(get(&client).await.unwrap(), 200);
        assert_eq!(hits.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn a_post_is_not_sent_twice_but_the_next_request_uses_the_next_server() {
        let (alive, hits) = serve(201).await;
        let client = super::client(config(closed_port()), &[alive]).unwrap();
        let post = || {
            Request::post("/api/v1/namespaces/x/events")
                .body(Body::from(b"{}".to_vec()))
                .unwrap()
        };
        assert!(client.send(post()).await.is_err(), "the POST failed on the dead server");
        assert_eq!(hits.load(Ordering::Relaxed), 0);
        assert_eq!(client.send(post()).await.unwrap().status(), 201);
    }

    #[tokio::test]
    async fn an_unavailable_server_is_passed_over_once_and_not_asked_again() {
        let (busy, busy_hits) = serve(503).await;
        let (alive, alive_hits) = serve(200).await;
        let client = super::client(config(busy), &[alive]).unwrap();
        assert_eq!(get(&client).await.unwrap(), 200);
        assert_eq!(get(&client).await.unwrap(), 200);
        assert_eq!(
            (busy_hits.load(Ordering::Relaxed), alive_hits.load(Ordering::Relaxed)),
            (1, 2)
        );
    }

    #[tokio::test]
    async fn when_every_server_is_unavailable_the_last_answer_is_returned() {
        let (a, a_hits) = serve(503).await;
        let (b, b_hits) = serve(503).await;
        let client = super::client(config(a), &[b]).unwrap();
        assert_eq!(get(&client).await.unwrap(), 503);
        assert_eq!((a_hits.load(Ordering::Relaxed), b_hits.load(Ordering::Relaxed)), (1, 1));
    }

    /// A server that takes connections and never answers: an API server whose etcd is gone.
    async fn silent() -> http::Uri {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                held.push(conn);
            }
        });
        format!("http://{addr}").parse().unwrap()
    }

    #[tokio::test]
    async fn a_read_a_silent_server_does_not_answer_goes_on_to_the_next_and_later_requests_stay_there() {
        let (alive, hits) = serve(200).await;
        let client = super::client(config(silent().await), &[alive]).unwrap();
        let started = std::time::Instant::now();
        let answer = tokio::time::timeout(ATTEMPT_TIMEOUT * 3, get(&client)).await;
        assert_eq!(answer.expect("answered by the next server").unwrap(), 200);
        assert!(started.elapsed() >= ATTEMPT_TIMEOUT, "asked the silent server first");
        let started = std::time::Instant::now();
        assert_eq!(get(&client).await.unwrap(), 200);
        assert!(
            started.elapsed() < ATTEMPT_TIMEOUT,
            "not asked again: {:?}",
            started.elapsed()
        );
        assert_eq!(hits.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn a_request_its_caller_gives_up_on_moves_the_pool_past_a_silent_server() {
        let (alive, hits) = serve(200).await;
        let client = super::client(config(silent().await), &[alive]).unwrap();
        let gave_up = tokio::time::timeout(std::time::Duration::from_millis(500), get(&client)).await;
        assert!(gave_up.is_err(), "the caller timed out first");
        let answer = tokio::time::timeout(ATTEMPT_TIMEOUT / 2, get(&client)).await;
        assert_eq!(answer.expect("went to the next server at once").unwrap(), 200);
        assert_eq!(hits.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_write_is_not_cut_short_nor_sent_again() {
        let (alive, hits) = serve(200).await;
        let client = super::client(config(silent().await), &[alive]).unwrap();
        let put = || {
            Request::put("/api/v1/namespaces/x/configmaps/y")
                .body(Body::from(b"{}".to_vec()))
                .unwrap()
        };
        let waited = ATTEMPT_TIMEOUT + std::time::Duration::from_secs(1);
        let answer = tokio::time::timeout(waited, client.send(put())).await;
        assert!(answer.is_err(), "still waiting on the first server after {waited:?}");
        assert_eq!(hits.load(Ordering::Relaxed), 0, "not sent to a second server");
        let next = tokio::time::timeout(ATTEMPT_TIMEOUT / 2, client.send(put())).await;
        assert_eq!(
            next.expect("the next one goes to the next server").unwrap().status(),
            200
        );
    }

    #[tokio::test]
    async fn every_server_down_is_an_error_each_time() {
        let client = super::client(config(closed_port()), &[closed_port(), closed_port()]).unwrap();
        assert!(get(&client).await.is_err());
        assert!(get(&client).await.is_err());
    }
}

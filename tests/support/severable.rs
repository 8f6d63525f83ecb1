//! A TCP path a test can cut: a proxy to one address whose connections are all closed at once,
//! and every later one too, as when a node loses its route to the API server while the server
//! itself stays up for everyone else.

// Each test binary compiles every support module and uses a few of them.
#![allow(dead_code)]

use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

pub struct Severable {
    addr: SocketAddr,
    severed: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Severable {
    /// Forwards connections to `target` until [`Severable::sever`].
    pub fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let severed = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (cut, streams) = (severed.clone(), open.clone());
        thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if cut.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(upstream) = TcpStream::connect(target) else {
                    continue;
                };
                let mut streams = streams.lock().unwrap();
                for s in [&client, &upstream] {
                    streams.extend(s.try_clone().ok());
                }
                pipe(&client, &upstream);
                pipe(&upstream, &client);
            }
        });
        Self { addr, severed, open }
    }

    /// `https://<address>` to put in a kubeconfig in place of the server's.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Closes every connection through it and every later one.
    pub fn sever(&self) {
        self.severed.store(true, Ordering::SeqCst);
        for s in self.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Forwards new connections again, as when the route comes back.
    pub fn restore(&self) {
        self.severed.store(false, Ordering::SeqCst);
    }
}

/// Copies `from` to `to` on a thread of its own until either side closes.
fn pipe(from: &TcpStream, to: &TcpStream) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    thread::spawn(move || {
        let _ = io::copy(&mut from, &mut to);
        let _ = to.shutdown(Shutdown::Write);
    });
}

//! A TCP proxy between the service and PostgreSQL that a test can break the way networks break:
//! cut every connection open now, or lose the answer to a given request (the request
//! delivered, then its connection cut, or left open and silent: a half-open peer). Connections
//! made afterwards pass normally.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What becomes of a connection whose answer is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// Closed (once the server has had time to finish what the request asked).
    Cut,
    /// Left open with nothing passing either way.
    Silent,
}

#[derive(Default)]
struct Shared {
    /// The next request containing this is delivered and its answer lost.
    lose: Option<(Vec<u8>, Then)>,
    /// How many answers were lost so.
    lost: usize,
}

/// The proxy: listens on a loopback port, forwards to `target`.
pub struct Proxy {
    pub port: u16,
    /// Moved to cut every connection open now (each listens from its start).
    cuts: watch::Sender<u64>,
    shared: Arc<Mutex<Shared>>,
}

impl Proxy {
    pub async fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let (cuts, _) = watch::channel(0);
        let shared = Arc::new(Mutex::new(Shared::default()));
        let (tx, sh) = (cuts.clone(), shared.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(target).await else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                tokio::spawn(pass(client, server, tx.subscribe(), sh.clone()));
            }
        });
        Proxy { port, cuts, shared }
    }

    /// `url` (a `postgres://…@127.0.0.1:<port>/…` URL) through this proxy.
    pub fn url(&self, url: &str, target_port: u16) -> String {
        url.replace(
            &format!("127.0.0.1:{target_port}"),
            &format!("127.0.0.1:{}", self.port),
        )
    }

    /// Closes every connection open now.
    pub fn cut_all(&self) {
        self.cuts.send_modify(|n| *n += 1);
    }

    /// The next request (client to server) containing `marker` is delivered; the server's
    /// answer is not passed on, and the connection is then as `then` says.
    pub fn lose_answer_to(&self, marker: &[u8], then: Then) {
        self.lock().lose = Some((marker.to_vec(), then));
    }

    /// How many answers [`Self::lose_answer_to`] lost.
    pub fn lost(&self) -> usize {
        self.lock().lost
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Forwards between `client` and `server` until either closes or a fault ends it.
async fn pass(
    client: TcpStream,
    server: TcpStream,
    mut cuts: watch::Receiver<u64>,
    shared: Arc<Mutex<Shared>>,
) {
    cuts.borrow_and_update();
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let (mut up, mut down) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    // A request that must lose its answer went through on this connection.
    let mut doomed = None;
    loop {
        tokio::select! {
            n = cr.read(&mut up) => {
                let Ok(n @ 1..) = n else { return };
                let chunk = &up[..n];
                {
                    let mut s = shared.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some((m, then)) = &s.lose
                        && chunk.windows(m.len()).any(|w| w == m.as_slice())
                    {
                        doomed = Some(*then);
                        s.lose = None;
                        s.lost += 1;
                    }
                }
                if sw.write_all(chunk).await.is_err() {
                    return;
                }
            }
            n = sr.read(&mut down) => {
                let Ok(n @ 1..) = n else { return };
                match doomed {
                    // The answer has started: let the server finish what it does, then cut.
                    Some(Then::Cut) => {
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        return;
                    }
                    Some(Then::Silent) => {
                        // Held open, nothing read or written, until the test ends.
                        let _open = (cr, cw, sr, sw);
                        std::future::pending::<()>().await;
                        return;
                    }
                    None => {}
                }
                if cw.write_all(&down[..n]).await.is_err() {
                    return;
                }
            }
            // Cut, or the proxy is gone.
            _ = cuts.changed() => return,
        }
    }
}

//! A TCP proxy in front of an API server for one client, which the test can cut: the client
//! then runs on but reaches nothing, as a process on a node cut off from the control plane does
//! (a partition, a dead network path). What the issue-47 review reproduced its findings with.
//!
//! While cut, bytes stop flowing both ways on every connection and new connections are accepted
//! but never forwarded: the client's requests hang until its own timeouts, with no error from
//! the network. Healed, the connections that lived through the cut are closed (their requests
//! were lost midway) and new ones are forwarded again.

use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The proxy; stops when dropped.
#[derive(Debug)]
pub struct CutProxy {
    addr: SocketAddr,
    /// `true` while cut; each heal starts a new generation, which ends the older connections.
    state: Arc<watch::Sender<(bool, u64)>>,
    accept: JoinHandle<()>,
}

impl CutProxy {
    /// Starts forwarding connections made to a fresh port on 127.0.0.1 to `upstream`.
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (state, _) = watch::channel((false, 0));
        let state = Arc::new(state);
        let shared = Arc::clone(&state);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let _ = client.set_nodelay(true);
                tokio::spawn(forward(client, upstream, shared.subscribe()));
            }
        });
        Ok(Self {
            addr,
            state,
            accept,
        })
    }

    /// The address clients connect to instead of the server's.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Cuts the client off: nothing reaches the server or comes back until [`Self::heal`].
    pub fn cut(&self) {
        self.state.send_modify(|(cut, _)| *cut = true);
    }

    /// Ends the cut: connections open through it are closed, new ones go through.
    pub fn heal(&self) {
        self.state.send_modify(|(cut, generation)| {
            *cut = false;
            *generation += 1;
        });
    }

    /// Whether the client is cut off now.
    #[must_use]
    pub fn is_cut(&self) -> bool {
        self.state.borrow().0
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Forwards one connection until either side closes it, the proxy stops, or a cut it lived
/// through is healed; while cut, holds it silent.
async fn forward(
    mut client: TcpStream,
    upstream: SocketAddr,
    mut state: watch::Receiver<(bool, u64)>,
) {
    let born = state.borrow().1;
    // A connection made during a cut waits, unanswered, for the heal, then is closed.
    if state.borrow().0 {
        let _ = state.wait_for(|(_, generation)| *generation != born).await;
        return;
    }
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.split();
    let (mut server_read, mut server_write) = server.split();
    let (mut up, mut down) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    loop {
        if state.borrow().0 {
            let _ = state.wait_for(|(_, generation)| *generation != born).await;
            return;
        }
        tokio::select! {
            read = client_read.read(&mut up) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => if server_write.write_all(&up[..n]).await.is_err() { return },
            },
            read = server_read.read(&mut down) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => if client_write.write_all(&down[..n]).await.is_err() { return },
            },
            changed = state.changed() => if changed.is_err() { return },
        }
    }
}

//! The sandbox's way out as its supervisor last said (`POST /network`): the variables that
//! name the egress proxy (`HTTP_PROXY` and the like) for a sandbox held to an outbound policy,
//! none otherwise. Every shell exports them before its next command ([`crate::shell`]), so a
//! sandbox moved onto another network mid-life (setup's policy, then the agent's) has its
//! tools follow without a restart. They only help well-behaved tools: the network itself is
//! what keeps a sandbox from going around the proxy. A process sandbox reaches the proxy through
//! its executor ([`relay_to_proxy`]).

use std::collections::BTreeMap;

use halyard_protocol::executor::EGRESS_PROXY_PORT;
use std::sync::RwLock;

/// The variables now, and how many times they were set (a shell compares it with what it
/// exported last).
static CURRENT: RwLock<(u64, BTreeMap<String, String>)> = RwLock::new((0, BTreeMap::new()));

/// Replaces the variables.
pub fn set(vars: BTreeMap<String, String>) {
    let mut now = CURRENT.write().unwrap_or_else(|p| p.into_inner());
    if now.1 != vars {
        *now = (now.0 + 1, vars);
    }
}

/// The variables now, and their generation.
pub fn current() -> (u64, BTreeMap<String, String>) {
    CURRENT.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// A process sandbox's way to the egress proxy (`--egress-socket`): it has a network namespace
/// of its own with nothing but its loopback, so its executor listens on the loopback at
/// [`EGRESS_PROXY_PORT`] and joins each connection to the Unix socket its supervisor's proxy
/// serves for this sandbox alone (the proxy knows the sandbox by the socket). While the
/// sandbox is not held to a policy the socket is not there, and a connection is answered 502.
/// Binding before any command runs keeps an agent from taking the port first (it would only
/// reach the same socket if it did).
pub async fn relay_to_proxy(socket: std::path::PathBuf) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", EGRESS_PROXY_PORT)).await?;
    tokio::spawn(async move {
        loop {
            let Ok((mut inside, _)) = listener.accept().await else {
                // (Out of descriptors, say: waited out rather than spun on.)
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            };
            let socket = socket.clone();
            tokio::spawn(async move {
                let _ = inside.set_nodelay(true);
                match tokio::net::UnixStream::connect(&socket).await {
                    Ok(mut proxy) => {
                        // 64 KiB buffers, as the proxy's own (tokio's 8 KiB cost downloads dearly).
                        let _ = tokio::io::copy_bidirectional_with_sizes(&mut inside, &mut proxy, 64 << 10, 64 << 10).await;
                    }
                    Err(e) => {
                        let text = format!("halyard: this sandbox has no way out through the egress proxy now ({e})\n");
                        let reply = crate::tunnel::bad_gateway(&text);
                        let _ = tokio::io::AsyncWriteExt::write_all(&mut inside, reply.as_bytes()).await;
                    }
                }
            });
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The relay's port is fixed, so this is its one test in the process.
    #[tokio::test]
    async fn the_loopback_port_reaches_the_socket_and_says_so_when_it_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("egress.sock");
        relay_to_proxy(path.clone()).await.unwrap();

        let mut c = tokio::net::TcpStream::connect(("127.0.0.1", EGRESS_PROXY_PORT)).await.unwrap();
        let mut reply = String::new();
        c.read_to_string(&mut reply).await.unwrap();
        assert!(reply.starts_with("HTTP/1.1 502") && reply.contains("no way out"), "{reply}");

        let proxy = tokio::net::UnixListener::bind(&path).unwrap();
        tokio::spawn(async move {
            let (mut s, _) = proxy.accept().await.unwrap();
            let mut buf = [0u8; 7];
            s.read_exact(&mut buf).await.unwrap();
            s.write_all(&buf.map(|b| b.to_ascii_uppercase())).await.unwrap();
        });
        let mut c = tokio::net::TcpStream::connect(("127.0.0.1", EGRESS_PROXY_PORT)).await.unwrap();
        c.write_all(b"connect").await.unwrap();
        let mut back = [0u8; 7];
        c.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"CONNECT");
    }
}

//! The way into a process sandbox's network namespace. The sandbox has a network of its own, so
//! nothing it listens on is reachable from the host; the sandbox supervisor hands the executor a
//! Unix socket that only the supervisor can connect to, and forwards its own host ports (the
//! executor's API, the agent's apps) through it: each connection names the sandbox port it
//! wants on its first line (`8001\n`), and the executor joins it to `127.0.0.1:<port>` inside.
//!
//! Why through the executor: it already lives in the namespace, so no process of the host has
//! to enter it (which needs privileges a supervisor without root lacks).

use std::os::fd::FromRawFd;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};

/// Longest first line: a port number and its newline.
const MAX_LINE: usize = 8;

/// Serves tunnel connections on the listening Unix socket `fd` (inherited from the supervisor)
/// until the process ends.
///
/// # Safety
/// `fd` must be an open, listening Unix socket that nothing else in this process owns.
#[allow(unsafe_code)]
pub async unsafe fn serve_fd(fd: i32) -> std::io::Result<()> {
    // SAFETY: as the caller promises.
    let std_listener = unsafe { std::os::unix::net::UnixListener::from_raw_fd(fd) };
    std_listener.set_nonblocking(true)?;
    let listener = UnixListener::from_std(std_listener)?;
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::spawn(async move {
            if let Err(e) = join(stream).await {
                tracing::debug!(error = %e, "tunnel connection ended");
            }
        });
    }
}

async fn join(mut outside: UnixStream) -> std::io::Result<()> {
    let port = read_port(&mut outside).await?;
    let mut inside = match TcpStream::connect(("127.0.0.1", port)).await {
        Ok(s) => s,
        Err(e) => {
            // Say so in HTTP: the caller is a browser or the agent runner, through a proxy.
            let reply = bad_gateway(&format!("nothing listens on port {port} in the sandbox ({e})\n"));
            let _ = outside.write_all(reply.as_bytes()).await;
            return Ok(());
        }
    };
    let _ = inside.set_nodelay(true);
    tokio::io::copy_bidirectional(&mut outside, &mut inside).await.map(|_| ())
}

/// A whole `502` answer saying `text`, for a caller that speaks HTTP through a connection the
/// executor could not join to where it leads.
pub(crate) fn bad_gateway(text: &str) -> String {
    format!("HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}", text.len())
}

/// The port on the first line, read a byte at a time so nothing after it is consumed.
async fn read_port(s: &mut UnixStream) -> std::io::Result<u16> {
    let mut line = Vec::with_capacity(MAX_LINE);
    loop {
        let b = s.read_u8().await?;
        if b == b'\n' {
            break;
        }
        line.push(b);
        if line.len() > MAX_LINE {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "tunnel line too long"));
        }
    }
    std::str::from_utf8(&line)
        .ok()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "tunnel line is not a port"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::IntoRawFd;

    #[tokio::test]
    #[allow(unsafe_code)]
    async fn a_connection_reaches_the_port_it_names_and_a_closed_port_is_a_502() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tunnel.sock");
        let fd = std::os::unix::net::UnixListener::bind(&path).unwrap().into_raw_fd();
        // SAFETY: a fresh listening socket handed over whole.
        tokio::spawn(async move { unsafe { serve_fd(fd).await } });
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = server.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut s, _) = server.accept().await.unwrap();
            let mut buf = [0u8; 5];
            s.read_exact(&mut buf).await.unwrap();
            s.write_all(&buf.map(|b| b.to_ascii_uppercase())).await.unwrap();
        });
        let mut c = UnixStream::connect(&path).await.unwrap();
        c.write_all(format!("{port}\nhello").as_bytes()).await.unwrap();
        let mut back = [0u8; 5];
        c.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"HELLO");

        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut c = UnixStream::connect(&path).await.unwrap();
        c.write_all(format!("{closed}\n").as_bytes()).await.unwrap();
        let mut reply = String::new();
        c.read_to_string(&mut reply).await.unwrap();
        assert!(reply.starts_with("HTTP/1.1 502") && reply.contains(&format!("port {closed}")), "{reply}");
    }
}

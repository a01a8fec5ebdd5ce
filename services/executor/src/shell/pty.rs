//! The user's own terminal: `GET /terminal/ws` upgrades to a WebSocket bridged to a login shell
//! in a pseudo-terminal, in the workspace, separate from the agent's shell (its own process,
//! history and working directory). Binary frames carry bytes both ways (keystrokes in, the
//! screen out); a text frame from the client is a control message, `{"type": "resize", "cols":
//! C, "rows": R}`. The shell lives as long as the socket: closing either ends the other.

use std::path::PathBuf;

use axum::extract::ws::{Message, WebSocket};
use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A control message from the client.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Control {
    Resize { cols: u16, rows: u16 },
}

/// Serves one terminal over `socket` until either side ends.
pub async fn bridge(socket: WebSocket, workspace: PathBuf, env: Vec<(String, String)>) {
    let (mut tx, mut rx) = socket.split();
    let opened = pty_process::open().and_then(|(pty, pts)| {
        pty.resize(pty_process::Size::new(24, 80))?;
        let child = pty_process::Command::new("bash")
            .arg("-l")
            .current_dir(&workspace)
            .envs(env)
            .env("TERM", "xterm-256color")
            .kill_on_drop(true)
            .spawn(pts)?;
        Ok((pty, child))
    });
    let (pty, mut child) = match opened {
        Ok(x) => x,
        Err(e) => {
            let _ = tx.send(Message::Text(format!("the terminal could not start: {e}\r\n").into())).await;
            return;
        }
    };
    let (mut out, mut input) = pty.into_split();
    // The screen: what the shell writes, as it comes.
    let screen = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match out.read(&mut buf).await {
                // EIO once the shell has exited and the last reader is gone.
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.send(Message::Binary(buf[..n].to_vec().into())).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = tx.close().await;
    };
    // The keyboard and the window's size.
    let keys = async {
        while let Some(Ok(msg)) = rx.next().await {
            match msg {
                Message::Binary(bytes) if input.write_all(&bytes).await.is_err() => break,
                Message::Binary(_) => {}
                Message::Text(text) => match serde_json::from_str::<Control>(&text) {
                    Ok(Control::Resize { cols, rows }) if cols > 0 && rows > 0 => {
                        let _ = input.resize(pty_process::Size::new(rows.min(1000), cols.min(1000)));
                    }
                    // Anything else typed as text is keystrokes too.
                    _ => {
                        if input.write_all(text.as_bytes()).await.is_err() {
                            break;
                        }
                    }
                },
                Message::Close(_) => break,
                _ => {}
            }
        }
    };
    tokio::select! {
        _ = screen => {}
        _ = keys => {}
        _ = child.wait() => {}
    }
    let _ = child.start_kill();
}

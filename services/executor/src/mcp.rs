//! MCP servers that run in the sandbox. `GET /mcp/stdio` upgrades to a WebSocket whose first
//! message names a command ([`McpStdioSpawn`]); the executor starts it in the workspace and
//! carries MCP's stdio framing (one JSON-RPC message per line) over the socket, a text message
//! a line, both ways. The agent runner holds the MCP client; the server, and whatever it
//! runs, stays inside the sandbox like any command of the agent's.
//!
//! The process lives as long as the socket: closing either ends the other. When the process
//! ends first, the socket closes with the tail of its standard error as the reason, so a
//! server that cannot start is reported in its own words.

use std::path::PathBuf;
use std::process::Stdio;

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket};
use halyard_protocol::executor::McpStdioSpawn;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

/// Longest line accepted from a server (a tool result can be large; a runaway is not).
const MAX_LINE: usize = 16 << 20;
/// What a close frame's reason may hold (the WebSocket limit is 123 bytes).
const REASON_BYTES: usize = 120;

/// Serves one MCP server over `socket` until either ends.
pub async fn bridge(mut socket: WebSocket, workspace: PathBuf) {
    let spawn = match socket.recv().await {
        Some(Ok(Message::Text(text))) => serde_json::from_str::<McpStdioSpawn>(&text).map_err(|e| e.to_string()),
        _ => Err("the first message must name the command".into()),
    };
    let spawn = match spawn.and_then(|s| if s.command.trim().is_empty() { Err("`command` is empty".into()) } else { Ok(s) }) {
        Ok(s) => s,
        Err(e) => return close(socket, 1008, &e).await,
    };
    let mut child = match Command::new("bash")
        .arg("-c")
        .arg(&spawn.command)
        .current_dir(&workspace)
        .envs(&spawn.env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return close(socket, 1011, &format!("cannot start: {e}")).await,
    };
    let pgid = child.id().map(|p| p as i32);
    let (Some(mut stdin), Some(stdout), Some(stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take()) else {
        return close(socket, 1011, "cannot start: no pipes").await;
    };
    // Standard error is kept (its tail) for the reason a dead server gives.
    let stderr_tail = tokio::spawn(stderr_tail(stderr));
    let mut lines = BufReader::new(stdout);
    let mut line = Vec::new();
    let ended = loop {
        tokio::select! {
            incoming = socket.recv() => match incoming {
                Some(Ok(Message::Text(text))) => {
                    let mut bytes = text.as_bytes().to_vec();
                    bytes.retain(|b| *b != b'\n');
                    bytes.push(b'\n');
                    if stdin.write_all(&bytes).await.is_err() {
                        break None;
                    }
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Binary(_))) => {}
                // The client went away: the server goes too.
                Some(Ok(Message::Close(_)) | Err(_)) | None => break Some(()),
            },
            read = read_line(&mut lines, &mut line) => match read {
                Ok(true) => {
                    let text = String::from_utf8_lossy(&line).trim_end().to_owned();
                    line.clear();
                    if !text.is_empty() && socket.send(Message::Text(text.into())).await.is_err() {
                        break Some(());
                    }
                }
                Ok(false) | Err(_) => break None,
            },
        }
    };
    if let Some(pgid) = pgid {
        // The server and anything it started.
        crate::shell::crate_signal(-pgid, libc::SIGKILL);
    }
    let status = child.wait().await.ok();
    if ended.is_some() {
        return;
    }
    let tail = stderr_tail.await.unwrap_or_default();
    let code = status.and_then(|s| s.code()).map_or("was killed".to_owned(), |c| format!("exited with code {c}"));
    let last = tail.trim().lines().last().unwrap_or_default().to_owned();
    let reason = if last.is_empty() { format!("the server {code}") } else { format!("the server {code}: {last}") };
    close(socket, 1011, &reason).await;
}

/// Reads the rest of one line into `line`; `Ok(false)` at the end. Cancel-safe in a `select!`:
/// what was read stays in `line` for the next call, which the caller clears after a whole line.
async fn read_line(reader: &mut BufReader<tokio::process::ChildStdout>, line: &mut Vec<u8>) -> std::io::Result<bool> {
    let n = reader.read_until(b'\n', line).await?;
    if line.len() > MAX_LINE {
        return Err(std::io::Error::other("line too long"));
    }
    Ok(n > 0)
}

/// The last 4 KiB or so of what a process wrote on standard error (kept for the reason a dead
/// process gives).
pub(crate) async fn stderr_tail(mut stderr: tokio::process::ChildStderr) -> String {
    let mut tail = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        tail.extend_from_slice(&buf[..n]);
        if tail.len() > 8192 {
            tail.drain(..tail.len() - 4096);
        }
    }
    String::from_utf8_lossy(&tail).into_owned()
}

pub(crate) async fn close(mut socket: WebSocket, code: u16, reason: &str) {
    let mut cut = reason.len().min(REASON_BYTES);
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    let frame = CloseFrame { code, reason: Utf8Bytes::from(reason[..cut].to_owned()) };
    let _ = socket.send(Message::Close(Some(frame))).await;
}

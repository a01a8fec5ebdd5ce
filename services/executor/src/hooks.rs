//! Repository hooks (`POST /hooks/run`): one command of `.openhands/hooks.json`, which the
//! agent runner decides when to run. It runs as the sandbox's user in the workspace, like the
//! agent's commands, but in a process group of its own beside the agent's shell: nothing it
//! exports or changes stays, and a timeout kills all it started. Its input arrives on standard
//! input; each output stream is kept up to [`HOOK_OUTPUT_CAP`] bytes and read to its end, so a
//! chatty hook cannot block on a full pipe.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use halyard_protocol::executor::{HOOK_OUTPUT_CAP, HookRunRequest, HookRunResponse};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::error::ExecutorError;

/// The longest any hook may run, whatever its own timeout says.
const MAX_TIMEOUT: f64 = 600.0;

/// Runs one hook to its end or its timeout.
pub async fn run(workspace: &Path, env: &[(String, String)], req: HookRunRequest) -> Result<HookRunResponse, ExecutorError> {
    let timeout = Duration::from_secs_f64(req.timeout_secs.clamp(0.1, MAX_TIMEOUT));
    let spawned = tokio::process::Command::new("bash")
        .args(["--noprofile", "--norc", "-c", &req.command])
        .current_dir(workspace)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .envs(req.env.iter())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => return Ok(HookRunResponse { stderr: format!("the hook could not start: {e}"), ..Default::default() }),
    };
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    if let Some(mut stdin) = child.stdin.take() {
        // A hook that does not read its input must not hold the writer up.
        let input = req.stdin.into_bytes();
        tokio::spawn(async move {
            let _ = stdin.write_all(&input).await;
        });
    }
    let stdout = tokio::spawn(read_capped(child.stdout.take()));
    let stderr = tokio::spawn(read_capped(child.stderr.take()));
    let (exit_code, timed_out) = match tokio::time::timeout(timeout, child.wait()).await {
        Ok(Ok(status)) => (status.code(), false),
        Ok(Err(e)) => return Err(ExecutorError::Internal(format!("hook: {e}"))),
        Err(_) => {
            if pgid > 0 {
                crate::shell::crate_signal(-pgid, libc::SIGKILL);
            }
            let _ = child.wait().await;
            (None, true)
        }
    };
    // What it left running in the background keeps its pipes open: read what came, then stop.
    let grace = Duration::from_millis(500);
    let stdout = tokio::time::timeout(grace, stdout).await.ok().and_then(Result::ok).unwrap_or_default();
    let mut stderr = tokio::time::timeout(grace, stderr).await.ok().and_then(Result::ok).unwrap_or_default();
    if timed_out {
        stderr.push_str(&format!("\n[the hook was stopped after {} s]", timeout.as_secs_f64()));
    }
    Ok(HookRunResponse { exit_code, stdout, stderr, timed_out })
}

/// A stream, read to its end, keeping its first [`HOOK_OUTPUT_CAP`] bytes.
async fn read_capped<R: AsyncRead + Unpin>(pipe: Option<R>) -> String {
    let Some(mut pipe) = pipe else { return String::new() };
    let mut kept = Vec::new();
    let mut buf = vec![0u8; 8192];
    let mut cut = false;
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = HOOK_OUTPUT_CAP.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                cut |= n > room;
            }
        }
    }
    let mut text = String::from_utf8_lossy(&kept).into_owned();
    if cut {
        text.push_str("\n[cut]");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(command: &str, timeout: f64) -> HookRunRequest {
        HookRunRequest {
            command: command.into(),
            stdin: "{\"tool_name\":\"terminal\"}".into(),
            timeout_secs: timeout,
            env: Default::default(),
        }
    }

    #[tokio::test]
    async fn a_hook_reads_its_input_and_says_what_it_decided() {
        let ws = tempfile::tempdir().unwrap();
        let out = run(ws.path(), &[], req("cat; echo no >&2; exit 2", 10.0)).await.unwrap();
        assert_eq!((out.exit_code, out.stdout.as_str(), out.stderr.as_str()), (Some(2), "{\"tool_name\":\"terminal\"}", "no\n"));
        let mut r = req("echo \"$X\" > seen.txt", 10.0);
        r.env.insert("X".into(), "given".into());
        assert_eq!(run(ws.path(), &[], r).await.unwrap().exit_code, Some(0));
        assert_eq!(std::fs::read_to_string(ws.path().join("seen.txt")).unwrap(), "given\n", "in the workspace, with its env");
    }

    #[tokio::test]
    async fn a_hook_past_its_timeout_is_killed_with_what_it_started() {
        let ws = tempfile::tempdir().unwrap();
        let started = std::time::Instant::now();
        let out = run(ws.path(), &[], req("sleep 30 & sleep 30", 0.5)).await.unwrap();
        assert!(out.timed_out && out.exit_code.is_none(), "{out:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(out.stderr.contains("stopped after 0.5 s"), "{out:?}");
        let big = run(ws.path(), &[], req("head -c 100000 /dev/zero | tr '\\0' x", 10.0)).await.unwrap();
        assert!(big.stdout.len() < HOOK_OUTPUT_CAP + 10 && big.stdout.ends_with("[cut]"));
    }
}

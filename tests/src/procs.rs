//! Finding and inspecting sandbox processes, for tests that poke at them from outside.

use std::path::Path;

/// Pid of the executor serving `workspace`, found through `/proc`.
pub fn executor_pid(workspace: &Path) -> Option<i32> {
    let needle = workspace.to_string_lossy().to_string();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let args: Vec<String> = cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        if args.iter().any(|a| a == "executor") && args.contains(&needle) {
            return Some(pid);
        }
    }
    None
}

/// The one-letter state of a process (`S`, `R`, `T` for stopped...).
pub fn state(pid: i32) -> Option<char> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("State:")).and_then(|s| s.trim().chars().next())
}

/// SIGKILL, from outside, as a crash or an operator would.
pub fn kill(pid: i32) {
    let _ = std::process::Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
}

/// The live processes of process group `pgid` (zombies left out).
pub fn group(pgid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
            // Fields after the command name (which may hold spaces): state, ppid, pgrp.
            let mut rest = stat.rsplit_once(')').map(|(_, r)| r.split_whitespace()).into_iter().flatten();
            let state = rest.next();
            let pgrp = rest.nth(1).and_then(|g| g.parse::<i32>().ok());
            state != Some("Z") && pgrp == Some(pgid)
        })
        .collect()
}

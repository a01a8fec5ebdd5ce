//! What a checkpoint costs (issue 24's aim: under 20 ms and a few KB per step when one file
//! changed, on a workspace of 10,000 files). The executor's own store ([`Checkpoints`]) on a
//! workspace of 10,000 files of about 1 KiB in 100 directories: per repetition, one file changed
//! then a checkpoint, and a checkpoint with nothing changed; wall time, the CPU of the git
//! processes it ran, and the bytes the store grew by. The baseline, in the same run: keeping the
//! workspace by copying it whole (`cp -a`), what a checkpoint without a store would cost.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context as _, Result};
use halyard_executor::checkpoint::Checkpoints;
use serde_json::{Value, json};

use crate::record::{Context, spread};

/// CPU seconds (user and system) of this process's finished children so far (`cutime` and
/// `cstime` of /proc/self/stat: in ticks of 10 ms, so one checkpoint's is read as a sum over all).
fn children_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = stat.rfind(')').map(|i| &stat[i + 2..]).unwrap_or_default();
    let fields: Vec<&str> = rest.split(' ').collect();
    let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    (tick(13) + tick(14)) as f64 / 100.0
}

fn du(path: &Path) -> u64 {
    let out = std::process::Command::new("du").args(["-sb"]).arg(path).output();
    out.ok().and_then(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().next().and_then(|n| n.parse().ok())).unwrap_or(0)
}

pub async fn run(reps: usize) -> Result<Value> {
    let context = Context::now();
    // The workspace: 100 packages of 100 files (5 of 5 in a smoke run).
    let (dirs, files_per_dir) = (crate::scaled(100, 5), crate::scaled(100, 5));
    let root = tempfile::tempdir()?;
    let ws = root.path().join("workspace");
    for d in 0..dirs {
        let dir = ws.join(format!("pkg{d:03}"));
        std::fs::create_dir_all(&dir)?;
        for f in 0..files_per_dir {
            let text = format!("// file {d}/{f}\n{}\n", "x".repeat(1000));
            std::fs::write(dir.join(format!("mod{f:03}.rs")), text)?;
        }
    }
    let workspace_bytes = du(&ws);
    let store = Checkpoints::new(ws.clone());
    let began = Instant::now();
    let first = store.take(1, None).await.context("the first checkpoint")?;
    // Each checkpoint follows the last as the runner kept it (as the agent runner asks).
    let mut head = first.commit.clone();
    let first_ms = began.elapsed().as_secs_f64() * 1000.0;
    let first_bytes = store.disk_bytes();

    let mut runs = Vec::new();
    for rep in 0..reps {
        let seq = 2 + 2 * rep as u64;
        // One file changed.
        let file = ws.join(format!("pkg{:03}/mod{:03}.rs", rep % dirs, rep % files_per_dir));
        let mut text = std::fs::read_to_string(&file)?;
        text.push_str(&format!("// change {rep}\n"));
        std::fs::write(&file, text)?;
        let (bytes_before, cpu_before) = (store.disk_bytes(), children_cpu());
        let began = Instant::now();
        let changed = store.take(seq, Some(&head)).await?;
        head = changed.commit.clone();
        let changed_ms = began.elapsed().as_secs_f64() * 1000.0;
        let (changed_bytes, changed_cpu) = (store.disk_bytes().saturating_sub(bytes_before), children_cpu() - cpu_before);
        anyhow::ensure!(changed.changed, "a changed file made no new checkpoint");
        // Nothing changed.
        let (bytes_before, cpu_before) = (store.disk_bytes(), children_cpu());
        let began = Instant::now();
        let same = store.take(seq + 1, Some(&head)).await?;
        let same_ms = began.elapsed().as_secs_f64() * 1000.0;
        anyhow::ensure!(!same.changed, "an unchanged workspace made a new checkpoint");
        let (same_bytes, same_cpu) = (store.disk_bytes().saturating_sub(bytes_before), children_cpu() - cpu_before);
        // The baseline: the workspace copied whole.
        let copy = root.path().join(format!("copy{rep}"));
        let cpu_before = children_cpu();
        let began = Instant::now();
        let ok = std::process::Command::new("cp").arg("-a").arg(&ws).arg(&copy).status()?.success();
        let copy_ms = began.elapsed().as_secs_f64() * 1000.0;
        let copy_cpu = children_cpu() - cpu_before;
        anyhow::ensure!(ok, "cp -a failed");
        let copy_bytes = du(&copy);
        std::fs::remove_dir_all(&copy)?;
        runs.push(json!({
            "one_file_changed": {"ms": changed_ms, "cpu_ms": changed_cpu * 1000.0, "bytes": changed_bytes},
            "nothing_changed": {"ms": same_ms, "cpu_ms": same_cpu * 1000.0, "bytes": same_bytes},
            "baseline_copy": {"ms": copy_ms, "cpu_ms": copy_cpu * 1000.0, "bytes": copy_bytes},
        }));
    }
    // Restoring the first checkpoint, for the record: from the kept head, every object of the
    // store checked first.
    let began = Instant::now();
    store.restore(1, Some(&head)).await?;
    let restore_ms = began.elapsed().as_secs_f64() * 1000.0;

    let pick = |case: &str, field: &str| spread(runs.iter().filter_map(|r| r[case][field].as_f64()));
    // CPU comes in ticks of 10 ms: per checkpoint, the sum over the repetitions.
    let cpu_each = |case: &str| runs.iter().filter_map(|r| r[case]["cpu_ms"].as_f64()).sum::<f64>() / runs.len().max(1) as f64;
    let changed_ms = pick("one_file_changed", "ms");
    let copy_ms = pick("baseline_copy", "ms");
    let ratio = |a: &Value, b: &Value| a["median"].as_f64().zip(b["median"].as_f64()).map(|(a, b)| a / b);
    Ok(json!({
        "suite": "checkpoint",
        "context": context,
        "workspace": {"files": dirs * files_per_dir, "bytes": workspace_bytes},
        "first_checkpoint": {"ms": first_ms, "store_bytes": first_bytes, "commit": first.commit},
        "one_file_changed": {"ms": changed_ms, "cpu_ms_each": cpu_each("one_file_changed"), "bytes": pick("one_file_changed", "bytes")},
        "nothing_changed": {"ms": pick("nothing_changed", "ms"), "cpu_ms_each": cpu_each("nothing_changed"), "bytes": pick("nothing_changed", "bytes")},
        "baseline_copy": {"ms": copy_ms, "cpu_ms_each": cpu_each("baseline_copy"), "bytes": pick("baseline_copy", "bytes")},
        "ratio_time_vs_copy": ratio(&changed_ms, &copy_ms),
        "ratio_cpu_vs_copy": (cpu_each("baseline_copy") > 0.0).then(|| cpu_each("one_file_changed") / cpu_each("baseline_copy")),
        "ratio_bytes_vs_copy": ratio(&pick("one_file_changed", "bytes"), &pick("baseline_copy", "bytes")),
        "restore_first_ms": restore_ms,
        "targets": {"one_file_changed_ms": 20, "one_file_changed_bytes": "a few KB"},
        "runs": runs,
        "reproduce": "cargo run --release -p halyard-load -- --suite checkpoint (writes load/results/checkpoint.json)",
    }))
}

//! What a checkpoint costs as the workspace grows (issue 24's aim: under 20 ms and a few KB per
//! step when one file changed, on 10,000 files; issue 58's: under 10 ms, and flat from 1,000 to
//! 100,000 files). The executor's own store ([`Checkpoints`]) on workspaces of 1,000, 10,000
//! and 100,000 files of about 1 KiB, 100 to a directory: per repetition, one file changed then
//! a checkpoint, and a checkpoint with nothing changed; wall time, the CPU of the git processes
//! it ran, and the bytes the store grew by.
//!
//! The baseline, in the same run: the same store without its watch ([`Checkpoints::unwatched`]),
//! on a copy of the workspace with the same change, so every checkpoint looks at the whole
//! workspace as before (a walk in this process, then `git add -A .`). The two alternate.

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

/// `files` files of about 1 KiB, 100 to a directory, under `ws`.
fn make_workspace(ws: &Path, files: usize) -> Result<()> {
    for i in 0..files {
        let dir = ws.join(format!("pkg{:04}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir)?;
        }
        std::fs::write(dir.join(format!("mod{:03}.rs", i % 100)), format!("// file {i}\n{}\n", "x".repeat(1000)))?;
    }
    Ok(())
}

/// One checkpoint of `store`, following `head`: its figures, and the new head.
async fn measure(store: &Checkpoints, seq: u64, head: &str) -> Result<(Value, String, bool)> {
    let (bytes, cpu) = (store.disk_bytes(), children_cpu());
    let began = Instant::now();
    let taken = store.take(seq, Some(head)).await?;
    let ms = began.elapsed().as_secs_f64() * 1000.0;
    let figures = json!({"ms": ms, "cpu_ms": (children_cpu() - cpu) * 1000.0, "bytes": store.disk_bytes().saturating_sub(bytes)});
    Ok((figures, taken.commit, taken.changed))
}

/// One workspace size: its repetitions, watched and unwatched.
async fn size(files: usize, reps: usize) -> Result<Value> {
    let root = tempfile::tempdir()?;
    let (ws, copy) = (root.path().join("workspace"), root.path().join("baseline"));
    make_workspace(&ws, files)?;
    anyhow::ensure!(std::process::Command::new("cp").arg("-a").arg(&ws).arg(&copy).status()?.success(), "cp -a failed");
    let workspace_bytes = du(&ws);
    let (watched, unwatched) = (Checkpoints::new(ws.clone()), Checkpoints::unwatched(copy.clone()));
    let began = Instant::now();
    let mut heads = [watched.take(1, None).await.context("the first checkpoint")?.commit, String::new()];
    let first_ms = began.elapsed().as_secs_f64() * 1000.0;
    heads[1] = unwatched.take(1, None).await?.commit;
    // Past the file clock's tick, so that neither meets files git must read again as racy.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let mut runs = Vec::new();
    for rep in 0..reps {
        let seq = 2 + 2 * rep as u64;
        let file = format!("pkg{:04}/mod{:03}.rs", (rep * 37) % files.div_ceil(100), rep % 100.min(files));
        let mut run = serde_json::Map::new();
        let order = if rep % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let (store, dir, name) = if which == 0 { (&watched, &ws, "watched") } else { (&unwatched, &copy, "baseline_full_look") };
            let path = dir.join(&file);
            let mut text = std::fs::read_to_string(&path)?;
            text.push_str(&format!("// change {rep}\n"));
            std::fs::write(&path, text)?;
            let (changed, head, new) = measure(store, seq, &heads[which]).await?;
            anyhow::ensure!(new, "{name}: a changed file made no new checkpoint");
            let (same, same_head, new) = measure(store, seq + 1, &head).await?;
            anyhow::ensure!(!new && same_head == head, "{name}: an unchanged workspace made a new checkpoint");
            heads[which] = head;
            run.insert(name.into(), json!({"one_file_changed": changed, "nothing_changed": same}));
        }
        runs.push(Value::Object(run));
    }
    let pick = |way: &str, case: &str, field: &str| spread(runs.iter().filter_map(|r| r[way][case][field].as_f64()));
    // CPU comes in ticks of 10 ms: per checkpoint, the sum over the repetitions.
    let cpu_each =
        |way: &str, case: &str| runs.iter().filter_map(|r| r[way][case]["cpu_ms"].as_f64()).sum::<f64>() / runs.len().max(1) as f64;
    let way = |w: &str| {
        json!({
            "one_file_changed": {"ms": pick(w, "one_file_changed", "ms"), "cpu_ms_each": cpu_each(w, "one_file_changed"),
                "bytes": pick(w, "one_file_changed", "bytes")},
            "nothing_changed": {"ms": pick(w, "nothing_changed", "ms"), "cpu_ms_each": cpu_each(w, "nothing_changed")},
        })
    };
    let (now, base) = (way("watched"), way("baseline_full_look"));
    let ratio = |case: &str| {
        let (a, b) = (now[case]["ms"]["median"].as_f64(), base[case]["ms"]["median"].as_f64());
        a.zip(b).map(|(a, b)| (a / b * 1000.0).round() / 1000.0)
    };
    Ok(json!({
        "files": files,
        "workspace_bytes": workspace_bytes,
        "first_checkpoint_ms": first_ms,
        // 1: only the first checkpoint looked at everything (the watch is trusted for 2 min).
        "watched_full_looks": watched.full_looks(),
        "watched": now,
        "baseline_full_look": base,
        "one_file_changed_over_baseline": ratio("one_file_changed"),
        "nothing_changed_over_baseline": ratio("nothing_changed"),
        "runs": runs,
    }))
}

pub async fn run(reps: usize) -> Result<Value> {
    let context = Context::now();
    let sizes: Vec<usize> = crate::scaled(vec![1_000, 10_000, 100_000], vec![50, 300]);
    let mut out = Vec::new();
    for files in sizes {
        let r = size(files, reps).await?;
        eprintln!(
            "checkpoint at {files} files: one changed {} ms (baseline {}), none changed {} ms (baseline {})",
            r["watched"]["one_file_changed"]["ms"]["median"],
            r["baseline_full_look"]["one_file_changed"]["ms"]["median"],
            r["watched"]["nothing_changed"]["ms"]["median"],
            r["baseline_full_look"]["nothing_changed"]["ms"]["median"]
        );
        out.push(r);
    }
    Ok(json!({
        "suite": "checkpoint",
        "context": context,
        "repetitions": reps,
        "sizes": out,
        "targets": {"one_file_changed_ms": 10, "flat_from_1000_to_100000_files": true, "one_file_changed_bytes": "a few KB"},
        "reproduce": "cargo run --release -p halyard-load -- --suite checkpoint (writes load/results/checkpoint.json)",
    }))
}

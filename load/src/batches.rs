//! Batches (issue 54): 200 tasks at concurrency 16, each checked by a command when its agent
//! finishes, against the same 200 tasks run by a client that starts them itself, 16 at a time,
//! each as one of its own ends, with no checks (what a script did before batches). One
//! `halyard up` with process sandboxes; the scripted LLM's agent finishes at once, so what is
//! measured is the platform: starts, the check, the batch's bookkeeping, the results table.
//!
//! Per repetition: the wall time from the first request to the last item's end, and CPU per
//! item (Halyard's processes with their sandboxes, and nats-server), for both; their ratios are
//! the batch's overhead per item over a bare conversation, and its wall time against the
//! client's.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use halyard_tests::{Api, Halyard, HalyardOptions, Reply, ScriptedLlm};
use serde_json::{Value, json};

use crate::record::{Context, spread};

const CONCURRENCY: usize = 16;

fn items(n: usize) -> Vec<Value> {
    (0..n).map(|i| json!({"message": format!("task {i}"), "title": format!("task {i}")})).collect()
}

/// CPU seconds of `h`'s processes (with their sandboxes) and of nats-server.
fn cpu(h: &Halyard) -> f64 {
    let [nats, rest] = crate::cpu_of_tree(h.pid());
    nats + rest
}

/// One batch of `n` items: its wall time (s) once every item ended, all of them passed.
async fn batch(api: &Api, n: usize) -> Result<f64> {
    let began = Instant::now();
    let body = json!({"items": items(n), "concurrency": CONCURRENCY, "verify": [{"command": "true"}], "max_verify_attempts": 1});
    let (s, b) = api.post("/api/v1/batches", body).await;
    ensure!(s == 201, "the batch was refused: {b}");
    let id = b["id"].as_str().context("no batch id")?.to_owned();
    loop {
        let (_, b) = api.get(&format!("/api/v1/batches/{id}")).await;
        if b["status"] == "done" {
            ensure!(b["counts"]["passed"].as_u64() == Some(n as u64), "not every item passed: {}", b["counts"]);
            return Ok(began.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The same items started by a client, `CONCURRENCY` at a time, the next when one of its own
/// finished: its wall time (s).
async fn client(api: &Api, n: usize) -> Result<f64> {
    let began = Instant::now();
    let mut waiting = items(n).into_iter();
    let mut running: Vec<String> = Vec::new();
    let mut finished = 0;
    while finished < n {
        while running.len() < CONCURRENCY {
            let Some(item) = waiting.next() else { break };
            let (s, t) = api.post("/api/v1/conversations", item).await;
            ensure!(s == 202, "the start was refused: {t}");
            running.push(t["conversation_id"].as_str().context("no conversation id")?.to_owned());
        }
        let mut still = Vec::new();
        for conv in running {
            let (_, c) = api.get(&format!("/api/v1/conversations/{conv}")).await;
            match c["state"].as_str() {
                Some("finished") => finished += 1,
                Some("start_failed" | "error" | "stuck") => anyhow::bail!("conversation {conv} failed: {c}"),
                _ => still.push(conv),
            }
        }
        running = still;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(began.elapsed().as_secs_f64())
}

pub async fn run(reps: usize) -> Result<Value> {
    let context = Context::now();
    let n = crate::scaled(200, 20);
    let llm = ScriptedLlm::start().await;
    llm.fallback(|_| Reply::finish("done"));
    let mut opts = HalyardOptions::new(&llm.base_url)
        .set("HALYARD_LOG", "warn")
        .set("HALYARD_RATE_LIMIT_PER_MINUTE", "0")
        .set("HALYARD_MAX_STARTING_PER_USER", "0")
        .set("HALYARD_SANDBOX_IDLE_STOP_SECS", "0");
    opts.api_keys = format!("alice:{}", crate::KEY);
    let h = Halyard::start(opts);
    let api = h.api(crate::KEY);
    let mut results = serde_json::Map::new();
    for mode in ["batch", "baseline_client"] {
        let mut runs = Vec::new();
        for rep in 0..reps {
            crate::record::settle(Duration::from_secs(20));
            let before = cpu(&h);
            let wall = if mode == "batch" { batch(&api, n).await? } else { client(&api, n).await? };
            let cpu_ms_per_item = (cpu(&h) - before) * 1000.0 / n as f64;
            let r = json!({"wall_s": (wall * 100.0).round() / 100.0, "cpu_ms_per_item": (cpu_ms_per_item * 10.0).round() / 10.0});
            eprintln!("batches suite, {mode}, repetition {rep}: {r}");
            runs.push(r);
        }
        let of = |k: &str| spread(runs.iter().filter_map(|r| r[k].as_f64()));
        results.insert(mode.into(), json!({"wall_s": of("wall_s"), "cpu_ms_per_item": of("cpu_ms_per_item"), "runs": runs}));
    }
    let median = |mode: &str, key: &str| results[mode][key]["median"].as_f64();
    let ratio = |key: &str| median("batch", key).zip(median("baseline_client", key)).map(|(a, b)| (a / b * 1000.0).round() / 1000.0);
    Ok(json!({
        "suite": "batches",
        "context": context,
        "repetitions": reps,
        "setup": {"items": n, "concurrency": CONCURRENCY, "sandboxes": "process", "check": "the command `true`",
                  "baseline": "a client starting the same items itself, 16 at a time, polling each to its end, no checks"},
        "results": results,
        "batch_over_client": {"wall_s": ratio("wall_s"), "cpu_ms_per_item": ratio("cpu_ms_per_item")},
        "reproduce": "cargo run --release -p halyard-load -- --suite batches (writes load/results/batches.json)",
    }))
}

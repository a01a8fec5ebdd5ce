//! Hibernation (issue 27): how long a user waits when they come back to a conversation whose
//! sandbox hibernated, for both sandbox kinds, against a real `halyard up` (release build).
//!
//! Each repetition starts a conversation (no warm pool: timed, as the cold-start figure of the
//! same run), looks at its files once while it runs (the baseline: the same request, nothing to
//! wake), waits until it hibernates (`HALYARD_SANDBOX_IDLE_STOP_SECS=1`), then times the same
//! look again: the gateway asks the sandbox to resume, the supervisor starts a new executor on
//! the workspace (process) or the stopped container again (Docker), and the request is answered
//! once the executor does. CPU is Halyard's and nats-server's over the wake-up (Docker's own
//! daemons are not counted). The conversation is deleted after, and the next repetition waits
//! until its sandbox is gone. A benchmark reports; it does not assert.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use halyard_tests::{Api, Halyard, HalyardOptions, ScriptedLlm};
use serde_json::{Value, json};

use crate::record::{Context, spread};
use crate::{KEY, cpu_seconds, cpu_seconds_with_children};

fn cpu() -> f64 {
    cpu_seconds_with_children("halyard") + cpu_seconds("nats-server")
}

fn round(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

async fn look(api: &Api, conv: &str) -> Result<f64> {
    let t = Instant::now();
    let (s, v) = api.get(&format!("/api/v1/conversations/{conv}/files?path=")).await;
    ensure!(s == 200, "the files did not answer: {s} {v}");
    Ok(t.elapsed().as_secs_f64() * 1000.0)
}

async fn once(api: &Api) -> Result<Value> {
    let t = Instant::now();
    let (conv, task) = api.start_ready(json!({})).await;
    let start_ms = t.elapsed().as_secs_f64() * 1000.0;
    let sandbox = task["sandbox_id"].as_str().unwrap_or_default().to_owned();
    let baseline_ms = look(api, &conv).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, s) = api.get(&format!("/api/v1/sandboxes/{sandbox}")).await;
        if s["status"] == "HIBERNATED" {
            break;
        }
        ensure!(Instant::now() < deadline, "the sandbox did not hibernate within a minute: {s}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cpu0 = cpu();
    let wake_ms = look(api, &conv).await?;
    let cpu_wake = cpu() - cpu0;
    let (_, s) = api.get(&format!("/api/v1/sandboxes/{sandbox}")).await;
    ensure!(s["status"] == "RUNNING", "the look did not wake the sandbox: {s}");
    api.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{conv}"), None).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while api.get(&format!("/api/v1/sandboxes/{sandbox}")).await.0 != 404 {
        ensure!(Instant::now() < deadline, "sandbox {sandbox} was not deleted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(json!({
        "start_ms": round(start_ms),
        "baseline_files_ms": round(baseline_ms),
        "wake_to_ready_ms": round(wake_ms),
        "cpu_ms_wake": round(cpu_wake * 1000.0),
    }))
}

async fn kind(kind: &str, reps: usize) -> Result<Value> {
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(
        HalyardOptions::new(&llm.base_url)
            .set("HALYARD_LOG", "warn")
            .set("HALYARD_RATE_LIMIT_PER_MINUTE", "0")
            .set("HALYARD_SANDBOX", kind)
            .set("HALYARD_SANDBOX_POOL_SIZE", "0")
            .set("HALYARD_SANDBOX_IDLE_STOP_SECS", "1"),
    );
    let api = h.api(KEY);
    let runs = crate::record::collect(&format!("hibernation ({kind})"), reps, |_| once(&api)).await?;
    drop(h);
    let of = |key: &str| spread(runs.iter().filter_map(|r| r[key].as_f64()));
    let (wake, start, base) = (of("wake_to_ready_ms"), of("start_ms"), of("baseline_files_ms"));
    let ratio = |a: &Value, b: &Value| a["median"].as_f64().zip(b["median"].as_f64()).filter(|(_, b)| *b > 0.0).map(|(a, b)| round(a / b));
    Ok(json!({
        "wake_to_ready_ms": wake,
        "start_ms": start,
        "baseline_files_ms": base,
        "wake_to_start_ratio": ratio(&wake, &start),
        "wake_to_baseline_ratio": ratio(&wake, &base),
        "cpu_ms_wake": of("cpu_ms_wake"),
        "runs": runs,
    }))
}

pub async fn run(reps: usize) -> Result<Value> {
    let context = Context::now();
    let process = kind("process", reps).await?;
    let docker = kind("docker", reps).await?;
    Ok(json!({
        "suite": "hibernation",
        "context": context,
        "repetitions": reps,
        "process": process,
        "docker": docker,
        "notes": "wake_to_ready_ms: GET /conversations/{id}/files?path= on a hibernated sandbox until it answers 200 (the \
                  gateway's resume, the supervisor's new executor or container start, the executor's first answer). \
                  baseline_files_ms: the same request while the sandbox runs. start_ms: POST /conversations to READY \
                  (no warm pool) in the same run. Process sandboxes run isolated under a uid of their own (the \
                  benchmark runs as root). CPU: halyard (with reaped children) and nats-server over the wake-up; \
                  Docker's daemons are not counted.",
        "reproduce": "cargo run --release -p halyard-load -- --suite hibernation (writes load/results/hibernation.json)",
    }))
}

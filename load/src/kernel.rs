//! The agent's Python cells (issue 32): the first `execute_ipython_cell` of a conversation,
//! which starts its IPython kernel, and a warm cell's round trip, against a real `halyard up`
//! with process sandboxes and the scripted LLM. Each repetition is a new conversation (a new
//! sandbox, so the kernel is cold): a `terminal true` step (what any step costs, the baseline
//! from the same run), the first cell, then a second. A step's time is from its action event
//! to its observation event (the log's millisecond timestamps): the agent runner, the executor
//! and the kernel. CPU is that of Halyard's processes, nats-server and the kernel (python3)
//! over the whole run. A benchmark reports; it does not assert.

use std::time::Duration;

use anyhow::{Result, ensure};
use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm};
use serde_json::{Value, json};

use crate::browser::step_ms;
use crate::record::{Context, spread};
use crate::{KEY, cpu_seconds};

const REPS: usize = 7;

fn cell(code: &str) -> Reply {
    Reply::tool("execute_ipython_cell", json!({"code": code, "security_risk": "low"}))
}

fn python_running() -> bool {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| std::fs::read_to_string(e.path().join("cmdline")).is_ok_and(|s| s.contains("ipykernel_launcher")))
}

async fn once(h: &Halyard, llm: &ScriptedLlm) -> Result<(Vec<(String, f64)>, f64)> {
    let api = h.api(KEY);
    llm.push([
        Reply::tool("terminal", json!({"command": "true", "security_risk": "low"})),
        cell("import math\nx = math.pi"),
        cell("round(x * 2, 3)"),
        Reply::finish("done"),
    ]);
    let (conv, _) = api.start_ready(json!({})).await;
    let cpu0 = cpu_seconds("halyard") + cpu_seconds("nats-server") + cpu_seconds("python3");
    let (s, _) = api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "compute"})).await;
    ensure!(s == 202, "the message was refused: {s}");
    let events =
        api.wait_events(&conv, "the run", |ev| ev.iter().any(|e| e["kind"] == "execution_status" && e["status"] == "finished")).await;
    let spent = cpu_seconds("halyard") + cpu_seconds("nats-server") + cpu_seconds("python3") - cpu0;
    let errors: Vec<&Value> = events.iter().filter(|e| e["kind"] == "observation" && e["is_error"] == true).collect();
    ensure!(errors.is_empty(), "a step failed: {errors:?}");
    let second = events.iter().rev().find(|e| e["kind"] == "observation" && e["tool"] == "execute_ipython_cell");
    ensure!(second.is_some_and(|e| e["content"] == "6.283"), "the second cell did not see the first's x: {second:?}");
    api.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{conv}"), None).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while python_running() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ensure!(!python_running(), "the deleted sandbox's kernel still runs 20 s later");
    Ok((step_ms(&events), spent))
}

pub async fn run() -> Result<Value> {
    let context = Context::now();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(
        HalyardOptions::new(&llm.base_url)
            .set("HALYARD_LOG", "warn")
            .set("HALYARD_RATE_LIMIT_PER_MINUTE", "0")
            .set("HALYARD_SANDBOX_POOL_SIZE", "0"),
    );
    let mut runs = Vec::new();
    for rep in 0..REPS {
        let (steps, cpu_s) = once(&h, &llm).await?;
        let ms = |i: usize| steps.get(i).map(|s| s.1);
        let run = json!({
            "baseline_step_ms": ms(0),
            "cold_first_cell_ms": ms(1),
            "warm_cell_ms": ms(2),
            "cpu_ms_per_run": cpu_s * 1000.0,
            "steps": steps,
        });
        eprintln!("rep {rep}: {run}");
        runs.push(run);
    }
    let of = |key: &str| spread(runs.iter().filter_map(|r| r[key].as_f64()));
    let (warm, base) = (of("warm_cell_ms"), of("baseline_step_ms"));
    let ratio = warm["median"].as_f64().zip(base["median"].as_f64()).filter(|(_, b)| *b > 0.0).map(|(a, b)| a / b);
    Ok(json!({
        "suite": "kernel",
        "context": context,
        "repetitions": REPS,
        "cold_first_cell_ms": of("cold_first_cell_ms"),
        "warm_cell_ms": warm,
        "baseline_step_ms": base,
        "warm_cell_to_baseline_ratio": ratio,
        "cpu_ms_per_run": of("cpu_ms_per_run"),
        "runs": runs,
        "notes": "Process sandboxes; between conversations the benchmark waits until no kernel runs. Step times are the log's \
                  millisecond timestamps; CPU is /proc's 10 ms ticks of halyard, nats-server and python3 over the whole run \
                  (a terminal step, two cells, the finish).",
        "reproduce": "cargo run --release -p halyard-load -- --suite kernel (writes load/results/kernel.json)",
    }))
}

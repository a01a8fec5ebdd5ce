//! The agent's Python cells (issue 32): the first `execute_ipython_cell` of a conversation,
//! which starts its IPython kernel, and a warm cell's round trip, against a real `halyard up`
//! with process sandboxes and the scripted LLM. Each repetition is a new conversation (a new
//! sandbox, so the kernel is cold): a `terminal true` step (what any step costs, the baseline
//! from the same run), the first cell, then a second. A step's time is from its action event
//! to its observation event (the log's millisecond timestamps): the agent runner, the executor
//! and the kernel. CPU is that of Halyard's processes, nats-server and the kernel (python3)
//! over the whole run. A benchmark reports; it does not assert.

use anyhow::{Result, ensure};
use halyard_tests::{Halyard, Reply, ScriptedLlm};
use serde_json::{Value, json};

use crate::browser::{any_process, conversation, process_halyard, step_ms};
use crate::record::{Context, spread};
use crate::{cpu_seconds, cpu_seconds_with_children};

fn cell(code: &str) -> Reply {
    Reply::tool("execute_ipython_cell", json!({"code": code, "security_risk": "low"}))
}

fn python_running() -> bool {
    any_process(|_, dir| std::fs::read_to_string(dir.join("cmdline")).is_ok_and(|s| s.contains("ipykernel_launcher")))
}

fn cpu() -> f64 {
    cpu_seconds_with_children("halyard") + cpu_seconds("nats-server") + cpu_seconds_with_children("python3")
}

async fn once(h: &Halyard, llm: &ScriptedLlm) -> Result<(Vec<(String, f64)>, f64)> {
    let steps = vec![
        Reply::tool("terminal", json!({"command": "true", "security_risk": "low"})),
        cell("import math\nx = math.pi"),
        cell("round(x * 2, 3)"),
    ];
    let (events, spent) = conversation(h, llm, steps, cpu, python_running).await?;
    let second = events.iter().rev().find(|e| e["kind"] == "observation" && e["tool"] == "execute_ipython_cell");
    ensure!(second.is_some_and(|e| e["content"] == "6.283"), "the second cell did not see the first's x: {second:?}");
    Ok((step_ms(&events), spent))
}

pub async fn run(reps: usize) -> Result<Value> {
    let context = Context::now();
    let (llm, h) = process_halyard().await;
    let mut runs = Vec::new();
    for rep in 0..reps {
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
        "repetitions": reps,
        "cold_first_cell_ms": of("cold_first_cell_ms"),
        "warm_cell_ms": warm,
        "baseline_step_ms": base,
        "warm_cell_to_baseline_ratio": ratio,
        "cpu_ms_per_run": of("cpu_ms_per_run"),
        "runs": runs,
        "notes": "Process sandboxes; between conversations the benchmark waits until no kernel runs. Step times are the log's \
                  millisecond timestamps; CPU is /proc's 10 ms ticks of halyard, nats-server and python3 over the whole run \
                  (a terminal step, two cells, the finish), with the children they waited for (cutime). That sum is \
                  not trustworthy here: some runs read negative, so a process that held CPU ended inside the reading \
                  without a counted parent waiting for it (not found this session); the step times are the figures.",
        "reproduce": "cargo run --release -p halyard-load -- --suite kernel (writes load/results/kernel.json)",
    }))
}

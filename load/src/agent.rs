//! The agent runner's own time per step (issue 10), excluding the LLM and the tool, measured two
//! ways:
//!
//! - `own`: as the runner measures it (its `agent step` debug record, `own_us`): a step's wall
//!   time less its LLM calls (request built, sent, answered, parsed) and its tools. What is
//!   left is appending the step's events (`llm_call`, `action`, `observation`: three JetStream
//!   round trips with the expected-sequence check), stuck, budget and condensation checks, and
//!   building the next prompt from the history.
//! - `gap`: from the moment the scripted LLM's answer is ready to the moment its next request
//!   reaches the handler; this also holds sending and parsing the prompt on both sides (the
//!   answer is not streamed, so "ready" is when it is sent), so it grows with the prompt.
//!
//! Three cases, in one run:
//! - `events_10`: conversations of about 10 events (steps 1-3 of 40 fresh conversations);
//! - `events_1000`: one conversation past 1,000 events (steps 334-450), with a context window
//!   large enough that it never condenses: the prompt holds the whole history;
//! - `events_1000_condensing`: the same with an 8,000-token window, so the history is condensed
//!   every few dozen steps (the summarizer's calls are LLM time, excluded like any other).
//!
//! p50/p99 in milliseconds, and CPU of halyard, nats-server and this client per step of the long
//! runs (their start included, spread over 450 steps);
//! `load/results/agent.json`. Target: p50 under 2 ms at 1,000 events.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm};
use serde_json::{Value, json};

use crate::{cpu_now, cpu_per_item, percentile};

/// The conversation a request belongs to: its first user message.
fn task_of(body: &Value) -> String {
    body["messages"][1]["content"].as_str().unwrap_or_default().to_owned()
}

fn is_summary(body: &Value) -> bool {
    body["messages"][0]["content"].as_str().unwrap_or_default().starts_with("You condense")
}

/// Gaps (ms) between each answer and the next request of the same conversation, for agent
/// steps `from..to` (counted per conversation, summaries not counted as steps).
fn gaps(llm: &ScriptedLlm, from: usize, to: usize) -> Vec<f64> {
    let requests = llm.requests();
    let timings = llm.timings();
    let mut step_of: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut out = Vec::new();
    for i in 1..requests.len().min(timings.len()) {
        let task = task_of(&requests[i]);
        if task != task_of(&requests[i - 1]) {
            continue;
        }
        let step = step_of.entry(task).or_default();
        if !is_summary(&requests[i]) {
            *step += 1;
        }
        if (from..to).contains(step) {
            out.push(timings[i].0.saturating_duration_since(timings[i - 1].1).as_secs_f64() * 1e3);
        }
    }
    out
}

fn summary(mut ms: Vec<f64>) -> Value {
    ms.sort_by(f64::total_cmp);
    let r = |v: f64| (v * 1000.0).round() / 1000.0;
    json!({"steps": ms.len(), "p50_ms": r(percentile(&ms, 50.0)), "p99_ms": r(percentile(&ms, 99.0))})
}

/// The runner's own time (ms) of the steps it logged with the log's last seq in `seqs`.
fn own(h: &Halyard, seqs: std::ops::Range<u64>) -> Vec<f64> {
    let field = |line: &str, name: &str| -> Option<u64> {
        let at = line.find(&format!(" {name}="))? + name.len() + 2;
        line[at..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
    };
    h.log()
        .lines()
        .filter(|l| l.contains("agent step"))
        .filter_map(|l| Some((field(l, "own_us")?, field(l, "seq")?)))
        .filter(|(_, seq)| seqs.contains(seq))
        .map(|(us, _)| us as f64 / 1e3)
        .collect()
}

fn figures(gap: Vec<f64>, own: Vec<f64>) -> Value {
    json!({"own": summary(own), "gap": summary(gap)})
}

/// Thinks until `steps` steps, then finishes; the condenser gets a short summary.
fn script(llm: &ScriptedLlm, steps: u64) {
    let n = Arc::new(AtomicU64::new(0));
    llm.fallback(move |body| {
        if is_summary(body) {
            return Reply::Text("Summary: the agent thought through numbered steps.".into());
        }
        let i = n.fetch_add(1, Ordering::SeqCst);
        if i < steps {
            Reply::tool("think", json!({"thought": format!("Step {i}: check the next part of the plan.")}))
        } else {
            Reply::finish("done")
        }
    });
}

async fn wait_finished(h: &Halyard, conv: &str) -> Result<()> {
    let api = h.api(crate::KEY);
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    loop {
        let (_, c) = api.get(&format!("/api/v1/conversations/{conv}")).await;
        match c["execution_status"].as_str() {
            Some("finished") => return Ok(()),
            Some("error" | "stuck") => anyhow::bail!("the run failed: {c}"),
            _ if std::time::Instant::now() > deadline => anyhow::bail!("the run did not finish"),
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

fn halyard(llm: &ScriptedLlm, window: Option<u64>) -> Halyard {
    let mut opts = HalyardOptions::new(&llm.base_url)
        .set("HALYARD_LOG", "warn,halyard_agent::run_loop=debug")
        .set("HALYARD_LLM_MODEL", "gpt-4o-mini")
        .set("HALYARD_STUCK_MONOLOGUE", "0")
        .set("HALYARD_MAX_ITERATIONS", "1000")
        .set("HALYARD_RATE_LIMIT_PER_MINUTE", "0");
    if let Some(w) = window {
        opts = opts.set("HALYARD_LLM_CONTEXT_WINDOW", &w.to_string()).set("HALYARD_LLM_CONTEXT_RESERVE", "1000");
    }
    opts.llm_stream = false;
    Halyard::start(opts)
}

/// One long conversation; the gaps of steps 334-450 (past 1,000 events).
async fn long_run(window: Option<u64>) -> Result<Value> {
    let llm = ScriptedLlm::start().await;
    let steps = crate::scaled(450, 20);
    script(&llm, steps);
    let h = halyard(&llm, window);
    let api = h.api(crate::KEY);
    let cpu0 = cpu_now();
    let (conv, _) = api.start_ready(json!({"message": "Think through a long plan.", "title": "long"})).await;
    wait_finished(&h, &conv).await?;
    let cpu = cpu_per_item(cpu0, cpu_now(), steps as usize);
    let events = api.events(&conv).await.len();
    let condensations = api.events(&conv).await.iter().filter(|e| e["kind"] == "condensation").count();
    let mut r = figures(gaps(&llm, crate::scaled(334, 10), steps as usize + 1), own(&h, crate::scaled(1000, 30)..u64::MAX));
    r["events_in_log"] = json!(events);
    r["condensations"] = json!(condensations);
    r["cpu_per_step"] = cpu;
    r["last_prompt_messages"] = json!(llm.requests().last().and_then(|b| b["messages"].as_array().map(Vec::len)).unwrap_or(0));
    Ok(r)
}

pub async fn run() -> Result<Value> {
    // About 10 events: the first steps of fresh conversations.
    let llm = ScriptedLlm::start().await;
    let h = halyard(&llm, None);
    let api = h.api(crate::KEY);
    let cpu0 = cpu_now();
    let short_n = crate::scaled(40, 3);
    for i in 0..short_n {
        script(&llm, 3);
        let (conv, _) = api.start_ready(json!({"message": format!("Short task {i}."), "title": "short"})).await;
        wait_finished(&h, &conv).await.context("short run")?;
    }
    // Each of these conversations is mostly its start (sandbox, start task): CPU per
    // conversation, not per step.
    let short_cpu = cpu_per_item(cpu0, cpu_now(), short_n);
    let mut short = figures(gaps(&llm, 1, 4), own(&h, 0..20));
    short["cpu_per_conversation_of_4_llm_calls"] = short_cpu;
    drop(h);

    let long = long_run(None).await?;
    let condensing = long_run(Some(8_000)).await?;
    Ok(json!({
        "what": "agent runner time per step, from the LLM's answer to the next request, excluding LLM and tool time (think)",
        "events_10": short,
        "events_1000": long,
        "events_1000_condensing": condensing,
        "target": "own p50 < 2 ms at 1,000 events",
    }))
}

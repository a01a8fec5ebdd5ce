//! A new task, the way a client sees it (issue 58): a fresh conversation each time, over HTTP
//! and the WebSocket, against a real `halyard up` (release build) with its defaults (a process
//! sandbox, the warm pool of one) and the scripted LLM answering at once.
//!
//! Figures, each the median of a repetition's samples:
//! - `create_to_ready_ms`: `POST /conversations` with no message until its start task reads
//!   READY (polled every millisecond, as the core suite does);
//! - `first_message_to_finished_ms`: in that fresh conversation, `POST .../messages` until the
//!   WebSocket delivers the run's `finished` (two LLM calls and one command, as the step suite);
//! - `task_to_finished_ms`: a new task as the page sends it, `POST /conversations` with its
//!   `message`, until `finished` arrives on the WebSocket opened at once;
//! - `second_message_to_finished_ms`: the same conversation's next message, warm: the baseline
//!   from the same run that says what being new costs;
//! - `at_once_{10,50}_wall_s`: that many new tasks sent together until the last `finished`.
//!
//! With them: CPU per new task (nats-server, Halyard with its sandboxes, this client) and one
//! fresh conversation's timeline (every event's time after the client's `POST`, from the log's
//! timestamps), which says where a slow figure goes.
//!
//! For looking into one: with `COLD_LOG=FILE` (and `COLD_HALYARD_LOG`, Halyard's log filter),
//! the suite runs three fresh conversations only, writes Halyard's log to FILE and that one run
//! as its result (give `--out` a scratch directory).

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use halyard_tests::{Api, Halyard, HalyardOptions, ScriptedLlm};
use serde_json::{Value, json};

use crate::record::{Context, spread};
use crate::{KEY, cpu_per_item, percentile};

fn cpu_now(h: &Halyard) -> [f64; 3] {
    let [nats, halyard] = crate::cpu_of_tree(h.pid());
    [nats, halyard, crate::cpu_seconds("self")]
}

fn ms_since(t: Instant) -> f64 {
    (t.elapsed().as_secs_f64() * 1000.0 * 100.0).round() / 100.0
}

/// Waits on the WebSocket for the next run's `finished`.
async fn finished(ws: &mut halyard_tests::harness::EventSocket) -> Result<()> {
    loop {
        let ev = ws.next(Duration::from_secs(60)).await.context("no finished status within 60 s")?;
        if ev["kind"] == "execution_status" && ev["status"] == "finished" {
            return Ok(());
        }
    }
}

/// `POST /conversations` with `body`; the task's id and its conversation's.
async fn create(api: &Api, body: Value) -> Result<(String, String)> {
    let (s, task) = api.post("/api/v1/conversations", body).await;
    ensure!(s == 202, "start refused: {task}");
    let id = task["id"].as_str().context("task id")?.to_owned();
    let conv = task["conversation_id"].as_str().context("conversation id")?.to_owned();
    Ok((id, conv))
}

/// Create → READY, then the first and the second message to `finished`.
async fn fresh(api: &Api) -> Result<[f64; 3]> {
    let t = Instant::now();
    let (task, conv) = create(api, json!({})).await?;
    crate::until_ready(api, &task).await?;
    let ready = ms_since(t);
    let mut ws = api.ws(&conv, 0).await;
    let first = message(api, &conv, &mut ws).await?;
    let second = message(api, &conv, &mut ws).await?;
    ws.close().await;
    Ok([ready, first, second])
}

/// One message to `finished`, in ms.
async fn message(api: &Api, conv: &str, ws: &mut halyard_tests::harness::EventSocket) -> Result<f64> {
    let t = Instant::now();
    let (s, v) = api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "make x.txt"})).await;
    ensure!(s == 202, "message refused: {v}");
    finished(ws).await.map(|_| ms_since(t))
}

/// A new task as the page sends it: the start with its message, the WebSocket opened at once.
/// The time to `finished`, and the conversation.
async fn task(api: &Api) -> Result<(f64, String, i64)> {
    let t = Instant::now();
    let sent = halyard_platform::now_ms();
    let (_, conv) = create(api, json!({"message": "make x.txt"})).await?;
    let mut ws = api.ws(&conv, 0).await;
    finished(&mut ws).await?;
    let ms = ms_since(t);
    ws.close().await;
    Ok((ms, conv, sent))
}

/// Every event of a fresh conversation after the client's `POST` at `sent` (ms since the
/// epoch), in order, labelled by kind (and status or tool), numbered so that they sort.
async fn timeline(api: &Api, conv: &str, sent: i64) -> Value {
    let events = api.events(conv).await;
    let mut out = serde_json::Map::new();
    for (i, e) in events.iter().enumerate() {
        let label = match e["kind"].as_str().unwrap_or("") {
            "execution_status" => format!("status {}", e["status"].as_str().unwrap_or("")),
            k @ ("action" | "observation") => format!("{k} {}", e["tool"].as_str().unwrap_or("")),
            k => k.to_owned(),
        };
        if let Some(at) = e["timestamp"].as_str().and_then(crate::step::epoch_ms) {
            out.insert(format!("{i:02} {label}"), json!(at - sent));
        }
    }
    Value::Object(out)
}

/// `n` new tasks sent together: the wall time until the last `finished`.
async fn at_once(h: &Halyard, n: usize) -> Result<f64> {
    let t = Instant::now();
    let mut all = Vec::new();
    for _ in 0..n {
        let api = h.api(KEY);
        all.push(tokio::spawn(async move { task(&api).await.map(drop) }));
    }
    for one in all {
        one.await??;
    }
    Ok(t.elapsed().as_secs_f64())
}

async fn once(h: &Halyard, samples: usize) -> Result<Value> {
    let api = h.api(KEY);
    let (mut ready, mut first, mut second, mut whole) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let cpu0 = cpu_now(h);
    for _ in 0..samples {
        let [r, f, s] = fresh(&api).await?;
        ready.push(r);
        first.push(f);
        second.push(s);
        // A pause, so that the warm pool refills as it would between two users' tasks.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cpu = cpu_per_item(cpu0, cpu_now(h), samples);
    let mut last = None;
    for _ in 0..samples {
        let (ms, conv, sent) = task(&api).await?;
        whole.push(ms);
        last = Some((conv, sent));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (conv, sent) = last.context("no task ran")?;
    let events = api.events(&conv).await;
    ensure!(events.iter().any(|e| e["kind"] == "observation" && e["tool"] == "terminal"), "the task ran no command: {events:?}");
    let p50 = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        percentile(v, 50.0)
    };
    let wall_10 = at_once(h, crate::scaled(10, 2)).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let wall_50 = at_once(h, crate::scaled(50, 3)).await?;
    Ok(json!({
        "create_to_ready_ms": p50(&mut ready),
        "first_message_to_finished_ms": p50(&mut first),
        "second_message_to_finished_ms": p50(&mut second),
        "task_to_finished_ms": p50(&mut whole),
        "at_once_10_wall_s": wall_10,
        "at_once_50_wall_s": wall_50,
        "cpu_us_per_fresh_conversation": cpu,
        "timeline_ms_after_post": timeline(&api, &conv, sent).await,
        "samples": {"create_to_ready_ms": ready, "first_message_to_finished_ms": first,
            "second_message_to_finished_ms": second, "task_to_finished_ms": whole},
    }))
}

/// A `halyard up` of `bin` (this build if none) with the suite's settings.
fn halyard(llm: &ScriptedLlm, bin: Option<&std::path::Path>) -> Halyard {
    let mut opts = HalyardOptions::new(&llm.base_url)
        .set("HALYARD_LOG", std::env::var("COLD_HALYARD_LOG").as_deref().unwrap_or("warn"))
        .set("HALYARD_RATE_LIMIT_PER_MINUTE", "0")
        // Fifty new tasks of one user at once: the limit on starts in flight would refuse some.
        .set("HALYARD_MAX_STARTING_PER_USER", "0");
    opts.bin = bin.map(std::path::Path::to_path_buf);
    Halyard::start(opts)
}

/// The figures of each repetition's runs, as spreads.
fn summary(runs: &[Value]) -> Value {
    let of = |key: &str| spread(runs.iter().filter_map(|r| r[key].as_f64()));
    let cpu = spread(runs.iter().filter_map(|r| r["cpu_us_per_fresh_conversation"]["total_us"].as_f64()));
    json!({
        "create_to_ready_ms": of("create_to_ready_ms"),
        "first_message_to_finished_ms": of("first_message_to_finished_ms"),
        "second_message_to_finished_ms": of("second_message_to_finished_ms"),
        "task_to_finished_ms": of("task_to_finished_ms"),
        "at_once_10_wall_s": of("at_once_10_wall_s"),
        "at_once_50_wall_s": of("at_once_50_wall_s"),
        "cpu_us_per_fresh_conversation": cpu,
    })
}

/// Each figure of `now` over the same of `base` (medians).
fn ratios(now: &Value, base: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for (key, v) in now.as_object().into_iter().flatten() {
        if let Some(r) = ratio(v, &base[key]) {
            out.insert(key.clone(), json!(r));
        }
    }
    Value::Object(out)
}

/// The median of spread `a` over that of `b`, to two places.
fn ratio(a: &Value, b: &Value) -> Option<f64> {
    let (a, b) = (a["median"].as_f64()?, b["median"].as_f64()?);
    (b > 0.0).then(|| (a / b * 100.0).round() / 100.0)
}

/// Every repetition measures this build and, given `baseline` (another build's binary, say the
/// commit before a change), that one too, in turns, each with a `halyard up` of its own.
pub async fn run(reps: usize, baseline: Option<&std::path::Path>) -> Result<Value> {
    let context = Context::now();
    let samples = crate::scaled(20, 2);
    let llm = ScriptedLlm::start().await;
    crate::step::script(&llm);
    if let Ok(path) = std::env::var("COLD_LOG") {
        let h = halyard(&llm, None);
        let run = once(&h, 3).await?;
        std::fs::write(path, h.log())?;
        return Ok(run);
    }
    // A repetition leaves a hundred sandboxes to tear down (network namespaces are slow to go).
    let (runs, base_runs) = crate::record::in_turns("cold", reps, baseline, Duration::from_secs(30), |bin| {
        let h = halyard(&llm, bin);
        async move { once(&h, samples).await }
    })
    .await?;
    let now = summary(&runs);
    let ready = now["create_to_ready_ms"].clone();
    let first = now["first_message_to_finished_ms"].clone();
    let base = baseline.map(|_| summary(&base_runs));
    Ok(json!({
        "suite": "cold",
        "context": context,
        "repetitions": reps,
        "fresh_conversations_per_repetition": samples,
        "figures": now,
        "first_over_second_message": ratio(&first, &now["second_message_to_finished_ms"]),
        "baseline": base.as_ref().map(|b| json!({"binary": baseline.map(|p| p.display().to_string()), "figures": b, "runs": base_runs})),
        "this_build_over_baseline": base.as_ref().map(|b| ratios(&now, b)),
        "targets": {"create_to_ready_ms": 15.0, "first_message_to_finished_ms": 10.0},
        "meets_targets": {
            "create_to_ready_ms": ready["median"].as_f64().map(|m| m <= 15.0),
            "first_message_to_finished_ms": first["median"].as_f64().map(|m| m <= 10.0),
        },
        "runs": runs,
        "reproduce": "cargo run --release -p halyard-load -- --suite cold [--baseline-bin PATH] (writes load/results/cold.json)",
    }))
}

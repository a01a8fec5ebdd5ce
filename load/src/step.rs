//! The speed of a step (issue 27): from a user's message to the run's `finished`, with the
//! scripted LLM answering at once, for a run of two LLM steps and one command (`echo`) in a
//! process sandbox, against a real `halyard up` (release build). The time is the client's: the
//! `POST .../messages` until the WebSocket delivers the run's `finished` status, so it holds
//! the gateway, the bus, the agent runner, both LLM calls, the executor and the projection.
//!
//! Each repetition is a fresh conversation that takes `MESSAGES` messages one after the other;
//! its figure is their median. The baseline, from the same run: a bare JetStream publish with
//! its acknowledgement on the same nats-server, one at a time, so the step reads as a number of
//! bus round trips. CPU per message is halyard's, nats-server's and this client's.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm};
use serde_json::{Value, json};

use crate::record::{Context, spread};
use crate::{KEY, cpu_now, cpu_per_item, percentile};

/// Two LLM steps and a command per message: a command first, then finish once it answered.
fn script(llm: &ScriptedLlm) {
    llm.fallback(|req| {
        let messages = req["messages"].as_array().cloned().unwrap_or_default();
        let last_user = messages.iter().rposition(|m| m["role"] == "user").unwrap_or(0);
        if messages[last_user..].iter().any(|m| m["role"] == "tool") {
            Reply::finish("done")
        } else {
            Reply::tool("terminal", json!({"command": "echo hi", "security_risk": "low"}))
        }
    });
}

/// One bare publish with its acknowledgement, `n` times in a row; the median in ms.
async fn bus_round_trip(js: &async_nats::jetstream::Context, n: usize) -> Result<f64> {
    let _ = js.delete_stream("BENCH_STEP").await;
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "BENCH_STEP".into(),
        subjects: vec!["bench.step".into()],
        storage: async_nats::jetstream::stream::StorageType::File,
        ..Default::default()
    })
    .await?;
    let mut ms = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        js.publish("bench.step", vec![0u8; 300].into()).await?.await?;
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    js.delete_stream("BENCH_STEP").await?;
    ms.sort_by(f64::total_cmp);
    Ok(percentile(&ms, 50.0))
}

async fn once(h: &Halyard, messages: usize) -> Result<Value> {
    let api = h.api(KEY);
    let (conv, _) = api.start_ready(json!({})).await;
    let have = api.get(&format!("/api/v1/conversations/{conv}")).await.1["last_event_seq"].as_u64().unwrap_or(0);
    let mut ws = api.ws(&conv, have).await;
    let cpu0 = cpu_now();
    let mut ms = Vec::new();
    for i in 0..messages {
        let t = Instant::now();
        let (s, v) = api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": format!("message {i}")})).await;
        ensure!(s == 202, "message refused: {v}");
        loop {
            let ev = ws.next(Duration::from_secs(30)).await.context("no finished status within 30 s")?;
            if ev["kind"] == "execution_status" && ev["status"] == "finished" {
                break;
            }
        }
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let cpu = cpu_per_item(cpu0, cpu_now(), messages);
    ws.close().await;
    let events = api.events(&conv).await;
    ensure!(
        events.iter().filter(|e| e["kind"] == "observation" && e["tool"] == "terminal").count() == messages,
        "a run did not run its command"
    );
    let mut sorted = ms.clone();
    sorted.sort_by(f64::total_cmp);
    Ok(json!({
        "message_to_finished_ms_p50": percentile(&sorted, 50.0),
        "message_to_finished_ms_p99": percentile(&sorted, 99.0),
        "cpu_us_per_message": cpu,
        "samples_ms": ms.iter().map(|x| (x * 100.0).round() / 100.0).collect::<Vec<_>>(),
    }))
}

pub async fn run(reps: usize) -> Result<Value> {
    let context = Context::now();
    let messages = crate::scaled(40, 3);
    let llm = ScriptedLlm::start().await;
    script(&llm);
    let h = Halyard::start(
        HalyardOptions::new(&llm.base_url)
            .set("HALYARD_LOG", "warn")
            .set("HALYARD_RATE_LIMIT_PER_MINUTE", "0")
            .set("HALYARD_SANDBOX_POOL_SIZE", "0")
            .set("HALYARD_LLM_STREAM", "false"),
    );
    let js = async_nats::jetstream::new(h.nats_client("admin").await);
    let mut runs = Vec::new();
    for rep in 0..reps {
        let mut run = once(&h, messages).await?;
        run["bus_round_trip_ms_p50"] = json!(bus_round_trip(&js, crate::scaled(200, 20)).await?);
        eprintln!("step rep {rep}: p50 {} ms, bus {} ms", run["message_to_finished_ms_p50"], run["bus_round_trip_ms_p50"]);
        runs.push(run);
    }
    let of = |key: &str| spread(runs.iter().filter_map(|r| r[key].as_f64()));
    let total = |r: &Value| r["cpu_us_per_message"]["total_us"].as_f64();
    let step = of("message_to_finished_ms_p50");
    let bus = of("bus_round_trip_ms_p50");
    let ratio = step["median"].as_f64().zip(bus["median"].as_f64()).filter(|(_, b)| *b > 0.0).map(|(a, b)| (a / b * 10.0).round() / 10.0);
    Ok(json!({
        "suite": "step",
        "context": context,
        "repetitions": reps,
        "messages_per_repetition": messages,
        "message_to_finished_ms": step,
        "message_to_finished_ms_p99": of("message_to_finished_ms_p99"),
        "bus_round_trip_ms": bus,
        "step_in_bus_round_trips": ratio,
        "cpu_us_per_message": spread(runs.iter().filter_map(total)),
        "target_ms": 8.0,
        "meets_target": step["median"].as_f64().map(|m| m <= 8.0),
        "runs": runs,
        "reproduce": "cargo run --release -p halyard-load -- --suite step (writes load/results/step.json)",
    }))
}

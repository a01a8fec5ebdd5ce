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
use crate::{KEY, cpu_per_item, percentile};

/// CPU seconds of this Halyard's nats-server, the rest of this Halyard (its sandboxes too), and
/// this process.
fn cpu_now(h: &Halyard) -> [f64; 3] {
    let [nats, halyard] = crate::cpu_of_tree(h.pid());
    [nats, halyard, crate::cpu_seconds("self")]
}

/// Two LLM steps and a command per message: a command first, then finish once it answered.
pub(crate) fn script(llm: &ScriptedLlm) {
    llm.fallback(|req| {
        if halyard_tests::llm::latest_turn(req).iter().any(|m| m["role"] == "tool") {
            Reply::finish("done")
        } else {
            Reply::tool("terminal", json!({"command": "echo hi", "security_risk": "low"}))
        }
    });
}

/// One bare publish with its acknowledgement, `n` times in a row; the median in ms.
async fn bus_round_trip(js: &async_nats::jetstream::Context, n: usize) -> Result<f64> {
    crate::bench_stream(js, "BENCH_STEP", "bench.step").await?;
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

async fn once(h: &Halyard, llm: &ScriptedLlm, messages: usize) -> Result<Value> {
    let api = h.api(KEY);
    let (conv, _) = api.start_ready(json!({})).await;
    let have = api.get(&format!("/api/v1/conversations/{conv}")).await.1["last_event_seq"].as_u64().unwrap_or(0);
    let mut ws = api.ws(&conv, have).await;
    let cpu0 = cpu_now(h);
    let calls_before = llm.timings().len();
    let mut ms = Vec::new();
    // Wall-clock instants (ms since the epoch) each message was sent and its end seen, to place
    // the log's own timestamps between them.
    let mut sent_at = Vec::new();
    let mut seen_at = Vec::new();
    for i in 0..messages {
        let t = Instant::now();
        sent_at.push(halyard_platform::now_ms());
        let (s, v) = api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": format!("message {i}")})).await;
        ensure!(s == 202, "message refused: {v}");
        loop {
            let ev = ws.next(Duration::from_secs(30)).await.context("no finished status within 30 s")?;
            if ev["kind"] == "execution_status" && ev["status"] == "finished" {
                break;
            }
        }
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
        seen_at.push(halyard_platform::now_ms());
    }
    let cpu = cpu_per_item(cpu0, cpu_now(h), messages);
    // The stand-in's own share of each LLM call: from the request's arrival to its answer.
    let mut llm_ms: Vec<f64> =
        llm.timings()[calls_before..].iter().map(|(arrived, ready)| (*ready - *arrived).as_secs_f64() * 1000.0).collect();
    llm_ms.sort_by(f64::total_cmp);
    ws.close().await;
    let events = api.events(&conv).await;
    ensure!(
        events.iter().filter(|e| e["kind"] == "observation" && e["tool"] == "terminal").count() == messages,
        "a run did not run its command"
    );
    let gaps = timeline(&events, have, &sent_at, &seen_at);
    let mut sorted = ms.clone();
    sorted.sort_by(f64::total_cmp);
    Ok(json!({
        "message_to_finished_ms_p50": percentile(&sorted, 50.0),
        "message_to_finished_ms_p99": percentile(&sorted, 99.0),
        "cpu_us_per_message": cpu,
        "scripted_llm_ms_per_call_p50": percentile(&llm_ms, 50.0),
        "mean_ms_before_each_event": gaps,
        "samples_ms": ms.iter().map(|x| (x * 100.0).round() / 100.0).collect::<Vec<_>>(),
    }))
}

fn halyard(llm: &ScriptedLlm, bin: Option<&std::path::Path>) -> Halyard {
    let mut opts = HalyardOptions::new(&llm.base_url)
        .set("HALYARD_LOG", "warn")
        .set("HALYARD_RATE_LIMIT_PER_MINUTE", "0")
        .set("HALYARD_SANDBOX_POOL_SIZE", "0")
        .set("HALYARD_LLM_STREAM", "false");
    opts.bin = bin.map(std::path::Path::to_path_buf);
    Halyard::start(opts)
}

/// The figures of `runs`, as spreads.
fn summary(runs: &[Value]) -> Value {
    let of = |key: &str| spread(runs.iter().filter_map(|r| r[key].as_f64()));
    let total = |r: &Value| r["cpu_us_per_message"]["total_us"].as_f64();
    let part = |key: &'static str| move |r: &Value| r["cpu_us_per_message"][key].as_f64();
    let step = of("message_to_finished_ms_p50");
    let bus = of("bus_round_trip_ms_p50");
    let ratio = step["median"].as_f64().zip(bus["median"].as_f64()).filter(|(_, b)| *b > 0.0).map(|(a, b)| (a / b * 10.0).round() / 10.0);
    json!({
        "message_to_finished_ms": step,
        "message_to_finished_ms_p99": of("message_to_finished_ms_p99"),
        "bus_round_trip_ms": bus,
        "step_in_bus_round_trips": ratio,
        "cpu_us_per_message": spread(runs.iter().filter_map(total)),
        "cpu_us_per_message_halyard": spread(runs.iter().filter_map(part("halyard_us"))),
        "cpu_us_per_message_nats_server": spread(runs.iter().filter_map(part("nats_server_us"))),
        "scripted_llm_ms_per_call": of("scripted_llm_ms_per_call_p50"),
    })
}

/// Every repetition measures this build and, given `baseline` (another build's binary), that
/// one too, in turns, each with a `halyard up` of its own.
pub async fn run(reps: usize, baseline: Option<&std::path::Path>) -> Result<Value> {
    let context = Context::now();
    let messages = crate::scaled(40, 3);
    let llm = ScriptedLlm::start().await;
    script(&llm);
    let (runs, base_runs) = crate::record::in_turns("step", reps, baseline, Duration::ZERO, |bin| {
        let h = halyard(&llm, bin);
        let llm = &llm;
        async move {
            let js = async_nats::jetstream::new(h.nats_client("admin").await);
            let mut run = once(&h, llm, messages).await?;
            run["bus_round_trip_ms_p50"] = json!(bus_round_trip(&js, crate::scaled(200, 20)).await?);
            Ok(run)
        }
    })
    .await?;
    let now = summary(&runs);
    let step = now["message_to_finished_ms"].clone();
    let cpu = now["cpu_us_per_message"].clone();
    let mut out = json!({
        "suite": "step",
        "context": context,
        "repetitions": reps,
        "messages_per_repetition": messages,
        "baseline": baseline.map(|b| json!({"binary": b.display().to_string(), "figures": summary(&base_runs), "runs": base_runs})),
        "targets": {"message_to_finished_ms": 4.0, "cpu_us_per_message": 6000.0},
        "meets_targets": {
            "message_to_finished_ms": step["median"].as_f64().map(|m| m <= 4.0),
            "cpu_us_per_message": cpu["median"].as_f64().map(|m| m <= 6000.0),
        },
        "runs": runs,
        "reproduce": "cargo run --release -p halyard-load -- --suite step [--baseline-bin PATH] (writes load/results/step.json)",
    });
    if let (Some(o), Some(f)) = (out.as_object_mut(), now.as_object()) {
        o.extend(f.clone());
    }
    Ok(out)
}

/// Where the time goes: the mean gap before each event of a run, by the event (and status)
/// before it, from the log's millisecond timestamps of the events after `have`; the first from
/// the client's send (`sent_at`, one per run, ms since the epoch), the last to the client's
/// receipt of `finished` (`seen_at`).
pub(crate) fn timeline(events: &[Value], have: u64, sent_at: &[i64], seen_at: &[i64]) -> serde_json::Map<String, Value> {
    let mut gaps: std::collections::BTreeMap<String, (f64, usize)> = std::collections::BTreeMap::new();
    let label = |e: &Value| match e["kind"].as_str() {
        Some("execution_status") => format!("status {}", e["status"].as_str().unwrap_or("")),
        Some("action") | Some("observation") => format!("{} {}", e["kind"].as_str().unwrap_or(""), e["tool"].as_str().unwrap_or("")),
        other => other.unwrap_or("").to_owned(),
    };
    let stamp = |e: &Value| e["timestamp"].as_str().and_then(epoch_ms);
    let mut run = 0usize;
    let mut before: Option<(String, i64)> = None;
    for e in events.iter().filter(|e| e["seq"].as_u64().unwrap_or(0) > have) {
        let Some(at) = stamp(e) else { continue };
        if e["kind"] == "user_message" {
            before = Some(("sent".into(), sent_at.get(run).copied().unwrap_or(at)));
        }
        if let Some((prev, prev_at)) = &before {
            let slot = gaps.entry(format!("{prev} -> {}", label(e))).or_insert((0.0, 0));
            slot.0 += (at - prev_at) as f64;
            slot.1 += 1;
        }
        before = Some((label(e), at));
        if e["kind"] == "execution_status" && e["status"] == "finished" {
            if let Some(seen) = seen_at.get(run) {
                let slot = gaps.entry("status finished -> seen by the client".into()).or_insert((0.0, 0));
                slot.0 += (seen - at) as f64;
                slot.1 += 1;
            }
            run += 1;
            before = None;
        }
    }
    gaps.into_iter().map(|(k, (sum, n))| (k, json!((sum / n.max(1) as f64 * 100.0).round() / 100.0))).collect()
}

/// Milliseconds since the epoch of an RFC 3339 timestamp as the API writes them
/// (`2026-11-26T06:35:28.970Z`).
pub(crate) fn epoch_ms(t: &str) -> Option<i64> {
    let (date, time) = t.trim_end_matches('Z').split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut h = hms.split(':').map(|x| x.parse::<i64>());
    let (hh, mm, ss) = (h.next()?.ok()?, h.next()?.ok()?, h.next()?.ok()?);
    let ms: i64 = format!("{frac:0<3}")[..3].parse().ok()?;
    // Days since the epoch (civil calendar, Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + hh) * 60 + mm) * 60_000 + ss * 1000 + ms)
}

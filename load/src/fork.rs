//! A fork as its source grows (issue 58: "a fork at event 10,000 ready within 1 s"). Against a
//! real `halyard up` (release build, process sandboxes), one source conversation runs a short
//! task, and its log is then grown to each size (100, 1,000, 10,000 events) by commands and
//! their outputs appended as its runner appends them (an action and a 1 KiB observation each).
//! At each size, every repetition forks it at its last event and measures, as a client sees it:
//! - `ready_ms`: `POST .../fork` until the fork's view holds the whole copy (its
//!   `last_event_seq` past the fork's event: the status that ends the copy), polled every 2 ms:
//!   from then on the fork takes messages;
//! - `task_ready_ms`: until its start task reads READY (its sandbox and workspace);
//! - `log_copied_ms`: until the fork's log itself (read from the bus) holds the whole copy: the
//!   rest of `ready_ms` is the gateway's projection catching up;
//! - CPU per fork (nats-server; Halyard with its sandboxes).
//!
//! The baseline, in the same run and the same build: the events stream with atomic batches
//! turned off, so that the runner copies the log one event at a time, as it did before
//! (every append waits for its acknowledgement). The two alternate within each repetition.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use async_nats::jetstream;
use halyard_platform::bus::{self, EventAppender, NewEvent};
use halyard_protocol::event::{EventBody, EventSource, SecurityRisk};
use halyard_protocol::{ConversationId, EventId, subjects};
use halyard_tests::{Api, Halyard, HalyardOptions, ScriptedLlm};
use serde_json::{Value, json};

use crate::KEY;
use crate::record::{Context, spread};

/// Appends commands and their outputs to `log` until it holds `size` events.
async fn grow(log: &mut EventAppender, size: u64) -> Result<()> {
    let output = format!("{}\n", "build output line ".repeat(56));
    let mut events = Vec::new();
    let mut seq = log.last_seq();
    while seq < size {
        let call = format!("call_{seq}");
        let body = if seq % 2 == 0 {
            let arguments = json!({"command": format!("cargo test -p pkg{seq}"), "security_risk": "low"});
            EventBody::Action {
                tool_call_id: call,
                tool: "terminal".into(),
                arguments,
                thought: None,
                security_risk: Some(SecurityRisk::Low),
            }
        } else {
            EventBody::observation(format!("call_{}", seq - 1), "terminal".into(), output.clone(), Some(0), false)
        };
        events.push(NewEvent { id: EventId::new(), source: EventSource::Agent, body, trace: None });
        seq += 1;
    }
    while !events.is_empty() {
        let stored = log.append_batch(&events).await?;
        events.drain(..stored.len());
    }
    Ok(())
}

/// Polls the conversation's view until `pred` holds on it.
async fn until_view(api: &Api, conv: &str, pred: impl Fn(&Value) -> bool) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let (s, view) = api.get(&format!("/api/v1/conversations/{conv}")).await;
        if s == 200 && pred(&view) {
            return Ok(());
        }
        ensure!(Instant::now() < deadline, "the conversation's view never got there: {view}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Turns the events stream's atomic batches on or off.
async fn atomic(js: &jetstream::Context, on: bool) -> Result<()> {
    let mut config = js.get_stream(subjects::EVENTS_STREAM).await?.cached_info().config.clone();
    config.allow_atomic_publish = on;
    js.update_stream(config).await?;
    Ok(())
}

/// One fork of `source` at `at_seq`: its figures.
async fn fork(h: &Halyard, api: &Api, js: &jetstream::Context, source: &str, at_seq: u64) -> Result<Value> {
    let [nats0, halyard0] = crate::cpu_of_tree(h.pid());
    let t = Instant::now();
    let (s, task) = api.post(&format!("/api/v1/conversations/{source}/fork"), json!({"at_seq": at_seq})).await;
    ensure!(s == 202, "fork refused: {task}");
    let conv = task["conversation_id"].as_str().context("the fork's conversation")?.to_owned();
    let task = task["id"].as_str().context("the fork's task")?.to_owned();
    let id = conv.parse::<ConversationId>()?;
    let (ready, task_ready, copied) = tokio::join!(
        async {
            until_view(api, &conv, |v| v["last_event_seq"].as_u64().is_some_and(|n| n > at_seq)).await?;
            anyhow::Ok(t.elapsed().as_secs_f64() * 1000.0)
        },
        async {
            crate::until_ready(api, &task).await?;
            anyhow::Ok(t.elapsed().as_secs_f64() * 1000.0)
        },
        async {
            // The log itself, read from the bus: the copy's own time, without the projection's.
            loop {
                if bus::last_event(js, id).await?.is_some_and(|(_, e)| e.payload.seq > at_seq) {
                    return anyhow::Ok(t.elapsed().as_secs_f64() * 1000.0);
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    );
    let (ready, task_ready, copied) = (ready?, task_ready?, copied?);
    let [nats1, halyard1] = crate::cpu_of_tree(h.pid());
    // Every event copied, once: the fork's log ends with the status that closes the copy.
    let events = api.events(&conv).await;
    ensure!(events.len() as u64 == at_seq + 1, "the fork holds {} events, not {}", events.len(), at_seq + 1);
    let last = events.last().context("no events")?;
    ensure!(last["reason"].as_str().unwrap_or_default().contains("forked from"), "the copy did not end as it should: {last}");
    let (s, _) = api.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{conv}"), None).await;
    ensure!(s == 204 || s == 200 || s == 202, "the fork was not deleted: {s}");
    Ok(json!({
        "ready_ms": (ready * 100.0).round() / 100.0,
        "task_ready_ms": (task_ready * 100.0).round() / 100.0,
        "log_copied_ms": (copied * 100.0).round() / 100.0,
        "cpu_ms": {"nats_server": ((nats1 - nats0) * 1000.0).round(), "halyard": ((halyard1 - halyard0) * 1000.0).round()},
    }))
}

/// A size's figures: this build's and the baseline's spreads, and their ratio.
fn summary(size: u64, runs: &[Value]) -> Value {
    let of = |way: &str, key: &str| spread(runs.iter().filter_map(|r| r[way][key].as_f64()));
    let cpu = |way: &str| {
        spread(runs.iter().filter_map(|r| Some(r[way]["cpu_ms"]["nats_server"].as_f64()? + r[way]["cpu_ms"]["halyard"].as_f64()?)))
    };
    let (batched, one_by_one) = (of("batched", "ready_ms"), of("one_by_one", "ready_ms"));
    let ratio = batched["median"].as_f64().zip(one_by_one["median"].as_f64()).map(|(a, b)| (a / b * 1000.0).round() / 1000.0);
    json!({
        "events": size,
        "ready_ms": batched,
        "task_ready_ms": of("batched", "task_ready_ms"),
        "log_copied_ms": of("batched", "log_copied_ms"),
        "cpu_ms": cpu("batched"),
        "baseline_one_by_one": {"ready_ms": one_by_one, "task_ready_ms": of("one_by_one", "task_ready_ms"),
            "log_copied_ms": of("one_by_one", "log_copied_ms"), "cpu_ms": cpu("one_by_one")},
        "ready_over_baseline": ratio,
    })
}

pub async fn run(reps: usize) -> Result<Value> {
    let context = Context::now();
    let sizes: Vec<u64> = crate::scaled(vec![100, 1_000, 10_000], vec![30, 300]);
    let llm = ScriptedLlm::start().await;
    crate::step::script(&llm);
    let opts = HalyardOptions::new(&llm.base_url).set("HALYARD_LOG", "warn").set("HALYARD_RATE_LIMIT_PER_MINUTE", "0");
    let h = Halyard::start(opts);
    let api = h.api(KEY);
    let js = jetstream::new(h.nats_client("admin").await);

    let (source, _) = api.start_ready(json!({"message": "make x.txt"})).await;
    api.wait_finished(&source, 1).await;
    let mut log = EventAppender::open(js.clone(), source.parse::<ConversationId>()?).await?;
    let (mut sizes_out, mut runs_out) = (Vec::new(), Vec::new());
    for &size in &sizes {
        grow(&mut log, size).await?;
        until_view(&api, &source, |v| v["last_event_seq"].as_u64() == Some(size)).await?;
        let mut runs = Vec::new();
        for rep in 0..reps {
            let mut run = serde_json::Map::new();
            // Which goes first alternates, so that neither always meets the machine as the
            // other left it.
            let order = if rep % 2 == 0 { [true, false] } else { [false, true] };
            for batched in order {
                // The last fork's deletion (its sandbox, its events purged) is not measured.
                crate::record::settle(Duration::from_secs(20));
                atomic(&js, batched).await?;
                let r = fork(&h, &api, &js, &source, size).await?;
                eprintln!("fork at {size} ({}): {r}", if batched { "batched" } else { "one by one" });
                run.insert(if batched { "batched" } else { "one_by_one" }.into(), r);
            }
            runs.push(Value::Object(run));
        }
        atomic(&js, true).await?;
        sizes_out.push(summary(size, &runs));
        runs_out.push(json!({"events": size, "runs": runs}));
    }
    let at_largest = sizes_out.last().and_then(|s| s["ready_ms"]["median"].as_f64());
    Ok(json!({
        "suite": "fork",
        "context": context,
        "repetitions": reps,
        "sizes": sizes_out,
        "target": {"events": 10_000, "ready_ms": 1000.0},
        "meets_target": (sizes.last() == Some(&10_000)).then(|| at_largest.map(|m| m <= 1000.0)),
        "runs": runs_out,
        "reproduce": "cargo run --release -p halyard-load -- --suite fork (writes load/results/fork.json)",
    }))
}

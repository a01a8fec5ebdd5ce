//! The webhook benchmark (issue 4): events delivered per second to a local receiver that answers
//! 200 at once, with 1 and with 100 subscriptions, against the append rate of 50 concurrent
//! agent conversations measured in the same run; and latency from append to receipt.
//!
//! The conversations are real agent runs (scripted LLM answering each step after a think time),
//! so the events go through the agent runner, JetStream, the fan-out and the workers.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use halyard_tests::{Api, Halyard, HalyardOptions, Reply, ScriptedLlm, events};
use serde_json::{Value, json};

const KEY: &str = "alice-secret-key";

#[derive(Default)]
struct Got {
    /// (webhook-id, receipt ms, latency ms)
    items: Vec<(String, i64, f64)>,
}

fn now_ms_f() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64() * 1000.0).unwrap_or(0.0)
}

async fn receive(State(got): State<Arc<Mutex<Got>>>, headers: HeaderMap, body: Bytes) -> &'static str {
    let now = now_ms_f();
    let id = headers.get("webhook-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    // The event id is a v7 UUID minted when the event was appended: its timestamp is the
    // append time.
    let appended = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["id"].as_str().and_then(|s| uuid::Uuid::parse_str(s).ok()))
        .and_then(|u| u.get_timestamp())
        .map(|t| {
            let (s, n) = t.to_unix();
            s as f64 * 1000.0 + f64::from(n) / 1e6
        })
        .unwrap_or(now);
    if let Ok(mut g) = got.lock() {
        g.items.push((id, now as i64, now - appended));
    }
    "ok"
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[(((p / 100.0) * (sorted.len() - 1) as f64).round() as usize).min(sorted.len() - 1)]
}

/// Starts `n` conversations (READY, no message yet).
async fn conversations(api: &Api, n: usize) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for _ in 0..n {
        let (c, _) = api.start_ready(json!({})).await;
        out.push(c);
    }
    Ok(out)
}

/// Sends each conversation a message and waits until every run has ended; returns (events
/// appended by the runs, seconds from first message to last event).
async fn drive(api: &Api, convs: &[String]) -> Result<(usize, f64)> {
    let mut before = Vec::new();
    for c in convs {
        before.push(api.events(c).await.len());
    }
    let t0 = Instant::now();
    for c in convs {
        let (s, b) = api.post(&format!("/api/v1/conversations/{c}/messages"), json!({"text": "think hard"})).await;
        anyhow::ensure!(s == 202, "message: {b}");
    }
    let mut total = 0;
    for (c, b) in convs.iter().zip(before) {
        let events = api
            // Ended among the run's own events, wherever: the title is generated beside the run
            // and can land after its last status (CI saw it, stop 76).
            .wait_events(c, "the run to end", |ev| ev.get(b..).is_some_and(events::ended))
            .await;
        total += events.len() - b;
    }
    Ok((total, t0.elapsed().as_secs_f64()))
}

async fn wait_deliveries(got: &Arc<Mutex<Got>>, want: usize, start: usize) -> Result<Vec<(String, i64, f64)>> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let items: Vec<_> = got.lock().map_err(|_| anyhow::anyhow!("lock"))?.items[start..].to_vec();
        let mut ids: Vec<&String> = items.iter().map(|(id, _, _)| id).collect();
        ids.sort();
        ids.dedup();
        if ids.len() >= want {
            return Ok(items);
        }
        anyhow::ensure!(Instant::now() < deadline, "only {} of {want} deliveries arrived", ids.len());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn summary(items: &[(String, i64, f64)], events: usize, append_secs: f64, t0_ms: f64) -> Value {
    let mut lat: Vec<f64> = items.iter().map(|(_, _, l)| *l).collect();
    lat.sort_by(f64::total_cmp);
    let last = items.iter().map(|(_, at, _)| *at as f64).fold(t0_ms, f64::max);
    let secs = ((last - t0_ms) / 1000.0).max(1e-3);
    json!({
        "events": events,
        "deliveries": items.len(),
        "delivered_per_sec": (items.len() as f64 / secs).round(),
        "appended_per_sec_during_run": (events as f64 / append_secs).round(),
        "latency_ms": {"p50": (pct(&lat, 50.0) * 10.0).round() / 10.0, "p99": (pct(&lat, 99.0) * 10.0).round() / 10.0, "max": (pct(&lat, 100.0) * 10.0).round() / 10.0},
    })
}

/// Runs the suite; returns its figures.
pub async fn run(conversations_n: usize, steps: u32, think_ms: u64) -> Result<Value> {
    let llm = ScriptedLlm::start().await;
    llm.fallback(move |_| Reply::Delay(Duration::from_millis(think_ms), Box::new(Reply::tool("think", json!({"thought": "step"})))));
    let opts = HalyardOptions::new(&llm.base_url)
        .set("HALYARD_LOG", "warn")
        .set("HALYARD_RATE_LIMIT_PER_MINUTE", "0")
        .set("HALYARD_WEBHOOK_ALLOW", "loopback")
        .set("HALYARD_MAX_ITERATIONS", &steps.to_string());
    let mut opts = opts;
    opts.env.insert("HALYARD_LLM_STREAM".into(), "false".into());
    opts.env.insert("HALYARD_MAX_STARTING_PER_USER".into(), "1000".into());
    let h = Halyard::start(opts);
    let api = h.api(KEY);

    let got = Arc::new(Mutex::new(Got::default()));
    let app = axum::Router::new().route("/hook", post(receive)).with_state(got.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });

    // Baseline: the append rate of the conversations, nobody subscribed.
    let convs = conversations(&api, conversations_n).await?;
    let (base_events, base_secs) = drive(&api, &convs).await?;
    let base_rate = base_events as f64 / base_secs;
    eprintln!("append rate of {conversations_n} agent conversations: {base_rate:.0} ev/s ({base_events} events)");

    // One subscription to everything.
    let (s, w) = api.post("/api/v1/webhooks", json!({"url": url})).await;
    anyhow::ensure!(s == 201, "subscribe: {w}");
    let convs = conversations(&api, conversations_n).await?;
    // Conversation start events are delivered too; count from here.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let start = got.lock().map_err(|_| anyhow::anyhow!("lock"))?.items.len();
    let t0 = now_ms_f();
    let (events, secs) = drive(&api, &convs).await?;
    let items = wait_deliveries(&got, events, start).await?;
    let one = summary(&items, events, secs, t0);
    eprintln!("1 subscription: {one}");
    let (s, _) = api.call(reqwest::Method::DELETE, &format!("/api/v1/webhooks/{}", w["id"].as_str().context("id")?), None).await;
    anyhow::ensure!(s == 204);

    // 100 subscriptions: two per conversation (as a CI bot and a chat bot would).
    let convs = conversations(&api, conversations_n).await?;
    let per = (100 / conversations_n.max(1)).max(1);
    for c in &convs {
        for _ in 0..per {
            let (s, w) = api.post("/api/v1/webhooks", json!({"url": url, "conversation_id": c})).await;
            anyhow::ensure!(s == 201, "subscribe: {w}");
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let start = got.lock().map_err(|_| anyhow::anyhow!("lock"))?.items.len();
    let t0 = now_ms_f();
    let (events, secs) = drive(&api, &convs).await?;
    let items = wait_deliveries(&got, events * per, start).await?;
    let hundred = summary(&items, events, secs, t0);
    eprintln!("{} subscriptions: {hundred}", per * conversations_n);

    Ok(json!({
        "benchmark": "webhooks (issue 4)",
        "conversations": conversations_n,
        "steps_per_run": steps,
        "llm_think_ms": think_ms,
        "baseline_append_per_sec": base_rate.round(),
        "one_subscription": one,
        "hundred_subscriptions": hundred,
        "subscriptions": per * conversations_n,
        "target": "with 100 subscriptions, delivery keeps up with the append rate; p99 < 250 ms",
    }))
}

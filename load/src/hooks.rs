//! How fast an automation's hook answers (issue 30: "the hook answers within 100 ms and does the
//! work as a command on the bus"), against a real `halyard up` (the automations service with it).
//!
//! One Halyard for the suite; one `webhook` automation whose hook takes requests signed as
//! Standard Webhooks. It is disabled, so the automations service consumes each command, reads
//! the definition and records an `ignored` run, but starts no conversation: what is measured is
//! the hook's own path (the signature checked on the raw body, the delivery id claimed in
//! `halyard_hook_deliveries`, the command published with its acknowledgement) with the service
//! working beside it, not hundreds of agent runs. Each repetition sends [`SEQUENTIAL`] requests
//! one after another (a 2 KB body, a new delivery id each), then [`CONCURRENT`] from
//! [`SENDERS`] senders at once, then the first [`REPLAYS`] again (each answered `duplicate`).
//! The baseline, from the same run and server, is an authenticated read of the automation
//! (`GET /api/v1/automations/{id}`, answered from memory): what any request costs here.
//! Target: the sequential hook's p99 under 100 ms. A benchmark reports; it does not assert.

use std::time::Instant;

use anyhow::{Result, ensure};
use base64::Engine;
use halyard_tests::{Halyard, HalyardOptions, ScriptedLlm};
use hmac::{KeyInit, Mac};
use serde_json::{Value, json};

use crate::record::{Context, figures};
use crate::{KEY, cpu_now, cpu_per_item, percentile, scaled};

const SEQUENTIAL: usize = 300;
const CONCURRENT: usize = 600;
const SENDERS: usize = 16;
const REPLAYS: usize = 100;

/// The Standard Webhooks headers for `body` under `secret` (`whsec_` and base64).
fn signed(secret: &str, id: &str, body: &str) -> Result<Vec<(&'static str, String)>> {
    let key = base64::engine::general_purpose::STANDARD.decode(secret.trim_start_matches("whsec_")).unwrap_or_default();
    let ts = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key)?;
    mac.update(format!("{id}.{ts}.{body}").as_bytes());
    let sig = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    Ok(vec![("webhook-id", id.to_owned()), ("webhook-timestamp", ts.to_string()), ("webhook-signature", format!("v1,{sig}"))])
}

/// A body of about 2 KB, as a CI system's notification is.
fn body(i: usize) -> String {
    let commits: Vec<Value> =
        (0..12).map(|c| json!({"id": format!("{:040x}", i * 100 + c), "message": "Fix the flaky test in the parser"})).collect();
    json!({"event": "build.finished", "build": i, "status": "failed", "branch": "main", "commits": commits}).to_string()
}

/// Posts one signed request; its status and how long the answer took, in ms.
async fn send(http: &reqwest::Client, url: &str, secret: &str, id: &str, body: &str) -> Result<(u16, f64)> {
    let mut req = http.post(url).header("content-type", "application/json").body(body.to_owned());
    for (k, v) in signed(secret, id, body)? {
        req = req.header(k, v);
    }
    let t0 = Instant::now();
    let resp = req.send().await?;
    let status = resp.status().as_u16();
    resp.bytes().await?;
    Ok((status, t0.elapsed().as_secs_f64() * 1000.0))
}

fn latencies(mut ms: Vec<f64>) -> Value {
    ms.sort_by(f64::total_cmp);
    let r = |x: f64| (x * 100.0).round() / 100.0;
    json!({"p50_ms": r(percentile(&ms, 50.0)), "p99_ms": r(percentile(&ms, 99.0)), "max_ms": r(ms.last().copied().unwrap_or(0.0))})
}

/// One repetition against `h`'s hook: every figure of it.
async fn once(rep: usize, url: &str, read_url: &str, secret: &str) -> Result<Value> {
    let http = reqwest::Client::new();
    let (sequential, concurrent, replays) = (scaled(SEQUENTIAL, 20), scaled(CONCURRENT, 40), scaled(REPLAYS, 5));

    // The baseline: an authenticated read, the same number of times.
    let mut base = Vec::new();
    for _ in 0..sequential {
        let t0 = Instant::now();
        let resp = http.get(read_url).bearer_auth(KEY).send().await?;
        ensure!(resp.status() == 200, "the automation read answered {}", resp.status());
        resp.bytes().await?;
        base.push(t0.elapsed().as_secs_f64() * 1000.0);
    }

    let cpu0 = cpu_now();
    let mut seq = Vec::new();
    for i in 0..sequential {
        let (status, ms) = send(&http, url, secret, &format!("r{rep}-s{i}"), &body(i)).await?;
        ensure!(status == 202, "hook answered {status} to a new delivery");
        seq.push(ms);
    }
    let cpu_seq = cpu_per_item(cpu0, cpu_now(), sequential);

    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for s in 0..SENDERS {
        let (http, url, secret) = (http.clone(), url.to_owned(), secret.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut ms = Vec::new();
            for i in (s..concurrent).step_by(SENDERS) {
                let (status, t) = send(&http, &url, &secret, &format!("r{rep}-c{i}"), &body(i)).await?;
                ensure!(status == 202, "hook answered {status} to a new delivery");
                ms.push(t);
            }
            Ok::<_, anyhow::Error>(ms)
        }));
    }
    let mut conc = Vec::new();
    for t in tasks {
        conc.extend(t.await??);
    }
    let rate = concurrent as f64 / t0.elapsed().as_secs_f64();

    let mut dup = Vec::new();
    for i in 0..replays {
        let (status, ms) = send(&http, url, secret, &format!("r{rep}-s{i}"), &body(i)).await?;
        ensure!(status == 200, "hook answered {status} to a delivery taken before");
        dup.push(ms);
    }
    let (seq, base) = (latencies(seq), latencies(base));
    let ratio = seq["p50_ms"].as_f64().unwrap_or(0.0) / base["p50_ms"].as_f64().unwrap_or(1.0).max(0.01);
    Ok(json!({
        "sequential_hook": seq,
        "baseline_read": base,
        "hook_vs_read_p50_ratio": (ratio * 100.0).round() / 100.0,
        "cpu_per_hook": cpu_seq,
        "concurrent_hook": latencies(conc),
        "concurrent_hooks_per_sec": rate.round(),
        "replayed_hook": latencies(dup),
    }))
}

pub async fn run(reps: usize) -> Result<Value> {
    let context = Context::now();
    let llm = ScriptedLlm::start().await;
    let opts = HalyardOptions::new(&llm.base_url).set("HALYARD_LOG", "warn").set("HALYARD_RATE_LIMIT_PER_MINUTE", "0");
    let h = Halyard::start(opts);
    let api = h.api(KEY);
    let (s, a) = api.post("/api/v1/automations", json!({"name": "CI failures", "trigger": {"kind": "webhook"}, "enabled": false})).await;
    ensure!(s == 201, "the automation was not created: {a}");
    let (id, secret) = (a["id"].as_str().unwrap_or_default().to_owned(), a["secret"].as_str().unwrap_or_default().to_owned());
    let url = a["hook_url"].as_str().unwrap_or_default().to_owned();
    let read_url = format!("{}/api/v1/automations/{id}", h.http);
    // A warm-up the figures leave out (connections, the first delivery store writes).
    let http = reqwest::Client::new();
    for i in 0..20 {
        send(&http, &url, &secret, &format!("warm-{i}"), &body(i)).await?;
    }
    let mut runs = Vec::new();
    for rep in 0..reps {
        let r = once(rep, &url, &read_url, &secret).await?;
        eprintln!("hooks rep {rep}: {r}");
        runs.push(r);
    }
    // The service heard them: the newest run is an ignored one, and says why.
    let (s, listed) = api.get(&format!("/api/v1/automations/{id}/runs")).await;
    ensure!(s == 200 && listed["items"][0]["reason"] == "the automation is disabled", "runs: {listed}");
    Ok(json!({
        "suite": "hooks",
        "benchmark": "an automation's hook: verified, deduplicated and handed to the bus (issue 30)",
        "target": "sequential_hook.p99_ms < 100",
        "context": context,
        "repetitions": reps,
        "requests_per_repetition": {"sequential": scaled(SEQUENTIAL, 20), "concurrent": scaled(CONCURRENT, 40), "senders": SENDERS, "replayed": scaled(REPLAYS, 5)},
        "figures": figures(&runs),
        "runs": runs,
    }))
}

//! Memory per idle conversation (issue 27): what the server (the `halyard up` process with every
//! service, plus its nats-server) holds for conversations nobody uses, above what it holds
//! without them. Sandboxes are processes of their own and hibernate when idle; they are not
//! counted here (a hibernated one holds nothing).
//!
//! Each repetition starts a fresh `halyard up` (process sandboxes, no warm pool, sandboxes
//! hibernating after 1 s, runs evicted from the agent runner after 2 s, one webhook subscription
//! so the dispatcher's lanes are in play), runs `WARM` conversations to completion so that
//! lazily made things exist (thread pools, connections, caches), lets everything settle and
//! reads the resident memory of both processes: the baseline. Then `N` more conversations each
//! run a message, two LLM steps and a tool to completion (at most eight at once), everything
//! settles again (idle: eviction, hibernation, the allocator's trim), and the resident memory
//! is read again. The figure is the growth divided by `N`. After that, one of the idle
//! conversations gets a message and must answer (its state comes back from the log).

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use futures::StreamExt;
use halyard_tests::{Halyard, HalyardOptions, Receiver, Reply, ScriptedLlm};
use serde_json::{Value, json};

use crate::KEY;
use crate::record::{Context, spread};

const WARM: usize = 10;

/// Resident memory of `pid` in KiB (VmRSS).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()).unwrap_or(0)
}

/// The nats-server `halyard up` started (its child).
fn nats_pid(parent: u32) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok()).find(|pid| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let after = stat.rsplit(')').next().unwrap_or("");
        stat.contains("(nats-server)") && after.split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok()) == Some(parent)
    })
}

fn script(llm: &ScriptedLlm, i: usize) {
    llm.push([
        Reply::tool("terminal", json!({"command": format!("echo conversation {i} > note.txt"), "security_risk": "low"})),
        Reply::finish("noted"),
    ]);
}

/// Runs `n` conversations to their end, at most eight at once.
async fn converse(h: &Halyard, llm: &ScriptedLlm, first: usize, n: usize) -> Result<Vec<String>> {
    let api = h.api(KEY);
    let mut convs = Vec::new();
    let mut running = futures::stream::FuturesUnordered::new();
    for i in first..first + n {
        script(llm, i);
        let api = api.clone();
        running.push(async move {
            let (conv, _) = api.start_ready(json!({"message": format!("note {i}"), "title": format!("memory {i}")})).await;
            api.wait_events(&conv, "the run to finish", |ev| ev.iter().any(|e| e["status"] == "finished")).await;
            conv
        });
        if running.len() >= 8 {
            convs.push(running.next().await.context("a run")?);
        }
    }
    while let Some(conv) = running.next().await {
        convs.push(conv);
    }
    Ok(convs)
}

/// Waits until nothing is left to settle: every sandbox hibernated, the runs evicted, then a
/// few seconds more for the services' own idle sweeps.
async fn settle(h: &Halyard, convs: &[String]) -> Result<()> {
    let api = h.api(KEY);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let mut busy = 0;
        let mut cursor = String::new();
        loop {
            let (_, page) = api.get(&format!("/api/v1/sandboxes?limit=100{cursor}")).await;
            busy += page["items"].as_array().map_or(0, |s| s.iter().filter(|s| s["status"] != "HIBERNATED").count());
            match page["next_cursor"].as_str() {
                Some(next) => cursor = format!("&cursor={next}"),
                None => break,
            }
        }
        if busy == 0 {
            break;
        }
        ensure!(Instant::now() < deadline, "{busy} sandboxes still not hibernated ({} conversations)", convs.len());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    tokio::time::sleep(Duration::from_secs(8)).await;
    Ok(())
}

async fn once(n: usize) -> Result<Value> {
    let llm = ScriptedLlm::start().await;
    let receiver = Receiver::start().await;
    let h = Halyard::start(
        HalyardOptions::new(&llm.base_url)
            .set("HALYARD_LOG", "warn")
            .set("HALYARD_RATE_LIMIT_PER_MINUTE", "0")
            .set("HALYARD_SANDBOX_POOL_SIZE", "0")
            .set("HALYARD_SANDBOX_IDLE_STOP_SECS", "1")
            .set("HALYARD_IDLE_EVICT_SECS", "2")
            .set("HALYARD_WEBHOOK_ALLOW", "loopback")
            .set("HALYARD_LLM_STREAM", "false"),
    );
    let api = h.api(KEY);
    let (s, w) = api.post("/api/v1/webhooks", json!({"url": receiver.url})).await;
    ensure!(s == 201, "subscribe: {w}");
    let main = h.pid();
    let nats = nats_pid(main).context("no nats-server under halyard up")?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let empty = (rss_kib(main), rss_kib(nats));

    let warm = converse(&h, &llm, 0, WARM).await?;
    settle(&h, &warm).await?;
    let before = (rss_kib(main), rss_kib(nats));
    let t = Instant::now();
    let convs = converse(&h, &llm, WARM, n).await?;
    let run_s = t.elapsed().as_secs_f64();
    settle(&h, &convs).await?;
    let after = (rss_kib(main), rss_kib(nats));

    // An idle conversation comes back from the log when asked.
    llm.push([Reply::tool("terminal", json!({"command": "cat note.txt", "security_risk": "low"})), Reply::finish("read")]);
    let back = &convs[0];
    let (s, v) = api.post(&format!("/api/v1/conversations/{back}/messages"), json!({"text": "read your note"})).await;
    ensure!(s == 202, "message to an idle conversation: {v}");
    let events =
        api.wait_events(back, "the idle conversation's answer", |ev| ev.iter().filter(|e| e["status"] == "finished").count() == 2).await;
    let read = events.iter().rev().find(|e| e["kind"] == "observation").and_then(|e| e["content"].as_str()).unwrap_or_default();
    ensure!(read.contains(&format!("conversation {WARM}")), "the woken conversation read the wrong note: {read}");

    let per = |a: u64, b: u64| (a as f64 - b as f64) / n as f64;
    Ok(json!({
        "conversations": n,
        "empty_kib": {"halyard": empty.0, "nats_server": empty.1},
        "baseline_kib": {"halyard": before.0, "nats_server": before.1},
        "after_kib": {"halyard": after.0, "nats_server": after.1},
        "kib_per_idle_conversation": {
            "halyard": per(after.0, before.0),
            "nats_server": per(after.1, before.1),
            "total": per(after.0 + after.1, before.0 + before.1),
            "total_over_empty": per(after.0 + after.1, empty.0 + empty.1),
        },
        "run_s": run_s,
    }))
}

pub async fn run(reps: usize) -> Result<Value> {
    let context = Context::now();
    let n = crate::scaled(200, 10);
    let mut runs = Vec::new();
    for rep in 0..reps {
        let run = once(n).await?;
        eprintln!("memory rep {rep}: {run}");
        runs.push(run);
    }
    let of = |key: &str| spread(runs.iter().filter_map(|r| r["kib_per_idle_conversation"][key].as_f64()));
    let total = of("total");
    Ok(json!({
        "suite": "memory",
        "context": context,
        "repetitions": reps,
        "kib_per_idle_conversation": {"total": total.clone(), "halyard": of("halyard"), "nats_server": of("nats_server"), "total_over_empty": of("total_over_empty")},
        "target_kib": 100,
        "aim_kib": 50,
        "meets_target": total["median"].as_f64().map(|m| m <= 100.0),
        "runs": runs,
        "notes": "Resident memory (VmRSS) of the halyard up process (every service) and its nats-server, after the \
                  conversations went idle: sandboxes hibernated, runs evicted from the agent runner (2 s here, \
                  HALYARD_IDLE_EVICT_SECS), plus 8 s. Baseline: after 10 conversations warmed the server up. Each \
                  conversation: a message, two scripted LLM steps, one command, one webhook subscription's deliveries.",
        "reproduce": "cargo run --release -p halyard-load -- --suite memory (writes load/results/memory.json)",
    }))
}

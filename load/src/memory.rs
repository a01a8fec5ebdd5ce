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
//! is read again; then `N` more, read the same way. The figure is what the second round added
//! divided by `N`: the first also fills what is bounded (write buffers, caches), which one more
//! conversation does not grow. After that, one of the idle conversations gets a message and
//! must answer (its state comes back from the log).

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use futures::StreamExt;
use halyard_tests::{Halyard, HalyardOptions, Receiver, Reply, ScriptedLlm};
use serde_json::{Value, json};

use crate::KEY;
use crate::browser::descends_from;
use crate::record::{Context, spread};

const WARM: usize = 10;

/// Resident memory of `pid` in KiB: (all of it, VmRSS; its anonymous part, RssAnon: what the
/// process allocated, not the pages of its program file, which the kernel can drop and share).
fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()).unwrap_or(0)
    };
    (field("VmRSS:"), field("RssAnon:"))
}

/// The process named `comm` below `ancestor` (the nats-server `halyard up` started).
fn descendant(ancestor: u32, comm: &str) -> Option<u32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm) && descends_from(*pid, ancestor))
}

/// The scripted LLM for every conversation at once (they run side by side, so answers are
/// chosen by what each request holds): a note written, then done; asked to read it, it reads.
fn script(llm: &ScriptedLlm) {
    llm.fallback(|req| {
        let turn = halyard_tests::llm::latest_turn(req);
        let answered = turn.iter().any(|m| m["role"] == "tool");
        let asked_to_read = turn.first().is_some_and(|m| m["content"].to_string().contains("read your note"));
        let command = if asked_to_read { "cat note.txt" } else { "echo noted > note.txt" };
        if answered { Reply::finish("done") } else { Reply::tool("terminal", json!({"command": command, "security_risk": "low"})) }
    });
}

/// Runs `n` conversations to their end, at most eight at once.
async fn converse(h: &Halyard, first: usize, n: usize) -> Result<Vec<String>> {
    let api = h.api(KEY);
    let mut convs = Vec::new();
    let mut running = futures::stream::FuturesUnordered::new();
    for i in first..first + n {
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

async fn in_memory(h: &Halyard) -> Value {
    let m = h.scrape().await;
    Value::Object(halyard_tests::IN_MEMORY_GAUGES.iter().map(|g| ((*g).to_owned(), json!(m.sum(g, &[])))).collect())
}

/// Waits until nothing is left to settle: every sandbox hibernated and every service's gauge of
/// what it holds for conversations at zero (runs evicted, views and webhook lanes forgotten),
/// then a few seconds more for the allocator's trim. How long that took, in seconds.
async fn settle(h: &Halyard, convs: &[String]) -> Result<f64> {
    let api = h.api(KEY);
    let t = Instant::now();
    let deadline = t + Duration::from_secs(300);
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
        let held = in_memory(h).await;
        let holding = held.as_object().is_some_and(|m| m.values().any(|v| v.as_f64().unwrap_or(0.0) > 0.0));
        if busy == 0 && !holding {
            break;
        }
        ensure!(Instant::now() < deadline, "not settled after 5 minutes ({} conversations): {busy} sandboxes running, {held}", convs.len());
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let took = t.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(12)).await;
    Ok(took)
}

async fn once(n: usize, bin: Option<&std::path::Path>) -> Result<Value> {
    let llm = ScriptedLlm::start().await;
    let receiver = Receiver::start().await;
    let mut opts = HalyardOptions::new(&llm.base_url)
        .set("HALYARD_LOG", "warn")
        .set("HALYARD_RATE_LIMIT_PER_MINUTE", "0")
        .set("HALYARD_SANDBOX_POOL_SIZE", "0")
        .set("HALYARD_SANDBOX_IDLE_STOP_SECS", "1")
        .set("HALYARD_IDLE_EVICT_SECS", "2")
        .set("HALYARD_WEBHOOK_ALLOW", "loopback")
        .set("HALYARD_LLM_STREAM", "false");
    opts.bin = bin.map(std::path::Path::to_path_buf);
    let h = Halyard::start(opts);
    script(&llm);
    let api = h.api(KEY);
    let (s, w) = api.post("/api/v1/webhooks", json!({"url": receiver.url})).await;
    ensure!(s == 201, "subscribe: {w}");
    let main = h.pid();
    let nats = descendant(main, "nats-server").context("no nats-server under halyard up")?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let empty = (rss_kib(main), rss_kib(nats));
    let js = async_nats::jetstream::new(h.nats_client("admin").await);

    let warm = converse(&h, 0, WARM).await?;
    settle(&h, &warm).await?;
    let before = (rss_kib(main), rss_kib(nats));
    // Two rounds of `n`: what the first adds holds what fills once (JetStream's write buffers
    // grow to a block's size, caches to their bounds); the second adds what each conversation
    // costs, the figure for thousands of idle ones.
    let t = Instant::now();
    let first = converse(&h, WARM, n).await?;
    let run_s = t.elapsed().as_secs_f64();
    settle(&h, &first).await?;
    let mid = (rss_kib(main), rss_kib(nats));
    let convs = converse(&h, WARM + n, n).await?;
    let settled_s = settle(&h, &convs).await?;
    let after = (rss_kib(main), rss_kib(nats));
    let account = js.query_account().await?;
    let mut streams = serde_json::Map::new();
    let mut names = js.stream_names();
    while let Some(name) = names.next().await {
        let name = name?;
        let info = js.get_stream(&name).await?.info().await?.clone();
        streams.insert(name, json!({"messages": info.state.messages, "subjects": info.state.subjects_count, "consumers": info.state.consumer_count, "bytes": info.state.bytes}));
    }

    // An idle conversation comes back from the log when asked.
    let back = &convs[0];
    let (s, v) = api.post(&format!("/api/v1/conversations/{back}/messages"), json!({"text": "read your note"})).await;
    ensure!(s == 202, "message to an idle conversation: {v}");
    let events =
        api.wait_events(back, "the idle conversation's answer", |ev| ev.iter().filter(|e| e["status"] == "finished").count() == 2).await;
    let read = events.iter().rev().find(|e| e["kind"] == "observation" && e["tool"] == "terminal");
    let read = read.and_then(|e| e["content"].as_str()).unwrap_or_default();
    ensure!(read.contains("\nnoted\n"), "the woken conversation did not read its note: {read}");

    let per = |a: u64, b: u64| (a as f64 - b as f64) / n as f64;
    let kib = |m: (u64, u64)| json!({"rss": m.0, "anon": m.1});
    Ok(json!({
        "conversations": n,
        "empty_kib": {"halyard": kib(empty.0), "nats_server": kib(empty.1)},
        "baseline_kib": {"halyard": kib(before.0), "nats_server": kib(before.1)},
        "mid_kib": {"halyard": kib(mid.0), "nats_server": kib(mid.1)},
        "after_kib": {"halyard": kib(after.0), "nats_server": kib(after.1)},
        "kib_per_idle_conversation": {
            "halyard": per(after.0.0, mid.0.0),
            "halyard_anon": per(after.0.1, mid.0.1),
            "nats_server": per(after.1.0, mid.1.0),
            "total": per(after.0.0 + after.1.0, mid.0.0 + mid.1.0),
        },
        "kib_per_conversation_of_the_first_round": {
            "halyard": per(mid.0.0, before.0.0),
            "nats_server": per(mid.1.0, before.1.0),
            "total": per(mid.0.0 + mid.1.0, before.0.0 + before.1.0),
        },
        "kib_per_conversation_over_empty": per(after.0.0 + after.1.0, empty.0.0 + empty.1.0) / 2.0,
        "run_s": run_s,
        "settled_after_s": settled_s,
        "jetstream_after": {"memory_bytes": account.memory, "storage_bytes": account.storage, "streams": streams, "consumers": account.consumers},
    }))
}

/// The figures of `runs`, as spreads.
fn summary(runs: &[Value]) -> Value {
    let of = |key: &str| spread(runs.iter().filter_map(|r| r["kib_per_idle_conversation"][key].as_f64()));
    let first = |key: &str| spread(runs.iter().filter_map(|r| r["kib_per_conversation_of_the_first_round"][key].as_f64()));
    json!({
        "kib_per_idle_conversation": {"total": of("total"), "halyard": of("halyard"), "nats_server": of("nats_server")},
        "kib_per_conversation_of_the_first_round": {"total": first("total"), "halyard": first("halyard"), "nats_server": first("nats_server")},
        "kib_per_conversation_over_empty": spread(runs.iter().filter_map(|r| r["kib_per_conversation_over_empty"].as_f64())),
    })
}

/// Every repetition measures this build and, given `baseline` (another build's binary), that
/// one too, in turns, each with a `halyard up` of its own.
pub async fn run(reps: usize, n: usize, baseline: Option<&std::path::Path>) -> Result<Value> {
    let context = Context::now();
    let (runs, base_runs) = crate::record::in_turns("memory", reps, baseline, Duration::from_secs(30), |bin| once(n, bin)).await?;
    let now = summary(&runs);
    let total = now["kib_per_idle_conversation"]["total"].clone();
    Ok(json!({
        "suite": "memory",
        "context": context,
        "repetitions": reps,
        "kib_per_idle_conversation": now["kib_per_idle_conversation"],
        "kib_per_conversation_of_the_first_round": now["kib_per_conversation_of_the_first_round"],
        "kib_per_conversation_over_empty": now["kib_per_conversation_over_empty"],
        "baseline": baseline.map(|b| json!({"binary": b.display().to_string(), "figures": summary(&base_runs), "runs": base_runs})),
        "target_kib": 32,
        "meets_target": total["median"].as_f64().map(|m| m <= 32.0),
        "runs": runs,
        "notes": "Resident memory (VmRSS) of the halyard up process (every service) and its nats-server once the \
                  conversations are idle and settled: sandboxes hibernated, every in-memory gauge at zero (eviction \
                  after 2 s here, HALYARD_IDLE_EVICT_SECS), plus 12 s. A baseline after 10 conversations warmed the \
                  server up, then two rounds of N conversations, each measured settled. kib_per_idle_conversation \
                  (the target's figure) is what the second round added, per conversation: the cost of one more \
                  idle conversation. The first round also fills what is bounded (the write buffer of each \
                  stream's last message block in nats-server, from pools of 256 KiB to 8 MiB as the block \
                  fills, kept while the server is idle: by its heap profile), so its figure, kept beside, is \
                  higher; with 200 a round the second round still held some of it (65 KiB, against 27 with \
                  1,000); kib_per_conversation_over_empty divides all the growth from the \
                  empty server by the 2N conversations. Each conversation: a message, two scripted LLM steps, one \
                  command, one webhook subscription's deliveries.",
        "reproduce": "cargo run --release -p halyard-load -- --suite memory [--idle-conversations N] [--baseline-bin PATH] (writes load/results/memory.json)",
    }))
}

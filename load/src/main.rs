//! Halyard's core benchmark (issue 2), all in one run on one machine, against a real
//! `halyard up` (release build) and its embedded nats-server:
//!
//! (a) raw JetStream: async publish with acknowledgements (256 in flight) to a file stream of
//!     the same nats-server: the baseline;
//! (b) Halyard's event path: events appended through the agent runner's appender (with its
//!     expected-last-sequence check), projected by the gateway and delivered to one WebSocket
//!     client per conversation, for many concurrent conversations;
//! (c) start latency: `POST /conversations` (no repository) to start task READY with the
//!     process sandbox, isolated under a uid of its own (the benchmark runs as root), p50 and
//!     p99.
//!
//! Figures go to `load/results/core.json`, every repetition kept. Targets: (b) >= 0.5 x (a); (c) p50 <
//! 50 ms. A benchmark reports; it does not assert.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Parser;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use halyard_platform::bus::EventAppender;
use halyard_protocol::event::{EventBody, EventSource};
use halyard_protocol::{ConversationId, EventId};
use halyard_tests::{Halyard, HalyardOptions, ScriptedLlm};
use serde_json::json;

mod acp;
mod agent;
mod auth;
mod batches;
mod browser;
mod chaos;
mod checkpoint;
mod cluster;
mod cold;
mod docker;
mod egress;
mod environments;
mod fork;
mod gvisor;
mod hibernation;
mod hooks;
mod kernel;
mod memory;
mod queue;
mod reads;
mod record;
mod runtime_api;
mod step;
mod stream;
mod ui;
mod vscode;
mod webhooks;

#[derive(Parser, Debug)]
struct Args {
    /// Which suite: `core` (issue 2), `webhooks` (issue 4), `docker` (issue 3), `auth` (issue 9),
    /// `agent` (issue 10), `ui` (issue 11), `cluster` and `chaos` (issue 13), `checkpoint` (issue
    /// 24), `stream` (issue 31), `acp` (issue 49), `browser` (issue 25), `kernel` and `vscode` (issue 32), `hooks` (issue 30), `cold`, `fork` and `reads` (issue 58), `queue` (issue 52), `environments` (issue 51), `batches` (issue 54), `gvisor` and `egress` (issue 53), `runtime_api` (issue 56), or `all`.
    #[arg(long, default_value = "all")]
    suite: String,
    /// Webhook suite: agent steps per run, and the scripted LLM's think time per step.
    #[arg(long, default_value_t = 10)]
    steps: u32,
    #[arg(long, default_value_t = 100)]
    think_ms: u64,
    /// Messages for the raw JetStream baseline.
    #[arg(long, default_value_t = 100_000)]
    raw_messages: usize,
    /// Concurrent conversations for the event path.
    #[arg(long, default_value_t = 50)]
    conversations: usize,
    /// Events appended per conversation.
    #[arg(long, default_value_t = 1_000)]
    events_per_conversation: usize,
    /// Conversations started for the start-latency figure.
    #[arg(long, default_value_t = 60)]
    starts: usize,
    /// Skip the WebSocket readers (to see the append path alone).
    #[arg(long)]
    no_ws: bool,
    /// Starts of each kind in the Docker benchmark.
    #[arg(long, default_value_t = 30)]
    docker_starts: usize,
    /// Checkpoint suite: repetitions (one file changed, nothing changed, the copy baseline).
    #[arg(long, default_value_t = 9)]
    checkpoint_reps: usize,
    /// Kills of each signal in the cluster suite.
    #[arg(long, default_value_t = 10)]
    takeovers: usize,
    /// Chaos suite: how many times each kind of process is killed.
    #[arg(long, default_value_t = 3)]
    chaos_rounds: usize,
    /// Chaos suite: consecutive seeds to run, from `CHAOS_SEED` (else the clock).
    #[arg(long, default_value_t = 1)]
    chaos_seeds: usize,
    /// Chaos suite: runs of each seed.
    #[arg(long, default_value_t = 1)]
    chaos_repeat: usize,
    /// Chaos suite: repetitions of the throughput runs (one and two replicas, no kills); 0 skips
    /// them.
    #[arg(long, default_value_t = 5)]
    chaos_throughput_reps: usize,
    /// Repetitions of each suite (or of each figure within one), all kept in its file with the
    /// median, min and max of every figure.
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// A short run of every suite chosen (one repetition, small sizes), so that CI sees the
    /// suites still work; its figures mean nothing. Needs `--out` elsewhere than load/results.
    #[arg(long)]
    smoke: bool,
    /// Memory suite: conversations in each of its two rounds (enough that nats-server's
    /// message blocks fill in the first, so the second shows what one more conversation costs).
    #[arg(long, default_value_t = 1_000)]
    idle_conversations: usize,
    /// Cold, reads, memory and step suites: another build's `halyard` binary, measured in the same run as this one's
    /// (the commit before a change, built elsewhere).
    #[arg(long)]
    baseline_bin: Option<std::path::PathBuf>,
    /// Where the results go.
    #[arg(long, default_value = "load/results")]
    out: std::path::PathBuf,
}

static SMOKE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `full` in a measured run, `small` in a smoke run.
pub(crate) fn scaled<T>(full: T, small: T) -> T {
    if SMOKE.load(std::sync::atomic::Ordering::Relaxed) { small } else { full }
}

const KEY: &str = "alice-secret-key";

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::main]
async fn main() -> Result<()> {
    let mut args = Args::parse();
    halyard_tests::init();
    if args.smoke {
        anyhow::ensure!(!args.out.ends_with("load/results"), "a smoke run's figures mean nothing: give --out a scratch directory");
        SMOKE.store(true, std::sync::atomic::Ordering::Relaxed);
        args.reps = 1;
        args.steps = 2;
        args.think_ms = 10;
        args.raw_messages = 2_000;
        args.conversations = 4;
        args.events_per_conversation = 50;
        args.starts = 3;
        args.docker_starts = 2;
        args.checkpoint_reps = 1;
        args.takeovers = 1;
        args.chaos_rounds = 1;
        args.chaos_throughput_reps = 0;
    }
    std::fs::create_dir_all(&args.out)?;
    // Each suite chosen starts on a machine the previous one has left quiet.
    let wants = |suite: &str| {
        let chosen = args.suite == suite || args.suite == "all";
        if chosen {
            record::settle(std::time::Duration::from_secs(30));
        }
        chosen
    };
    let reps = args.reps;
    if wants("webhooks") {
        let r = record::repeated("webhooks", reps, |_| webhooks::run(args.conversations, args.steps, args.think_ms)).await?;
        record(&args.out, "webhooks", &r)?;
    }
    if wants("core") {
        let r = record::repeated("core", reps, |_| core(&args)).await?;
        record(&args.out, "core", &r)?;
    }
    if wants("auth") {
        let r = record::repeated("auth", reps, |_| auth::run(args.conversations, scaled(2_000, 50))).await?;
        record(&args.out, "auth", &r)?;
    }
    if wants("agent") {
        let r = record::repeated("agent", reps, |_| agent::run()).await?;
        record(&args.out, "agent", &r)?;
    }
    if wants("ui") {
        let r = record::repeated("ui", reps, |_| ui::run()).await?;
        record(&args.out, "ui", &r)?;
    }
    if wants("cluster") {
        let r = record::repeated("cluster", reps, |_| cluster::run(args.takeovers)).await?;
        record(&args.out, "cluster", &r)?;
    }
    if wants("chaos") {
        let plan = chaos::Plan {
            rounds: args.chaos_rounds,
            seeds: args.chaos_seeds,
            repeat: args.chaos_repeat,
            throughput_reps: args.chaos_throughput_reps,
        };
        let r = chaos::suite(&plan, &args.out).await?;
        println!("{}", serde_json::to_string_pretty(&r)?);
    }
    if wants("hooks") {
        let r = hooks::run(reps).await?;
        record(&args.out, "hooks", &r)?;
    }
    if wants("cold") {
        let r = cold::run(reps, args.baseline_bin.as_deref()).await?;
        record(&args.out, "cold", &r)?;
    }
    if wants("step") {
        let r = step::run(reps, args.baseline_bin.as_deref()).await?;
        record(&args.out, "step", &r)?;
    }
    if wants("acp") {
        let r = acp::run(reps).await?;
        record(&args.out, "acp", &r)?;
    }
    if wants("stream") {
        let r = stream::run(reps).await?;
        record(&args.out, "stream", &r)?;
    }
    if wants("browser") {
        let r = browser::run(reps).await?;
        record(&args.out, "browser", &r)?;
    }
    if wants("kernel") {
        let r = kernel::run(reps).await?;
        record(&args.out, "kernel", &r)?;
    }
    if wants("vscode") {
        let r = vscode::run(reps).await?;
        record(&args.out, "vscode", &r)?;
    }
    if wants("hibernation") {
        let r = hibernation::run(reps).await?;
        record(&args.out, "hibernation", &r)?;
    }
    if wants("memory") {
        let r = memory::run(reps, crate::scaled(args.idle_conversations, 10), args.baseline_bin.as_deref()).await?;
        record(&args.out, "memory", &r)?;
    }
    if wants("reads") {
        let r = reads::run(reps, args.baseline_bin.as_deref()).await?;
        record(&args.out, "reads", &r)?;
    }
    if wants("fork") {
        let r = fork::run(reps).await?;
        record(&args.out, "fork", &r)?;
    }
    if wants("environments") {
        let r = environments::run(reps).await?;
        record(&args.out, "environments", &r)?;
    }
    if wants("batches") {
        let r = batches::run(reps).await?;
        record(&args.out, "batches", &r)?;
    }
    if wants("queue") {
        let r = queue::run(reps).await?;
        record(&args.out, "queue", &r)?;
    }
    if wants("checkpoint") {
        let r = checkpoint::run(args.checkpoint_reps.max(reps)).await?;
        record(&args.out, "checkpoint", &r)?;
    }
    if wants("gvisor") {
        let r = gvisor::run(reps).await?;
        record(&args.out, "gvisor", &r)?;
    }
    if wants("egress") {
        let r = egress::run(reps).await?;
        record(&args.out, "egress", &r)?;
    }
    if wants("runtime_api") {
        let r = runtime_api::run(reps).await?;
        record(&args.out, "runtime_api", &r)?;
    }
    if wants("docker") {
        let r = record::repeated("docker", reps, |_| docker::run(args.docker_starts)).await?;
        record(&args.out, "docker", &r)?;
    }
    Ok(())
}

/// Writes a suite's result to `<out>/<suite>.json` and prints it.
fn record(out: &std::path::Path, suite: &str, result: &impl serde::Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(result)?;
    std::fs::write(out.join(format!("{suite}.json")), text.clone() + "\n")?;
    println!("{text}");
    Ok(())
}

/// Polls start task `id` every millisecond until it is READY (an error if it failed), so that a
/// start's latency is read to the millisecond.
pub(crate) async fn until_ready(api: &halyard_tests::Api, id: &str) -> Result<()> {
    loop {
        let (_, t) = api.get(&format!("/api/v1/start-tasks/{id}")).await;
        match t["status"].as_str() {
            Some("READY") => return Ok(()),
            Some("ERROR") => anyhow::bail!("start failed: {t}"),
            _ => tokio::time::sleep(Duration::from_millis(1)).await,
        }
    }
}

/// One repetition of the core suite, with its own `halyard up`.
async fn core(args: &Args) -> Result<serde_json::Value> {
    let llm = ScriptedLlm::start().await;
    let opts = HalyardOptions::new(&llm.base_url)
        .set("HALYARD_LOG", "warn")
        .set("HALYARD_RATE_LIMIT_PER_MINUTE", "0")
        .set("HALYARD_MAX_RUNNING_TOTAL", "0");
    let mut opts = opts;
    opts.env.insert("HALYARD_LLM_STREAM".into(), "false".into());
    let h = Halyard::start(opts);
    eprintln!("halyard up at {} (nats {})", h.http, h.nats);
    let client = h.nats_client("admin").await;
    let js = async_nats::jetstream::new(client.clone());

    // (c) first, on a quiet system.
    let api = h.api(KEY);
    let mut starts = Vec::new();
    for _ in 0..args.starts {
        let t0 = Instant::now();
        let (status, task) = api.post("/api/v1/conversations", json!({})).await;
        anyhow::ensure!(status == 202, "start failed: {task}");
        let id = task["id"].as_str().context("task id")?.to_owned();
        until_ready(&api, &id).await?;
        starts.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    starts.sort_by(f64::total_cmp);
    let (start_p50, start_p99) = (percentile(&starts, 50.0), percentile(&starts, 99.0));
    eprintln!("(c) start to READY: p50 {start_p50:.1} ms, p99 {start_p99:.1} ms over {}", starts.len());

    // (a) raw JetStream publish with acks, 256 in flight, file storage like the event stream.
    bench_stream(&js, "BENCH_RAW", "bench.raw.>").await?;
    let payload = bytes_of_event();
    let cpu0 = cpu_now();
    let t0 = Instant::now();
    let mut inflight = FuturesUnordered::new();
    for i in 0..args.raw_messages {
        if inflight.len() >= 256 {
            inflight.next().await.context("ack")??;
        }
        let ack = js.publish(format!("bench.raw.{}", i % 50), payload.clone().into()).await?;
        inflight.push(ack.into_future());
    }
    while let Some(r) = inflight.next().await {
        r?;
    }
    let raw_rate = args.raw_messages as f64 / t0.elapsed().as_secs_f64();
    let raw_cpu = cpu_per_item(cpu0, cpu_now(), args.raw_messages);
    eprintln!("(a) raw JetStream publish: {raw_rate:.0} msg/s");

    // (a2) the same server and stream, written the way a conversation log must be: one
    // sequential writer per subject, each publish naming the subject's last sequence.
    let checked_writers = args.conversations;
    let per = (args.raw_messages / checked_writers).max(1);
    let cpu0 = cpu_now();
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..checked_writers {
        let js = js.clone();
        let payload = payload.clone();
        tasks.push(tokio::spawn(async move {
            let mut last = 0u64;
            for _ in 0..per {
                let msg = async_nats::jetstream::message::PublishMessage::build()
                    .payload(payload.clone().into())
                    .expected_last_subject_sequence(last);
                let ack = js.send_publish(format!("bench.raw.seq.{w}"), msg).await?.await?;
                last = ack.sequence;
            }
            Ok::<_, async_nats::Error>(())
        }));
    }
    for t in tasks {
        t.await?.map_err(|e| anyhow::anyhow!(e))?;
    }
    let checked_rate = (checked_writers * per) as f64 / t0.elapsed().as_secs_f64();
    let checked_cpu = cpu_per_item(cpu0, cpu_now(), checked_writers * per);
    js.delete_stream("BENCH_RAW").await?;
    eprintln!("(a2) raw JetStream, {checked_writers} sequential writers with expected-sequence checks: {checked_rate:.0} msg/s");

    // (b) the event path.
    let mut convs = Vec::new();
    for _ in 0..args.conversations {
        let (conv, _) = api.start_ready(json!({})).await;
        convs.push(conv);
    }
    // Wait for each conversation's opening events, so the WebSocket starts after them.
    let mut starts_at = Vec::new();
    for conv in &convs {
        let events = api.wait_events(conv, "opening events", |ev| ev.len() >= 2).await;
        starts_at.push(events.len() as u64);
    }
    let total = args.conversations * args.events_per_conversation;
    let readers_n = if args.no_ws { 0 } else { args.conversations };
    let begin = Arc::new(tokio::sync::Barrier::new(args.conversations + readers_n + 1));
    let mut readers = Vec::new();
    for (conv, after) in convs.iter().zip(&starts_at).take(readers_n) {
        let mut ws = api.ws(conv, *after).await;
        let want = args.events_per_conversation;
        let begin = begin.clone();
        readers.push(tokio::spawn(async move {
            begin.wait().await;
            let mut got = 0;
            while got < want {
                if ws.next_text(Duration::from_secs(60)).await.is_none() {
                    break;
                }
                got += 1;
            }
            (got, Instant::now())
        }));
    }
    let mut writers = Vec::new();
    for conv in &convs {
        let id: ConversationId = conv.parse()?;
        let mut appender = EventAppender::open(js.clone(), id).await?;
        let n = args.events_per_conversation;
        let begin = begin.clone();
        writers.push(tokio::spawn(async move {
            begin.wait().await;
            for i in 0..n {
                let body = EventBody::Observation {
                    tool_call_id: format!("call_{i}"),
                    tool: "terminal".into(),
                    content: "x".repeat(160),
                    exit_code: Some(0),
                    is_error: false,
                    url: None,
                    screenshot_id: None,
                    image_ids: Vec::new(),
                };
                appender.append(EventId::new(), EventSource::Environment, body, None).await?;
            }
            Ok::<_, halyard_platform::BusError>(Instant::now())
        }));
    }
    begin.wait().await;
    let cpu0 = cpu_now();
    let t0 = Instant::now();
    let mut appended_at = t0;
    for w in writers {
        appended_at = appended_at.max(w.await??);
    }
    let mut delivered = 0;
    let mut delivered_at = t0;
    for r in readers {
        let (got, at) = r.await?;
        delivered += got;
        delivered_at = delivered_at.max(at);
    }
    let path_cpu = cpu_per_item(cpu0, cpu_now(), total);
    let append_rate = total as f64 / (appended_at - t0).as_secs_f64();
    let delivered_rate = delivered as f64 / (delivered_at - t0).as_secs_f64();
    eprintln!("(b) event path: appended {append_rate:.0} ev/s, delivered {delivered_rate:.0} ev/s ({delivered}/{total})");
    eprintln!("    CPU per message: raw {raw_cpu}; checked writers {checked_cpu}; event path {path_cpu}");

    let ratio = delivered_rate / raw_rate;
    let results = json!({
        "benchmark": "core (issue 2)",
        "machine": {"cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)},
        "a_raw_jetstream_publish_per_sec": raw_rate.round(),
        "a_cpu_per_message": raw_cpu,
        "a2_raw_jetstream_sequential_checked_writers_per_sec": checked_rate.round(),
        "a2_cpu_per_message": checked_cpu,
        "b_event_path": {
            "conversations": args.conversations,
            "events": total,
            "delivered": delivered,
            "appended_per_sec": append_rate.round(),
            "delivered_to_websocket_per_sec": delivered_rate.round(),
            "ratio_to_raw": (ratio * 1000.0).round() / 1000.0,
            "cpu_per_event": path_cpu,
            "target_ratio": 0.5,
        },
        "c_start_to_ready_ms": {"samples": starts.len(), "p50": (start_p50 * 10.0).round() / 10.0, "p99": (start_p99 * 10.0).round() / 10.0, "target_p50": 50.0, "isolation": "uid"},
    });
    drop(h);
    Ok(results)
}

/// A file stream of the benchmark's own on `subjects`, made afresh (one left by an interrupted
/// run is removed first), as the event stream is stored.
pub(crate) async fn bench_stream(js: &async_nats::jetstream::Context, name: &str, subjects: &str) -> Result<()> {
    let _ = js.delete_stream(name).await;
    js.create_stream(async_nats::jetstream::stream::Config {
        name: name.into(),
        subjects: vec![subjects.into()],
        storage: async_nats::jetstream::stream::StorageType::File,
        ..Default::default()
    })
    .await?;
    Ok(())
}

/// CPU time (user + system) used so far by every process named `comm` (`self` for this one),
/// in seconds, from /proc. Where the CPU goes says more than a rate on a shared, noisy machine.
pub(crate) fn cpu_seconds(comm: &str) -> f64 {
    cpu_of(comm, false)
}

/// As [`cpu_seconds`], with the CPU of the processes' children that ended and were waited for
/// (`cutime`, `cstime`): a sum that does not drop when a sandbox's processes end, as long as
/// their parents are counted.
pub(crate) fn cpu_seconds_with_children(comm: &str) -> f64 {
    cpu_of(comm, true)
}

/// A process's CPU ticks from its `stat` line: its own, and with `children` those of the
/// children it waited for.
fn stat_ticks(stat: &str, children: bool) -> Option<u64> {
    // The command name is in parentheses and may contain spaces: fields start after ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    let own = field(11)? + field(12)?;
    Some(if children { own + field(13)? + field(14)? } else { own })
}

/// CPU seconds, with their waited-for children's, of the processes whose command line contains
/// `needle`, now (for programs whose command name says nothing: Node names itself
/// `MainThread`).
pub(crate) fn cpu_seconds_of_command(needle: &str) -> f64 {
    let named = |dir: &std::path::Path| String::from_utf8_lossy(&std::fs::read(dir.join("cmdline")).unwrap_or_default()).contains(needle);
    ticks_of(true, |_, dir, _| named(dir)) as f64 / 100.0
}

fn cpu_of(comm: &str, children: bool) -> f64 {
    let hz = 100.0; // USER_HZ on Linux
    if comm == "self" {
        return std::fs::read_to_string("/proc/self/stat").ok().and_then(|s| stat_ticks(&s, children)).unwrap_or(0) as f64 / hz;
    }
    let name = format!("({comm})");
    ticks_of(children, |_, _, stat| stat.contains(&name)) as f64 / hz
}

/// CPU ticks, now, of the processes `which` picks (given each one's pid, `/proc` directory and
/// `stat` line), with those of the children they waited for if `children`.
fn ticks_of(children: bool, which: impl Fn(u32, &std::path::Path, &str) -> bool) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        if which(pid, &entry.path(), &stat) {
            total += stat_ticks(&stat, children).unwrap_or(0);
        }
    }
    total
}

/// CPU seconds, now, of the process `root` and every process below it (with the children they
/// waited for, so that a sandbox's command that ended still counts): nats-server's, then the
/// rest's. Unlike [`cpu_now`], nothing outside this Halyard counts, so a process of an earlier
/// suite that ends meanwhile cannot take its CPU out of the sum.
pub(crate) fn cpu_of_tree(root: u32) -> [f64; 2] {
    let in_tree = |pid: u32| pid == root || browser::descends_from(pid, root);
    let nats = ticks_of(true, |pid, _, stat| stat.contains("(nats-server)") && in_tree(pid));
    let rest = ticks_of(true, |pid, _, stat| !stat.contains("(nats-server)") && in_tree(pid));
    [nats as f64 / 100.0, rest as f64 / 100.0]
}

/// CPU seconds of nats-server, halyard and this process, now.
pub(crate) fn cpu_now() -> [f64; 3] {
    [cpu_seconds("nats-server"), cpu_seconds("halyard"), cpu_seconds("self")]
}

/// Microseconds of CPU per item, per process, between two [`cpu_now`] readings.
pub(crate) fn cpu_per_item(before: [f64; 3], after: [f64; 3], items: usize) -> serde_json::Value {
    let us = |i: usize| ((after[i] - before[i]) * 1e6 / items.max(1) as f64 * 10.0).round() / 10.0;
    json!({"nats_server_us": us(0), "halyard_us": us(1), "benchmark_client_us": us(2), "total_us": ((us(0) + us(1) + us(2)) * 10.0).round() / 10.0})
}

/// A payload the size of a typical encoded event.
pub(crate) fn bytes_of_event() -> Vec<u8> {
    let ev = halyard_protocol::event::ConversationEvent {
        seq: 1,
        id: EventId::new(),
        conversation_id: ConversationId::new(),
        source: EventSource::Environment,
        timestamp_ms: 0,
        body: EventBody::Observation {
            tool_call_id: "call_1".into(),
            tool: "terminal".into(),
            content: "x".repeat(160),
            exit_code: Some(0),
            is_error: false,
            url: None,
            screenshot_id: None,
            image_ids: Vec::new(),
        },
    };
    halyard_protocol::encode(&halyard_protocol::Envelope::new(ev, 0)).unwrap_or_default()
}

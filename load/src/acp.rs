//! Third-party agents (issue 49): what Halyard adds to Claude Code's turn, against the same
//! agent run bare, in one run on one machine with the same scripted Anthropic server. Each
//! repetition is one turn of [`CALLS`] LLM calls: [`CALLS`] - 1 Bash commands, then an answer of
//! [`PIECES`] pieces streamed [`PACE`] apart.
//!
//! - Per update: for each piece of the answer, when the scripted server wrote it to when it
//!   arrived as a frame (`answer_delta`) on a WebSocket watching the conversation, less the same
//!   delay for the agent run bare (the piece's `agent_message_chunk` line on its standard
//!   output, read by this process): agent stdout → executor → runner → NATS → gateway → frame.
//! - Per LLM call: the median gap, at the scripted server, between one answer's end and the next
//!   request's arrival (the answer's last piece reaching the agent, the agent's work and its
//!   command, the next request reaching the server), through Halyard less bare: the relay's
//!   round trip (sandbox loopback → executor → WebSocket → runner → provider, and back) and
//!   whatever Halyard does between two calls (the updates, the checkpoint after the command).
//!   Beside it, the turn's wall time through Halyard less the bare turn's, over the calls (the
//!   run's own start is in that one too). Both turns are a session's second: the agent and its
//!   session are started before the clock, through Halyard by a first message.
//!
//! The bare agent runs on the host in a temporary directory, not in a sandbox (its process
//! sandbox would add nothing to a process that reads stdin and calls a loopback port).
//! Targets: update overhead under 2 ms p50; LLM call overhead under 1 ms. A benchmark reports;
//! it does not assert.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::record::{Context, spread};
use crate::{KEY, percentile};

const CALLS: usize = 4;
const PIECES: usize = 60;
const PACE: Duration = Duration::from_millis(5);
const LAUNCHER: &str = "/opt/halyard-agents/bin/claude-agent-acp";

/// The script of one turn: thinking first on every answer, as Anthropic sends it with thinking on.
fn turn(llm: &ScriptedLlm, rep: usize) {
    let thinking = |r: Reply| Reply::Thinking("Next.".into(), Box::new(r));
    for i in 0..CALLS - 1 {
        llm.push([thinking(Reply::tool("Bash", json!({"command": format!("echo {rep}-{i}"), "description": "Echo"})))]);
    }
    let text: String = (0..PIECES).map(|i| format!("w{i:05} ")).collect();
    llm.push([thinking(Reply::Paced(PACE, Box::new(Reply::Text(text))))]);
}

fn thinking_text(text: &str) -> Reply {
    Reply::Thinking("Next.".into(), Box::new(Reply::Text(text.into())))
}

/// Each piece's delay (ms) from when the server sent it to `arrivals` (by the piece's index).
fn delays(llm: &ScriptedLlm, sent_before: usize, arrivals: &[(usize, Instant)]) -> Vec<f64> {
    let sent: Vec<Instant> = llm.pieces()[sent_before..].iter().map(|(_, at)| *at).collect();
    let mut d: Vec<f64> =
        arrivals.iter().filter_map(|(i, at)| sent.get(*i).map(|s| at.saturating_duration_since(*s).as_secs_f64() * 1000.0)).collect();
    d.sort_by(f64::total_cmp);
    d
}

/// The gaps (ms) between one answer's end and the next request's arrival at the server, among
/// the requests that arrived after `since` (the measured turn's).
fn call_gaps(llm: &ScriptedLlm, since: Instant) -> Vec<f64> {
    let timings: Vec<(Instant, Instant)> = llm.timings().into_iter().filter(|(arrived, _)| *arrived >= since).collect();
    let mut gaps: Vec<f64> = timings.windows(2).map(|w| w[1].0.saturating_duration_since(w[0].1).as_secs_f64() * 1000.0).collect();
    gaps.sort_by(f64::total_cmp);
    gaps
}

/// One turn through Halyard: (wall seconds, piece delays, CPU of Halyard, nats-server and this
/// client per LLM call of the turn, when it began).
async fn through_halyard(h: &Halyard, llm: &ScriptedLlm, rep: usize) -> Result<(f64, Vec<f64>, Value, Instant)> {
    let api = h.api(KEY);
    // The agent is started (and its session opened) by a first turn, as the bare run starts it
    // before its clock: the measured turn is the second.
    llm.push([thinking_text("Ready.")]);
    let (conv, _) = api.start_ready(json!({"agent": "claude-code", "message": "warm up"})).await;
    api.wait_events(&conv, "the first turn", |ev| ev.iter().any(|e| e["kind"] == "execution_status" && e["status"] == "finished")).await;
    let after = api.get(&format!("/api/v1/conversations/{conv}")).await.1["last_event_seq"].as_u64().unwrap_or(0);
    let mut ws = api.ws(&conv, after).await;
    turn(llm, rep);
    let sent_before = llm.pieces().len();
    let cpu0 = crate::cpu_now();
    let began = Instant::now();
    let (s, _) = api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "go"})).await;
    ensure!(s == 202, "the message was refused: {s}");
    let mut arrivals = Vec::new();
    let mut pieces = 0usize;
    let mut text = String::new();
    while let Some(frame) = ws.next_frame(Duration::from_secs(120)).await {
        if frame["kind"] == "answer_delta" {
            // Each frame carries what came since the last one: count the pieces it completes.
            text.push_str(frame["text"].as_str().unwrap_or_default());
            let now = Instant::now();
            while text.len() >= (pieces + 1) * 7 {
                arrivals.push((pieces, now));
                pieces += 1;
            }
        } else if frame["kind"] == "execution_status" && frame["status"] == "finished" {
            break;
        }
    }
    let wall = began.elapsed().as_secs_f64();
    let cpu = crate::cpu_per_item(cpu0, crate::cpu_now(), CALLS);
    ws.close().await;
    ensure!(pieces >= PIECES, "{pieces} of {PIECES} pieces arrived");
    Ok((wall, delays(llm, sent_before, &arrivals), cpu, began))
}

/// One turn of the agent run bare, driven by this process over its stdio: (wall, delays, when
/// it began).
async fn bare(llm: &ScriptedLlm, rep: usize) -> Result<(f64, Vec<f64>, Instant)> {
    let dir = tempfile::tempdir()?;
    let base = llm.base_url.trim_end_matches("/v1");
    let mut child = tokio::process::Command::new(LAUNCHER)
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .env("ANTHROPIC_BASE_URL", base)
        .env("ANTHROPIC_API_KEY", "sk-bare")
        .env("ANTHROPIC_MODEL", "claude-sonnet-4-5")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("IS_SANDBOX", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("start claude-agent-acp (infra/install-agents.sh installs it)")?;
    let mut stdin = child.stdin.take().context("stdin")?;
    let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    let mut send = async |v: Value| stdin.write_all(format!("{v}\n").as_bytes()).await;
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}})).await?;
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": dir.path(), "mcpServers": []}})).await?;
    let mut session = String::new();
    while let Some(line) = lines.next_line().await? {
        let v: Value = serde_json::from_str(&line).unwrap_or_default();
        if v["id"] == 2 {
            session = v["result"]["sessionId"].as_str().unwrap_or_default().to_owned();
            break;
        }
    }
    turn(llm, rep);
    let sent_before = llm.pieces().len();
    let began = Instant::now();
    let prompt = json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": {"sessionId": session, "prompt": [{"type": "text", "text": "go"}]}});
    send(prompt).await?;
    let (mut arrivals, mut text) = (Vec::new(), String::new());
    while let Some(line) = lines.next_line().await? {
        let now = Instant::now();
        let v: Value = serde_json::from_str(&line).unwrap_or_default();
        if v["method"] == "session/request_permission" {
            let allow =
                v["params"]["options"].as_array().and_then(|o| o.iter().find(|o| o["kind"] == "allow_once")).map(|o| o["optionId"].clone());
            send(json!({"jsonrpc": "2.0", "id": v["id"], "result": {"outcome": {"outcome": "selected", "optionId": allow}}})).await?;
        } else if v["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            text.push_str(v["params"]["update"]["content"]["text"].as_str().unwrap_or_default());
            while text.len() >= (arrivals.len() + 1) * 7 {
                arrivals.push((arrivals.len(), now));
            }
        } else if v["id"] == 3 {
            break;
        }
    }
    let wall = began.elapsed().as_secs_f64();
    Ok((wall, delays(llm, sent_before, &arrivals), began))
}

fn summary(wall: f64, d: &[f64]) -> Value {
    json!({"wall_s": wall, "piece_delay_ms_p50": percentile(d, 50.0), "piece_delay_ms_p99": percentile(d, 99.0), "pieces": d.len()})
}

pub async fn run(reps: usize) -> Result<Value> {
    let context = Context::now();
    let llm = ScriptedLlm::start().await;
    llm.fallback(|_| Reply::Text("ok".into()));
    let h = Halyard::start(
        HalyardOptions::new(&llm.base_url)
            .set("HALYARD_LOG", "warn")
            .set("HALYARD_RATE_LIMIT_PER_MINUTE", "0")
            .set("HALYARD_LLM_PROVIDER", "anthropic")
            .set("HALYARD_LLM_MODEL", "claude-sonnet-4-5"),
    );
    let mut runs = Vec::new();
    for rep in 0..reps {
        let (bare_wall, bare_d, bare_began) = bare(&llm, rep).await?;
        let bare_gaps = call_gaps(&llm, bare_began);
        let (wall, d, cpu, began) = through_halyard(&h, &llm, rep).await?;
        let gaps = call_gaps(&llm, began);
        let update = percentile(&d, 50.0) - percentile(&bare_d, 50.0);
        let per_call = percentile(&gaps, 50.0) - percentile(&bare_gaps, 50.0);
        let per_call_wall = (wall - bare_wall) * 1000.0 / CALLS as f64;
        eprintln!(
            "acp rep {rep}: update overhead p50 {update:.2} ms, per call {per_call:.2} ms (gaps {gaps:?} vs bare {bare_gaps:?}; turn {wall:.3} s, bare {bare_wall:.3} s)"
        );
        runs.push(json!({
            "halyard": summary(wall, &d),
            "bare": summary(bare_wall, &bare_d),
            "call_gaps_ms": {"halyard": gaps, "bare": bare_gaps},
            "update_overhead_ms_p50": update,
            "llm_call_overhead_ms": per_call,
            "turn_overhead_ms_per_call": per_call_wall,
            "cpu_us_per_llm_call": cpu,
        }));
    }
    let pick = |f: &dyn Fn(&Value) -> Option<f64>| spread(runs.iter().filter_map(f));
    Ok(json!({
        "suite": "acp",
        "context": context,
        "turn": {"llm_calls": CALLS, "commands": CALLS - 1, "answer_pieces": PIECES, "pace_ms": PACE.as_millis() as u64, "repetitions": reps},
        "update_overhead_ms_p50": pick(&|r| r["update_overhead_ms_p50"].as_f64()),
        "llm_call_overhead_ms": pick(&|r| r["llm_call_overhead_ms"].as_f64()),
        "turn_overhead_ms_per_call": pick(&|r| r["turn_overhead_ms_per_call"].as_f64()),
        "piece_delay_ms_p50": {"halyard": pick(&|r| r["halyard"]["piece_delay_ms_p50"].as_f64()), "bare": pick(&|r| r["bare"]["piece_delay_ms_p50"].as_f64())},
        "turn_wall_s": {"halyard": pick(&|r| r["halyard"]["wall_s"].as_f64()), "bare": pick(&|r| r["bare"]["wall_s"].as_f64())},
        "halyard_cpu_us_per_llm_call": pick(&|r| r["cpu_us_per_llm_call"]["halyard_us"].as_f64()),
        "nats_cpu_us_per_llm_call": pick(&|r| r["cpu_us_per_llm_call"]["nats_server_us"].as_f64()),
        "targets": {"update_overhead_ms_p50_under": 2, "llm_call_overhead_ms_under": 1},
        "runs": runs,
        "notes": "Claude Code (claude-agent-acp 0.23.1, Claude Code 2.1.332) in a process sandbox through Halyard, and bare on the host, \
                  against the same scripted Anthropic server; the watcher is a Rust WebSocket client, not a browser. The per-call \
                  figure is the median gap between one answer's end and the next request at the server, through Halyard less \
                  bare: the relay both ways and Halyard's work between two calls; turn_overhead_ms_per_call is the turn's wall-time \
                  difference over its calls (the run's start too; noisy: the agent's own turn varies by tens of ms). \
                  CPU is Halyard's processes (the agent runner, gateway, executor: everything named halyard) and nats-server over \
                  the whole turn, per LLM call; the agent's own CPU is in neither run's figures.",
        "reproduce": "cargo run --release -p halyard-load -- --suite acp (writes load/results/acp.json)",
    }))
}

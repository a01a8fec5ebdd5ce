//! Streaming answers (issue 31): the delay from the provider's chunk to the watcher's WebSocket
//! frame, and the CPU a streamed token costs, against a real `halyard up` (release build) and
//! the scripted LLM streaming one server-sent event every [`PACE`]. Each repetition is one
//! answer of [`PIECES`] pieces (seven characters each, about two tokens), watched by one
//! WebSocket client in this process: a piece's delay is when its `answer_delta` frame arrived
//! less when the scripted server wrote it. The baseline, from the same run, is the same answer
//! from a Halyard with streaming off (`HALYARD_LLM_STREAM=false`: one plain response, no
//! pieces), so the CPU ratio says what streaming adds per token. Target: a median delay under
//! 5 ms. A benchmark reports; it does not assert.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm};
use serde_json::{Value, json};

use crate::record::{Context, spread};
use crate::{KEY, cpu_now, percentile};

const PIECES: usize = 300;
const PACE: Duration = Duration::from_millis(5);

/// The answer: `PIECES` pieces of seven characters as the scripted server splits them.
fn answer() -> String {
    (0..PIECES).map(|i| format!("w{:05} ", i % 100_000)).collect()
}

/// One answer through `h`, watched over the WebSocket: each piece's delay in ms (none with
/// streaming off), and the CPU of every process per piece.
async fn once(h: &Halyard, llm: &ScriptedLlm, streaming: bool) -> Result<(Vec<f64>, Value, f64)> {
    let api = h.api(KEY);
    let (conv, _) = api.start_ready(json!({})).await;
    let mut ws = api.ws(&conv, 0).await;
    let sent_before = llm.pieces().len();
    llm.push([Reply::Paced(PACE, Box::new(Reply::Text(answer())))]);
    let cpu0 = cpu_now();
    let began = Instant::now();
    let (s, _) = api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "write"})).await;
    ensure!(s == 202, "the message was refused: {s}");
    let mut arrivals: Vec<(u64, Instant)> = Vec::new();
    while let Some(frame) = ws.next_frame(Duration::from_secs(60)).await {
        if frame["kind"] == "answer_delta" {
            arrivals.push((frame["from"].as_u64().unwrap_or(0), Instant::now()));
        } else if frame["kind"] == "agent_message" {
            break;
        }
    }
    let wall = began.elapsed().as_secs_f64();
    let cpu = crate::cpu_per_item(cpu0, cpu_now(), PIECES);
    ws.close().await;
    let sent: Vec<Instant> = llm.pieces()[sent_before..].iter().map(|(_, at)| *at).collect();
    if streaming {
        ensure!(arrivals.len() == sent.len(), "{} pieces were sent and {} frames arrived", sent.len(), arrivals.len());
    }
    // Piece `from` is the from-th piece the server sent.
    let delays = arrivals
        .iter()
        .filter_map(|(from, at)| sent.get(*from as usize).map(|s| at.saturating_duration_since(*s).as_secs_f64() * 1000.0))
        .collect();
    Ok((delays, cpu, wall))
}

/// `reps` answers through a Halyard with streaming on or off.
async fn series(streaming: bool, reps: usize) -> Result<Vec<Value>> {
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(
        HalyardOptions::new(&llm.base_url)
            .set("HALYARD_LOG", "warn")
            .set("HALYARD_RATE_LIMIT_PER_MINUTE", "0")
            .set("HALYARD_LLM_STREAM", if streaming { "true" } else { "false" }),
    );
    let mut runs = Vec::new();
    for rep in 0..reps {
        let (mut delays, cpu, wall) = once(&h, &llm, streaming).await?;
        delays.sort_by(f64::total_cmp);
        eprintln!("stream={streaming} rep {rep}: {} frames, p50 {:.2} ms, cpu {cpu}", delays.len(), percentile(&delays, 50.0));
        runs.push(json!({
            "frames": delays.len(),
            "delay_ms_p50": (!delays.is_empty()).then(|| percentile(&delays, 50.0)),
            "delay_ms_p99": (!delays.is_empty()).then(|| percentile(&delays, 99.0)),
            "delay_ms_max": delays.last(),
            "cpu_us_per_piece": cpu,
            "wall_s": wall,
        }));
    }
    Ok(runs)
}

pub async fn run(reps: usize) -> Result<Value> {
    let context = Context::now();
    let streamed = series(true, reps).await?;
    let plain = series(false, reps).await?;
    let pick = |runs: &[Value], f: &dyn Fn(&Value) -> Option<f64>| spread(runs.iter().filter_map(f));
    let halyard_cpu = |r: &Value| r["cpu_us_per_piece"]["halyard_us"].as_f64();
    let total_cpu = |r: &Value| r["cpu_us_per_piece"]["total_us"].as_f64();
    let streamed_cpu = pick(&streamed, &halyard_cpu);
    let plain_cpu = pick(&plain, &halyard_cpu);
    let ratio = streamed_cpu["median"].as_f64().zip(plain_cpu["median"].as_f64()).filter(|(_, b)| *b > 0.0).map(|(a, b)| a / b);
    Ok(json!({
        "suite": "stream",
        "context": context,
        "answer": {"pieces": PIECES, "chars_per_piece": 7, "pace_ms": PACE.as_millis() as u64, "repetitions": reps},
        "delay_ms_p50": pick(&streamed, &|r| r["delay_ms_p50"].as_f64()),
        "delay_ms_p99": pick(&streamed, &|r| r["delay_ms_p99"].as_f64()),
        "halyard_cpu_us_per_piece": {"streamed": streamed_cpu, "not_streamed_baseline": plain_cpu, "ratio": ratio},
        "all_processes_cpu_us_per_piece": {"streamed": pick(&streamed, &total_cpu), "not_streamed_baseline": pick(&plain, &total_cpu)},
        "targets": {"delay_ms_p50_under": 5},
        "runs": {"streamed": streamed, "not_streamed_baseline": plain},
        "notes": "The watcher is a Rust WebSocket client in the benchmark's process, not a browser; a piece is about two tokens. \
                  CPU is read from /proc in 10 ms ticks over a whole answer; the baseline answers the same text in one response.",
        "reproduce": "cargo run --release -p halyard-load -- --suite stream (writes load/results/stream.json)",
    }))
}

//! What gVisor costs (issue 53): Docker sandboxes under runc and under gVisor (`runsc`), side
//! by side in one `halyard up` with a spec of each, every repetition measuring both in turns:
//!
//! - start to READY (`POST /conversations` with the spec, no warm pool);
//! - a terminal step: from READY to the run's `finished`, the scripted LLM answering at once,
//!   the agent running `echo hi`;
//! - syscall-heavy work: 200,000 `stat` calls timed inside the sandbox by the command itself;
//! - the machine's CPU per start (all processes: the engine and runsc are not Halyard's).
//!
//! Figures are each repetition's median over its starts (three; one in a smoke run); ratios are
//! gVisor over runc.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use halyard_tests::{Api, Halyard, HalyardOptions, Reply, ScriptedLlm};
use serde_json::{Value, json};

use crate::record::{Context, spread};
use crate::{KEY, percentile};

const SPECS: &str =
    "[[sandbox.specs]]\nname = \"runc\"\nruntime = \"runc\"\n\n[[sandbox.specs]]\nname = \"gvisor\"\nruntime = \"gvisor\"\n";
/// Prints how long 200,000 `stat` calls took, in ms.
const SYSCALLS: &str = "python3 -c \"import os,time; t=time.perf_counter(); [os.stat('/') for _ in range(200000)]; print('stat_ms', round((time.perf_counter()-t)*1000, 1))\"";

/// A command per run: `echo hi`, or the syscall loop when the message says so; then finish.
fn script(llm: &ScriptedLlm) {
    llm.fallback(|req| {
        let turn = halyard_tests::llm::latest_turn(req);
        if turn.iter().any(|m| m["role"] == "tool") {
            return Reply::finish("done");
        }
        let asked = turn.first().and_then(|m| m["content"].as_str()).unwrap_or_default().to_owned();
        let command = if asked.contains("syscalls") { SYSCALLS } else { "echo hi" };
        Reply::tool("terminal", json!({"command": command, "security_risk": "low"}))
    });
}

/// The machine's busy CPU seconds since boot (`/proc/stat`, every process).
pub(crate) fn busy_seconds() -> f64 {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<f64> = text.lines().next().unwrap_or_default().split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    let idle = ticks.get(3).copied().unwrap_or(0.0) + ticks.get(4).copied().unwrap_or(0.0);
    (ticks.iter().take(8).sum::<f64>() - idle) / 100.0
}

/// One start of `spec`: (start to READY, READY to finished, the stat loop's ms, machine CPU s).
async fn once(api: &Api, spec: &str) -> Result<[f64; 4]> {
    let cpu0 = busy_seconds();
    let t = Instant::now();
    let (s, task) = api.post("/api/v1/conversations", json!({"sandbox_spec": spec, "message": "bench"})).await;
    ensure!(s == 202, "start refused: {task}");
    crate::until_ready(api, task["id"].as_str().context("task id")?).await?;
    let ready_ms = t.elapsed().as_secs_f64() * 1000.0;
    let conv = task["conversation_id"].as_str().context("conversation")?.to_owned();
    let t = Instant::now();
    api.wait_finished(&conv, 1).await;
    let step_ms = t.elapsed().as_secs_f64() * 1000.0;
    let (s, v) = api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "syscalls"})).await;
    ensure!(s == 202, "message refused: {v}");
    let events = api.wait_finished(&conv, 2).await;
    let out = events.iter().rev().find(|e| e["kind"] == "observation" && e["tool"] == "terminal").context("no observation")?;
    let text = out["content"].as_str().unwrap_or_default();
    let stat_ms: f64 = text
        .split("stat_ms ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .context(format!("no timing in {text:?}"))?;
    let cpu = busy_seconds() - cpu0;
    api.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{conv}"), None).await;
    Ok([ready_ms, step_ms, stat_ms, cpu])
}

fn medians(samples: &[[f64; 4]]) -> Value {
    let at = |i: usize| {
        let mut v: Vec<f64> = samples.iter().map(|s| s[i]).collect();
        v.sort_by(f64::total_cmp);
        (percentile(&v, 50.0) * 10.0).round() / 10.0
    };
    json!({"start_to_ready_ms": at(0), "terminal_step_ms": at(1), "stat_200k_ms": at(2), "machine_cpu_s_per_start": at(3)})
}

pub async fn run(reps: usize) -> Result<Value> {
    let context = Context::now();
    let llm = ScriptedLlm::start().await;
    script(&llm);
    let config = tempfile::NamedTempFile::new()?;
    std::fs::write(config.path(), SPECS)?;
    let mut opts = HalyardOptions::new(&llm.base_url)
        .set("HALYARD_LOG", "warn")
        .set("HALYARD_RATE_LIMIT_PER_MINUTE", "0")
        .set("HALYARD_SANDBOX", "docker")
        .set("HALYARD_SANDBOX_POOL_SIZE", "0")
        .set("HALYARD_SANDBOX_DEFAULT_SPEC", "runc")
        .set("HALYARD_CONFIG", &config.path().display().to_string());
    opts.env.insert("HALYARD_LLM_STREAM".into(), "false".into());
    let h = Halyard::start(opts);
    let api = h.api(KEY);
    // Warm-up: the runtime image, page cache, first connections.
    for spec in ["runc", "gvisor"] {
        once(&api, spec).await?;
    }
    let starts = crate::scaled(3, 1);
    let mut runs = Vec::new();
    for rep in 0..reps {
        let mut run = serde_json::Map::new();
        // In turns within a repetition, so both see the same machine.
        for spec in ["runc", "gvisor"] {
            let mut samples = Vec::new();
            for _ in 0..starts {
                samples.push(once(&api, spec).await?);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            run.insert(spec.to_owned(), json!({"medians": medians(&samples), "samples": samples}));
        }
        let ratio = |k: &str| {
            let (g, r) = (run["gvisor"]["medians"][k].as_f64().unwrap_or(0.0), run["runc"]["medians"][k].as_f64().unwrap_or(0.0));
            if r > 0.0 { (g / r * 100.0).round() / 100.0 } else { 0.0 }
        };
        let ratios = json!({
            "start_to_ready": ratio("start_to_ready_ms"),
            "terminal_step": ratio("terminal_step_ms"),
            "stat_200k": ratio("stat_200k_ms"),
            "machine_cpu_per_start": ratio("machine_cpu_s_per_start"),
        });
        run.insert("gvisor_over_runc".into(), ratios);
        let run = Value::Object(run);
        eprintln!("gvisor rep {rep}: {run}");
        runs.push(run);
    }
    let figure = |path: &[&str]| spread(runs.iter().filter_map(|r| path.iter().try_fold(r, |v, k| v.get(*k)).and_then(Value::as_f64)));
    let mut figures = serde_json::Map::new();
    for spec in ["runc", "gvisor"] {
        for k in ["start_to_ready_ms", "terminal_step_ms", "stat_200k_ms", "machine_cpu_s_per_start"] {
            figures.insert(format!("{spec}.{k}"), figure(&[spec, "medians", k]));
        }
    }
    for k in ["start_to_ready", "terminal_step", "stat_200k", "machine_cpu_per_start"] {
        figures.insert(format!("gvisor_over_runc.{k}"), figure(&["gvisor_over_runc", k]));
    }
    Ok(json!({
        "suite": "gvisor",
        "context": context,
        "repetitions": reps,
        "starts_per_repetition": starts,
        "figures": figures,
        "runs": runs,
    }))
}

//! The agent's browser (issue 25): how long the first browser call of a conversation takes (it
//! starts Chromium in the sandbox), and a warm `browser_navigate` followed by
//! `browser_get_state`, against a real `halyard up` with process sandboxes and the scripted
//! LLM. Each repetition is a new conversation (a new sandbox, so the browser is cold) whose
//! agent serves two pages in the sandbox, takes one step that does nothing (`terminal true`:
//! what any step costs, the baseline from the same run), then navigates (cold), navigates
//! again and reads the state (warm). A step's time is from its action event to its observation
//! event (the log's millisecond timestamps), which covers the agent runner, the executor,
//! Chromium, the screenshot and storing it. CPU is that of Halyard's processes, nats-server and
//! Chromium over the whole run, divided by three; the baseline series runs the same conversation
//! with three more `terminal true` steps in place of the browser's, so the difference between
//! the series is what three browser steps cost (the cold start included). A benchmark reports;
//! it does not assert.

use std::time::Duration;

use anyhow::{Result, ensure};
use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm};
use serde_json::{Value, json};

use crate::record::{Context, spread};
use crate::{KEY, cpu_seconds, cpu_seconds_with_children};

const PORT: u16 = 8131;

fn terminal(command: &str) -> Reply {
    Reply::tool("terminal", json!({"command": command, "security_risk": "low"}))
}

fn pages() -> Reply {
    terminal(&format!(
        "mkdir -p site && cd site && for p in one two; do printf '<title>%s</title><h1>Page %s</h1><a href=\"two.html\">next</a><input name=q>' $p $p > $p.html; done \
         && (nohup python3 -m http.server {PORT} --bind 127.0.0.1 >/dev/null 2>&1 &) && sleep 1"
    ))
}

fn navigate(page: &str) -> Reply {
    Reply::tool("browser_navigate", json!({"url": format!("http://localhost:{PORT}/{page}.html"), "security_risk": "low"}))
}

/// CPU seconds of Halyard's processes and Chromium's, now.
fn cpu() -> f64 {
    cpu_seconds_with_children("halyard") + cpu_seconds_with_children("chromium") + cpu_seconds("nats-server")
}

/// Whether a `halyard` process under `main` (Halyard's own) runs: a sandbox's executor, or its
/// network forwarder. Only `main`'s descendants: an executor another Halyard left behind when
/// it was killed (a crash test's, say) is no sandbox of this one.
pub(crate) fn sandbox_halyard_running(main: u32) -> bool {
    any_process(|pid, dir| {
        pid != main && std::fs::read_to_string(dir.join("stat")).is_ok_and(|s| s.contains("(halyard)")) && descends_from(pid, main)
    })
}

/// `pid`'s parent, from `/proc/<pid>/stat` (`pid (comm) state ppid ...`; the name may hold
/// spaces and parentheses).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// Whether `ancestor` is `pid`'s parent, or its parent's, and so on (up to init).
pub(crate) fn descends_from(mut pid: u32, ancestor: u32) -> bool {
    while let Some(parent) = parent_of(pid).filter(|p| *p > 1) {
        if parent == ancestor {
            return true;
        }
        pid = parent;
    }
    false
}

/// Whether any Chromium process runs on this machine.
fn chromium_running() -> bool {
    any_process(|_, dir| std::fs::read_to_string(dir.join("stat")).is_ok_and(|s| s.contains("(chromium)")))
}

/// Whether a process of this machine is one `is` (given its pid and `/proc` directory) says.
pub(crate) fn any_process(is: impl Fn(u32, &std::path::Path) -> bool) -> bool {
    std::fs::read_dir("/proc").into_iter().flatten().flatten().any(|e| {
        let pid = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok());
        pid.is_some_and(|pid| is(pid, &e.path()))
    })
}

/// The time from each action to its observation, in ms, in the log's order.
pub(crate) fn step_ms(events: &[Value]) -> Vec<(String, f64)> {
    let at = |e: &Value| -> Option<f64> {
        let t = e["timestamp"].as_str()?;
        let parsed = time_ms(t)?;
        Some(parsed)
    };
    let mut out = Vec::new();
    for a in events.iter().filter(|e| e["kind"] == "action") {
        let id = &a["tool_call_id"];
        if let Some(o) = events.iter().find(|e| e["kind"] == "observation" && e["tool_call_id"] == *id) {
            if let (Some(t0), Some(t1)) = (at(a), at(o)) {
                out.push((a["tool"].as_str().unwrap_or_default().to_owned(), ((t1 - t0) * 10.0).round() / 10.0));
            }
        }
    }
    out
}

/// Milliseconds of an RFC 3339 timestamp with milliseconds (`2026-11-25T23:40:11.108Z`), since
/// the day began: enough to subtract two of one run.
fn time_ms(t: &str) -> Option<f64> {
    let clock = t.split('T').nth(1)?.trim_end_matches('Z');
    let mut parts = clock.split(':');
    let (h, m, s) = (parts.next()?.parse::<f64>().ok()?, parts.next()?.parse::<f64>().ok()?, parts.next()?.parse::<f64>().ok()?);
    Some(((h * 60.0 + m) * 60.0 + s) * 1000.0)
}

/// One conversation: the step times, and the CPU of the whole run (from the message to the
/// finish).
async fn once(h: &Halyard, llm: &ScriptedLlm, browsing: bool) -> Result<(Vec<(String, f64)>, f64)> {
    let steps = if browsing {
        vec![pages(), terminal("true"), navigate("one"), navigate("two"), Reply::tool("browser_get_state", json!({}))]
    } else {
        // (Each a little different: the same action four times is a stuck agent.)
        vec![pages(), terminal("true"), terminal("true # 2"), terminal("true # 3"), terminal("true # 4")]
    };
    let (events, spent) = conversation(h, llm, steps, cpu, chromium_running).await?;
    Ok((step_ms(&events), spent))
}

/// A conversation of `steps` then a finish, from its first message: its events and the CPU
/// `cpu` counted over the run. Then it is deleted, and the next waits until its executor and
/// what its sandbox ran (`still_running`) are gone: their CPU would otherwise leave a later
/// reading as they end (the readings sum live processes).
pub(crate) async fn conversation(
    h: &Halyard,
    llm: &ScriptedLlm,
    steps: Vec<Reply>,
    cpu: fn() -> f64,
    still_running: fn() -> bool,
) -> Result<(Vec<Value>, f64)> {
    let api = h.api(KEY);
    llm.push(steps.into_iter().chain([Reply::finish("done")]));
    let (conv, _) = api.start_ready(json!({})).await;
    let cpu0 = cpu();
    let (s, _) = api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "go"})).await;
    ensure!(s == 202, "the message was refused: {s}");
    let events =
        api.wait_events(&conv, "the run", |ev| ev.iter().any(|e| e["kind"] == "execution_status" && e["status"] == "finished")).await;
    let spent = cpu() - cpu0;
    let errors: Vec<&Value> = events.iter().filter(|e| e["kind"] == "observation" && e["is_error"] == true).collect();
    ensure!(errors.is_empty(), "a step failed: {errors:?}");
    api.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{conv}"), None).await;
    // Its executor and helpers too: `halyard` processes whose CPU the next reading counts.
    let main = h.pid();
    let gone = || !still_running() && !sandbox_halyard_running(main);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !gone() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ensure!(gone(), "what the deleted sandbox ran still runs 20 s later");
    Ok((events, spent))
}

/// A `halyard up` with process sandboxes and no warm pool (each conversation's sandbox is new),
/// its LLM the scripted one.
pub(crate) async fn process_halyard() -> (ScriptedLlm, Halyard) {
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(
        HalyardOptions::new(&llm.base_url)
            .set("HALYARD_LOG", "warn")
            .set("HALYARD_RATE_LIMIT_PER_MINUTE", "0")
            .set("HALYARD_SANDBOX_POOL_SIZE", "0"),
    );
    (llm, h)
}

pub async fn run(reps: usize) -> Result<Value> {
    let context = Context::now();
    let (llm, h) = process_halyard().await;
    let mut runs = Vec::new();
    for rep in 0..reps {
        // Interleaved, so that a slow patch of the machine hits both series alike.
        for browsing in [true, false] {
            let (steps, cpu_s) = once(&h, &llm, browsing).await?;
            let ms = |i: usize| steps.get(i).map(|s| s.1);
            let run = if browsing {
                json!({
                    "series": "browser",
                    "baseline_step_ms": ms(1),
                    "cold_navigate_ms": ms(2),
                    "warm_navigate_ms": ms(3),
                    "warm_get_state_ms": ms(4),
                    "warm_navigate_and_get_state_ms": ms(3).zip(ms(4)).map(|(a, b)| a + b),
                    "cpu_ms_per_step": cpu_s * 1000.0 / 3.0,
                    "steps": steps,
                })
            } else {
                json!({"series": "baseline", "step_ms": ms(1), "cpu_ms_per_step": cpu_s * 1000.0 / 3.0, "steps": steps})
            };
            eprintln!("rep {rep}: {run}");
            runs.push(run);
        }
    }
    let of = |series: &str, key: &str| spread(runs.iter().filter(|r| r["series"] == series).filter_map(|r| r[key].as_f64()));
    let browser_cpu = of("browser", "cpu_ms_per_step");
    let baseline_cpu = of("baseline", "cpu_ms_per_step");
    let medians = browser_cpu["median"].as_f64().zip(baseline_cpu["median"].as_f64());
    let ratio = medians.filter(|(_, b)| *b > 0.0).map(|(a, b)| a / b);
    let extra = medians.map(|(a, b)| a - b);
    Ok(json!({
        "suite": "browser",
        "context": context,
        "repetitions": reps,
        "cold_first_browser_call_ms": of("browser", "cold_navigate_ms"),
        "warm_navigate_and_get_state_ms": of("browser", "warm_navigate_and_get_state_ms"),
        "warm_navigate_ms": of("browser", "warm_navigate_ms"),
        "warm_get_state_ms": of("browser", "warm_get_state_ms"),
        "baseline_step_ms": of("browser", "baseline_step_ms"),
        "cpu_ms_per_step": {
            "browser_run": browser_cpu,
            "terminal_true_baseline_run": baseline_cpu,
            "ratio": ratio,
            "browser_step_beyond_baseline": extra,
        },
        "runs": runs,
        "notes": "Process sandboxes; between conversations the benchmark waits until no Chromium runs. Each browser step also takes a PNG screenshot and stores it in the object store. \
                  Step times are the log's millisecond timestamps; CPU is /proc's 10 ms ticks of halyard, chromium and \
                  nats-server over the whole run (with the children they waited for) divided by three (the pages' server and the shell are not counted); \
                  browser_step_beyond_baseline is what a browser step costs beyond a `terminal true`, averaged over \
                  one cold and two warm steps.",
        "reproduce": "cargo run --release -p halyard-load -- --suite browser (writes load/results/browser.json)",
    }))
}

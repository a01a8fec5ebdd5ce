//! The user's VS Code (issue 32): the first request for a conversation's VS Code, which starts
//! code-server in its sandbox, to the workbench page, cold; the same again warm; and, from the
//! same run, a look at the workspace's files (`GET /conversations/{id}/files?path=`, which also goes
//! through the gateway to the sandbox's executor) as the baseline. Against a real `halyard up`
//! with process sandboxes. Each repetition is a new conversation (a new sandbox, so code-server
//! is cold), deleted after, and the next waits until its code-server is gone. Times are the
//! client's wall clock over what a browser does: ask the API for the link, open it (the proxy's
//! 303 and cookie), follow code-server's redirect to the workspace folder, read the page. CPU
//! is that of Halyard's processes, nats-server and code-server's Node over the cold request. A
//! benchmark reports; it does not assert.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use halyard_tests::{Api, Halyard};
use serde_json::{Value, json};

use crate::browser::{any_process, process_halyard, sandbox_halyard_running};
use crate::record::{Context, spread};
use crate::{KEY, cpu_seconds, cpu_seconds_of_command, cpu_seconds_with_children};

fn code_server_running() -> bool {
    any_process(|_, dir| std::fs::read_to_string(dir.join("cmdline")).is_ok_and(|s| s.contains("code-server")))
}

fn cpu() -> f64 {
    cpu_seconds_with_children("halyard") + cpu_seconds("nats-server") + cpu_seconds_of_command("halyard-code-server")
}

/// What a browser does to show the conversation's VS Code, up to its workbench page.
async fn open_workbench(api: &Api, apps: &str, conv: &str) -> Result<()> {
    let (s, link) = api.get(&format!("/api/v1/conversations/{conv}/vscode")).await;
    ensure!(s == 200, "no VS Code link: {s} {link}");
    let url = reqwest::Url::parse(link["url"].as_str().context("no url")?)?;
    let host = format!("{}:{}", url.host_str().context("no host")?, url.port().context("no port")?);
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build()?;
    let get = |path: String, cookie: Option<String>| {
        let mut req = http.get(format!("http://{apps}{path}")).header("host", &host).header("accept", "text/html");
        if let Some(c) = cookie {
            req = req.header("cookie", c);
        }
        req.timeout(Duration::from_secs(60)).send()
    };
    let opened = get(format!("{}?{}", url.path(), url.query().unwrap_or_default()), None).await?;
    ensure!(opened.status() == 303, "the link did not open: {}", opened.status());
    let cookie = opened.headers()["set-cookie"].to_str()?.split(';').next().unwrap_or_default().to_owned();
    let mut page = get("/".into(), Some(cookie.clone())).await?;
    if page.status().is_redirection() {
        let to = page.headers()["location"].to_str()?.trim_start_matches('.').to_owned();
        page = get(to, Some(cookie)).await?;
    }
    ensure!(page.status() == 200, "no workbench: {}", page.status());
    ensure!(page.text().await?.contains("workbench"), "the page is not the workbench");
    Ok(())
}

async fn once(h: &Halyard) -> Result<Value> {
    let api = h.api(KEY);
    let (conv, _) = api.start_ready(json!({})).await;
    let t = Instant::now();
    let (s, _) = api.get(&format!("/api/v1/conversations/{conv}/files?path=")).await;
    let baseline_ms = t.elapsed().as_secs_f64() * 1000.0;
    ensure!(s == 200, "the files did not answer: {s}");
    let cpu0 = cpu();
    let t = Instant::now();
    open_workbench(&api, &h.apps, &conv).await?;
    let cold_ms = t.elapsed().as_secs_f64() * 1000.0;
    let cpu_cold = cpu() - cpu0;
    let t = Instant::now();
    open_workbench(&api, &h.apps, &conv).await?;
    let warm_ms = t.elapsed().as_secs_f64() * 1000.0;
    api.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{conv}"), None).await;
    let main = h.pid();
    let gone = || !code_server_running() && !sandbox_halyard_running(main);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !gone() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ensure!(gone(), "the deleted sandbox's code-server still runs 30 s later");
    let round = |x: f64| (x * 10.0).round() / 10.0;
    Ok(json!({
        "baseline_files_ms": round(baseline_ms),
        "cold_to_workbench_ms": round(cold_ms),
        "warm_to_workbench_ms": round(warm_ms),
        "cpu_ms_cold": round(cpu_cold * 1000.0),
    }))
}

pub async fn run(reps: usize) -> Result<Value> {
    let context = Context::now();
    let (_llm, h) = process_halyard().await;
    ensure!(!code_server_running(), "a code-server already runs on this machine: its CPU would be counted");
    let mut runs = Vec::new();
    for rep in 0..reps {
        let run = once(&h).await?;
        eprintln!("rep {rep}: {run}");
        runs.push(run);
    }
    let of = |key: &str| spread(runs.iter().filter_map(|r| r[key].as_f64()));
    let (warm, base) = (of("warm_to_workbench_ms"), of("baseline_files_ms"));
    let ratio = warm["median"].as_f64().zip(base["median"].as_f64()).filter(|(_, b)| *b > 0.0).map(|(a, b)| a / b);
    Ok(json!({
        "suite": "vscode",
        "context": context,
        "repetitions": reps,
        "cold_to_workbench_ms": of("cold_to_workbench_ms"),
        "warm_to_workbench_ms": warm,
        "baseline_files_ms": base,
        "warm_to_baseline_ratio": ratio,
        "cpu_ms_cold": of("cpu_ms_cold"),
        "runs": runs,
        "notes": "Process sandboxes, code-server 4.139.1 from /opt/halyard-code-server. Cold: the API's link (which starts \
                  code-server and waits until it listens), the proxy's 303, code-server's redirect to the folder, the \
                  workbench page; warm: the same with code-server running. The page only: the workbench's scripts \
                  (about 10 MB) and its WebSocket are the browser's, measured by nothing here. CPU is /proc's 10 ms \
                  ticks of halyard (with reaped children), nats-server and code-server's processes (by command line: \
                  Node names itself MainThread) over the cold request.",
        "reproduce": "cargo run --release -p halyard-load -- --suite vscode (writes load/results/vscode.json)",
    }))
}

//! OpenHands' Runtime API (issue 56): a start from the warm pool against a cold one, in one
//! `halyard up` serving the Runtime API, every repetition measuring both in turns:
//!
//! - `cold`: `POST /start` of an image no pool keeps (`halyard-load-cold:1`, a second tag of the
//!   base image: the same bits) until `GET /sessions/{id}` says `running` (its agent server, a
//!   Python HTTP server, listens);
//! - `warm`: the same for the pooled image (`HALYARD_RUNTIME_API_POOL`), once the pool has a
//!   runtime of the start's shape listening;
//! - the machine's CPU per start (all processes: dockerd and containerd do most of the work).
//!
//! The requests are OpenHands' shapes. Figures are each repetition's median over its starts
//! (three; one in a smoke run); the ratio is warm over cold.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use halyard_tests::docker::docker;
use halyard_tests::{Halyard, HalyardOptions, ScriptedLlm};
use serde_json::{Value, json};

use crate::record::{Context, spread};

const POOLED: &str = "halyard-base:bookworm";
const COLD: &str = "halyard-load-cold:1";
const SERVER: &str = "import http.server as h\nclass H(h.BaseHTTPRequestHandler):\n    def do_GET(self):\n        self.send_response(200)\n        self.end_headers()\n    def log_message(self, *a): pass\nh.HTTPServer(('0.0.0.0', 60000), H).serve_forever()\n";

struct Api {
    http: reqwest::Client,
    url: String,
    key: String,
}

impl Api {
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Result<Value> {
        let mut req = self.http.request(method, format!("{}{path}", self.url)).header("X-API-Key", &self.key);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let res = req.send().await?;
        let status = res.status();
        let v: Value = res.json().await.unwrap_or(Value::Null);
        ensure!(status.is_success(), "{path}: {status} {v}");
        Ok(v)
    }
}

/// One start of `image` until it runs, then stopped: (ms to running, machine CPU s, warm).
async fn once(api: &Api, image: &str) -> Result<(f64, f64)> {
    let session = uuid::Uuid::new_v4().simple().to_string();
    // As OpenHands' remote sandbox service sends it.
    let body = json!({
        "image": image, "command": ["python3", "-c", SERVER], "working_dir": "/workspace",
        "environment": {"WORKER_1": "12000", "WORKER_2": "12001"}, "session_id": session,
        "resource_factor": 1, "run_as_user": 10001, "run_as_group": 10001, "fs_group": 10001,
    });
    let cpu0 = crate::gvisor::busy_seconds();
    let t = Instant::now();
    let started = api.call(reqwest::Method::POST, "/start", Some(body)).await?;
    let mut status = started["status"].as_str().unwrap_or_default().to_owned();
    while status != "running" {
        ensure!(t.elapsed() < Duration::from_secs(60), "{image} did not run: {status}");
        tokio::time::sleep(Duration::from_millis(5)).await;
        let now = api.call(reqwest::Method::GET, &format!("/sessions/{session}"), None).await?;
        status = now["status"].as_str().unwrap_or_default().to_owned();
    }
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    let cpu = crate::gvisor::busy_seconds() - cpu0;
    api.call(reqwest::Method::POST, "/stop", Some(json!({"runtime_id": started["runtime_id"]}))).await?;
    Ok((ms, cpu))
}

/// Waits until the deployment has a warm runtime (one container, no session) listening.
async fn pool_ready(deployment: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        ensure!(Instant::now() < deadline, "the pool did not fill");
        let filter = format!("label=dev.halyard.deployment={deployment}");
        let ports = docker(&["ps", "--filter", &filter, "--filter", "label=dev.halyard.runtime", "--format", "{{.Ports}}"]);
        let listening = ports.lines().count() == 1
            && ports.split(", ").filter(|p| p.ends_with("->60000/tcp")).any(|p| answers(p.trim_end_matches("->60000/tcp")));
        if listening {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Something answers HTTP at `addr` (Docker's proxy accepts connections before it does).
fn answers(addr: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut head = [0u8; 7];
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").is_ok() && s.read_exact(&mut head).is_ok() && head == *b"HTTP/1."
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

pub async fn run(reps: usize) -> Result<Value> {
    let context = Context::now();
    docker(&["tag", POOLED, COLD]);
    let (key, entry) = halyard_sandbox::runtime_api::new_key("load");
    let port = halyard_tests::oidc::free_port();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(
        HalyardOptions::new(&llm.base_url)
            .set("HALYARD_LOG", "warn")
            .set("HALYARD_SANDBOX", "docker")
            .set("HALYARD_SANDBOX_POOL_SIZE", "0")
            .set("HALYARD_RUNTIME_API_ADDR", &format!("127.0.0.1:{port}"))
            .set("HALYARD_RUNTIME_API_KEYS", &entry)
            .set("HALYARD_RUNTIME_API_POOL", &format!("{POOLED}=1")),
    );
    let api = Api { http: reqwest::Client::new(), url: format!("http://127.0.0.1:{port}"), key };
    let deployment = h.deployment();
    // The supervisor binds the Runtime API once its engine is set up, after the gateway answers.
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        ensure!(Instant::now() < deadline, "the Runtime API did not listen: {}", h.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Warm-up: page cache, and the pool learns the start's shape.
    once(&api, COLD).await?;
    once(&api, POOLED).await.context("the pooled image's first start")?;
    let starts = crate::scaled(3, 1);
    let mut runs = Vec::new();
    for rep in 0..reps {
        let mut run = serde_json::Map::new();
        for (name, image) in [("cold", COLD), ("warm", POOLED)] {
            let (mut ms, mut cpu) = (Vec::new(), Vec::new());
            for _ in 0..starts {
                pool_ready(&deployment).await?;
                let (m, c) = once(&api, image).await?;
                ms.push((m * 10.0).round() / 10.0);
                cpu.push((c * 1000.0).round() / 1000.0);
            }
            run.insert(
                name.to_owned(),
                json!({"start_to_running_ms": median(&ms), "machine_cpu_s_per_start": median(&cpu), "samples_ms": ms, "samples_cpu_s": cpu}),
            );
        }
        let ratio = |k: &str| {
            let (w, c) = (run["warm"][k].as_f64().unwrap_or(0.0), run["cold"][k].as_f64().unwrap_or(0.0));
            if c > 0.0 { (w / c * 1000.0).round() / 1000.0 } else { 0.0 }
        };
        let ratios = json!({"start_to_running": ratio("start_to_running_ms"), "machine_cpu_per_start": ratio("machine_cpu_s_per_start")});
        run.insert("warm_over_cold".into(), ratios);
        let run = Value::Object(run);
        eprintln!("runtime_api rep {rep}: {run}");
        runs.push(run);
    }
    drop(h);
    docker(&["rmi", COLD]);
    let figure = |path: &[&str]| spread(runs.iter().filter_map(|r| path.iter().try_fold(r, |v, k| v.get(*k)).and_then(Value::as_f64)));
    let mut figures = serde_json::Map::new();
    for kind in ["cold", "warm"] {
        for k in ["start_to_running_ms", "machine_cpu_s_per_start"] {
            figures.insert(format!("{kind}.{k}"), figure(&[kind, k]));
        }
    }
    for k in ["start_to_running", "machine_cpu_per_start"] {
        figures.insert(format!("warm_over_cold.{k}"), figure(&["warm_over_cold", k]));
    }
    Ok(json!({
        "suite": "runtime_api",
        "context": context,
        "repetitions": reps,
        "starts_per_repetition": starts,
        "target": "a warm-pool start is faster than a cold one (warm_over_cold.start_to_running below 1)",
        "figures": figures,
        "runs": runs,
    }))
}

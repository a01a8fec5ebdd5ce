//! The Docker sandbox benchmark (issue 3), one run: the raw engine baseline — `create` +
//! `start` through the Docker API of the same runtime image with the same container settings
//! Halyard uses (ports, volume, limits) — then Halyard's cold start (no warm pool) and warm-pool
//! start, each `POST /conversations` to start task READY. p50 and p99 over `n` starts each.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use halyard_platform::config::SandboxSpec;
use halyard_sandbox::docker::{self, ContainerPlan, Engine, Naming};
use halyard_tests::{Api, Halyard, HalyardOptions, ScriptedLlm};
use serde_json::{Value, json};

const KEY: &str = "alice-secret-key";

fn summary(mut ms: Vec<f64>) -> Value {
    ms.sort_by(f64::total_cmp);
    let p = |q: f64| crate::percentile(&ms, q);
    json!({"samples": ms.len(), "p50_ms": (p(50.0) * 10.0).round() / 10.0, "p99_ms": (p(99.0) * 10.0).round() / 10.0})
}

fn options(llm: &str, pool: usize) -> HalyardOptions {
    let mut opts = HalyardOptions::new(llm)
        .set("HALYARD_LOG", "warn")
        .set("HALYARD_RATE_LIMIT_PER_MINUTE", "0")
        .set("HALYARD_SANDBOX", "docker")
        .set("HALYARD_SANDBOX_POOL_SIZE", &pool.to_string());
    opts.env.insert("HALYARD_LLM_STREAM".into(), "false".into());
    opts
}

/// POST /conversations to READY, then deletes the conversation and waits until its sandbox is
/// gone, so the next start runs on a quiet engine.
async fn timed_start(api: &Api) -> Result<(f64, bool)> {
    let t0 = Instant::now();
    let (status, task) = api.post("/api/v1/conversations", json!({})).await;
    anyhow::ensure!(status == 202, "start failed: {task}");
    let id = task["id"].as_str().context("task id")?.to_owned();
    let task = loop {
        let (_, t) = api.get(&format!("/api/v1/start-tasks/{id}")).await;
        match t["status"].as_str() {
            Some("READY") => break t,
            Some("ERROR") => anyhow::bail!("start failed: {t}"),
            _ => tokio::time::sleep(Duration::from_millis(1)).await,
        }
    };
    let elapsed = t0.elapsed().as_secs_f64() * 1000.0;
    let conv = task["conversation_id"].as_str().context("conversation")?;
    let sandbox = task["sandbox_id"].as_str().context("sandbox")?;
    api.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{conv}"), None).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while api.get(&format!("/api/v1/sandboxes/{sandbox}")).await.0 != 404 {
        anyhow::ensure!(Instant::now() < deadline, "sandbox {sandbox} was not deleted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok((elapsed, task["from_pool"] == true))
}

async fn specs(api: &Api) -> Value {
    api.get("/api/v1/sandbox-specs").await.1["items"][0].clone()
}

pub async fn run(n: usize) -> Result<Value> {
    let llm = ScriptedLlm::start().await;

    // Halyard cold starts (also builds or reuses the runtime image the baseline uses).
    let cold_h = Halyard::start(options(&llm.base_url, 0));
    let api = cold_h.api(KEY);
    let deadline = Instant::now() + Duration::from_secs(300);
    let image = loop {
        if let Some(i) = specs(&api).await["runtime_image"]["image"].as_str() {
            break i.to_owned();
        }
        anyhow::ensure!(Instant::now() < deadline, "no runtime image");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let _ = timed_start(&api).await?; // warm-up: page cache, first connections
    let mut cold = Vec::new();
    for _ in 0..n {
        cold.push(timed_start(&api).await?.0);
    }
    drop(cold_h);
    eprintln!("cold: {}", summary(cold.clone()));

    // Baseline: the engine alone, same image and container settings.
    let engine = Engine {
        docker: docker::connect("unix:///var/run/docker.sock").await?,
        naming: Naming { deployment: format!("bench{}", std::process::id()) },
        publish_host: std::net::Ipv4Addr::LOCALHOST.into(),
        overlays: std::env::temp_dir(),
        gvisor_runtime: "runsc".into(),
    };
    let spec = SandboxSpec::default();
    // The same network a sandbox of the default spec joins.
    let network = engine.ensure_network(halyard_sandbox::egress::Egress::Open).await?;
    let mut raw = Vec::new();
    for i in 0..=n {
        let id = format!("raw-{i}");
        let plan = ContainerPlan {
            name: engine.naming.name(&id),
            volume: engine.naming.volume(&id),
            image: &image,
            spec: &spec,
            labels: docker::labels(&engine.naming, "default", &id, None, None, false),
            output_cap: 30_000,
            browser_idle_secs: 600,
            vscode_idle_secs: 600,
            lower: None,
        };
        engine.ensure_volume(&plan.volume, &plan.labels, None).await?;
        let t0 = Instant::now();
        let container = engine.create(&plan).await?;
        engine.start(&container).await?;
        let elapsed = t0.elapsed().as_secs_f64() * 1000.0;
        if i > 0 {
            raw.push(elapsed);
        }
        engine.remove(&container).await?;
        engine.remove_volume(&plan.volume).await?;
    }
    let _ = engine.docker.remove_network(&network).await;
    eprintln!("raw: {}", summary(raw.clone()));

    // Warm-pool starts: each taken from a full pool.
    let warm_h = Halyard::start(options(&llm.base_url, 2));
    let api = warm_h.api(KEY);
    let mut warm = Vec::new();
    let mut from_pool = 0;
    for i in 0..=n {
        let deadline = Instant::now() + Duration::from_secs(120);
        while specs(&api).await["pool"]["ready"].as_u64() != Some(2) {
            anyhow::ensure!(Instant::now() < deadline, "the pool did not refill");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (t, pooled) = timed_start(&api).await?;
        if i > 0 {
            warm.push(t);
            from_pool += usize::from(pooled);
        }
    }
    drop(warm_h);
    eprintln!("warm: {}", summary(warm.clone()));

    let (raw_s, cold_s, warm_s) = (summary(raw.clone()), summary(cold.clone()), summary(warm.clone()));
    let ratio = |a: &Value, b: &Value, k: &str| (a[k].as_f64().unwrap_or(0.0) / b[k].as_f64().unwrap_or(1.0) * 100.0).round() / 100.0;
    Ok(json!({
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "image": image,
        "raw_create_start": raw_s,
        "halyard_cold_start_to_ready": cold_s,
        "halyard_warm_pool_start_to_ready": warm_s,
        "warm_starts_from_pool": from_pool,
        "cold_over_raw_p50": ratio(&cold_s, &raw_s, "p50_ms"),
        "cold_over_raw_p99": ratio(&cold_s, &raw_s, "p99_ms"),
        "targets": {"cold_over_raw": 1.5, "warm_p50_ms": 100.0},
    }))
}

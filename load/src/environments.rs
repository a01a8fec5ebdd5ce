//! Environments (issue 51): start → ready for a repository whose setup does real work, cold
//! (setup runs), from the environment's snapshot, and from its warm pool, against an empty
//! sandbox's start in the same run; and what a snapshot costs on disk. Docker sandboxes (a
//! snapshot is an image; pools are containers), a real `halyard up` (release build).
//!
//! The repository's setup installs packages from a local index this benchmark serves: it
//! downloads every package its `requirements.lock` names (tarballs of generated Python modules)
//! over HTTP, unpacks them under `vendor/` and byte-compiles them: about 20 s of work on the
//! machine this was written on (each run records how long it took: `setup_s`).
//!
//! Each repetition, as a client sees it (`POST /conversations` to start task READY):
//! - `empty_ms`: a start with no repository and no environment;
//! - `cold_ms`: with the environment after its snapshot was deleted: clone, setup, snapshot;
//! - `snapshot_ms`: from the snapshot: restore, fetch, `post_start`; with its phases
//!   (`restore_ms`, `fetch_ms`) from the start task's records on the bus;
//! - `pool_ms`: the environment's pool sized 1 and filled, then a start that takes it (with its
//!   phases: the sandbox taken, the fetch, setup's check of its key and `post_start`, hooks,
//!   skills);
//! - CPU per start (halyard and nats-server; dockerd and containerd, which copy the volume);
//! - disk: the snapshot's own bytes (its image's layer and its workspace), and what a
//!   conversation started from it writes of its own (its overlay volume's upper directory).
//!
//! Targets: from a snapshot within 1.5 x (an empty start + the fetch), from the pool under 100 ms.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use futures::StreamExt;
use halyard_protocol::Envelope;
use halyard_protocol::system::SystemRecord;
use halyard_tests::{Api, Halyard, HalyardOptions, ScriptedLlm};
use serde_json::{Value, json};

use crate::KEY;
use crate::record::{Context, spread};

/// Each start task's records: (status, when), in order.
type Phases = Arc<Mutex<HashMap<String, Vec<(String, i64)>>>>;

/// The package index: `name.tar` for every package, each `modules` generated modules.
fn index(packages: usize, modules: usize) -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    for p in 0..packages {
        let name = format!("pkg{p:03}");
        let file = std::fs::File::create(dir.path().join(format!("{name}.tar")))?;
        let mut tar = tar::Builder::new(file);
        for m in 0..modules {
            // Code that takes the compiler some work: functions, loops, literals.
            let body: String = (0..40)
                .map(|f| format!("def f{f}(x):\n    total = 0\n    for i in range(x):\n        total += i * {f} + {m}\n    return {{'n': total, 'm': '{name}.{m}'}}\n\n"))
                .collect();
            let mut header = tar::Header::new_gnu();
            header.set_size(body.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            tar.append_data(&mut header, format!("{name}/mod{m:03}.py"), body.as_bytes())?;
        }
        tar.finish()?;
    }
    Ok(dir)
}

const INSTALL: &str = r#"import os, sys, tarfile, urllib.request, compileall
index = os.environ["INDEX_URL"]
names = [l.strip() for l in open("requirements.lock") if l.strip()]
os.makedirs("vendor", exist_ok=True)
for n in names:
    with urllib.request.urlopen(f"{index}/{n}.tar") as r, open(f"/tmp/{n}.tar", "wb") as f:
        f.write(r.read())
    with tarfile.open(f"/tmp/{n}.tar") as t:
        t.extractall("vendor")
    os.remove(f"/tmp/{n}.tar")
ok = compileall.compile_dir("vendor", quiet=1, workers=1)
print(f"installed {len(names)} packages")
sys.exit(0 if ok else 1)
"#;

/// Serves `dir`'s files on `addr`: the package index.
async fn serve_index(dir: std::path::PathBuf, addr: &str) -> Result<String> {
    let listener = tokio::net::TcpListener::bind(addr).await.context("bind the package index")?;
    let port = listener.local_addr()?.port();
    let app = axum::Router::new().route(
        "/{file}",
        axum::routing::get(move |axum::extract::Path(file): axum::extract::Path<String>| {
            let dir = dir.clone();
            async move {
                if file.contains('/') || file.contains("..") {
                    return Err(axum::http::StatusCode::NOT_FOUND);
                }
                tokio::fs::read(dir.join(file)).await.map_err(|_| axum::http::StatusCode::NOT_FOUND)
            }
        }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(port.to_string())
}

/// Follows every start task's records (as the admin role), with their times.
async fn follow_phases(h: &Halyard) -> Result<Phases> {
    let nats = h.nats_client("admin").await;
    let mut sub = nats.subscribe("halyard.sys.task.>").await?;
    let phases: Phases = Arc::default();
    let out = phases.clone();
    tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            if let Ok(Envelope { payload: SystemRecord::StartTask(u), time_ms, .. }) =
                halyard_protocol::decode::<SystemRecord>(&msg.payload)
            {
                out.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(u.task_id.to_string())
                    .or_default()
                    .push((u.status.as_str().into(), time_ms));
            }
        }
    });
    Ok(phases)
}

/// Milliseconds from `from`'s record to the next phase's.
fn phase_ms(phases: &Phases, task: &str, from: &str) -> Option<f64> {
    let all = phases.lock().ok()?.get(task)?.clone();
    let i = all.iter().position(|(s, _)| s == from)?;
    Some((all.get(i + 1)?.1 - all[i].1) as f64)
}

/// One start to READY: (ms, task); the CPU it took is read around it.
async fn start(api: &Api, body: Value) -> Result<(f64, Value)> {
    let t = Instant::now();
    let (s, task) = api.post("/api/v1/conversations", body).await;
    ensure!(s == 202, "start refused: {task}");
    let id = task["id"].as_str().context("task id")?.to_owned();
    crate::until_ready(api, &id).await?;
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    Ok((ms, api.get(&format!("/api/v1/start-tasks/{id}")).await.1))
}

/// CPU seconds now: [halyard and nats-server, dockerd and containerd].
fn cpu(h: &Halyard) -> [f64; 2] {
    let [nats, halyard] = crate::cpu_of_tree(h.pid());
    [nats + halyard, crate::cpu_seconds("dockerd") + crate::cpu_seconds("containerd")]
}

fn round(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

async fn delete(api: &Api, task: &Value) {
    if let Some(conv) = task["conversation_id"].as_str() {
        api.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{conv}"), None).await;
    }
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &std::path::Path) -> u64 {
    let out = std::process::Command::new("du").arg("-sb").arg(dir).output();
    out.ok().and_then(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().next()?.parse().ok()).unwrap_or(0)
}

/// Waits until the listed snapshot's pool has `n` ready.
async fn pool_ready(api: &Api, n: u64) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, list) = api.get("/api/v1/environments/snapshots").await;
        if list["items"][0]["pool_ready"].as_u64() == Some(n) {
            return Ok(());
        }
        ensure!(Instant::now() < deadline, "the pool did not reach {n}: {list}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One repetition.
async fn once(h: &Halyard, api: &Api, phases: &Phases, env: &Value, repo: &str) -> Result<Value> {
    let with_env = json!({"message": "hi", "environment": "bench", "repository": {"url": repo}});
    crate::record::settle(Duration::from_secs(20));
    let c0 = cpu(h);
    let (empty_ms, empty) = start(api, json!({"message": "hi"})).await?;
    let c1 = cpu(h);
    delete(api, &empty).await;

    // Cold: no snapshot of the family.
    if let Some(id) = api.get("/api/v1/environments/snapshots").await.1["items"][0]["id"].as_str() {
        api.call(reqwest::Method::DELETE, &format!("/api/v1/environments/snapshots/{id}"), None).await;
    }
    crate::record::settle(Duration::from_secs(20));
    let (cold_ms, cold) = start(api, with_env.clone()).await?;
    ensure!(cold["detail"].as_str().unwrap_or_default().contains("kept"), "no snapshot kept: {cold}");
    delete(api, &cold).await;
    let snap = api.get("/api/v1/environments/snapshots").await.1["items"][0].clone();

    crate::record::settle(Duration::from_secs(20));
    let c2 = cpu(h);
    let (snapshot_ms, restored) = start(api, with_env.clone()).await?;
    let c3 = cpu(h);
    ensure!(restored["snapshot"] == snap["id"], "not started from the snapshot: {restored}");
    let task = restored["id"].as_str().unwrap_or_default();
    let (restore_ms, fetch_ms) = (phase_ms(phases, task, "RESTORING_SNAPSHOT"), phase_ms(phases, task, "PREPARING_REPOSITORY"));
    let sandbox = restored["sandbox_id"].as_str().unwrap_or_default();
    // Its workspace is an overlay on the snapshot's: its own bytes are the upper directory's.
    let volume = format!("halyard-{}-{sandbox}-ws", &h.deployment()[..12]);
    let per_conversation = dir_bytes(&h.data.path().join("snapshots/overlays").join(&volume).join("upper"));
    delete(api, &restored).await;

    // The pool, sized 1 and filled, then taken.
    let mut pooled = env.clone();
    pooled["pool_size"] = json!(1);
    api.call(reqwest::Method::PUT, "/api/v1/environments/bench", Some(pooled)).await;
    pool_ready(api, 1).await?;
    crate::record::settle(Duration::from_secs(20));
    let c4 = cpu(h);
    let (pool_ms, from_pool) = start(api, with_env.clone()).await?;
    let c5 = cpu(h);
    ensure!(from_pool["from_pool"] == true, "not taken from the pool: {from_pool}");
    let pool_task = from_pool["id"].as_str().unwrap_or_default();
    let pool_phases = json!({
        "sandbox": phase_ms(phases, pool_task, "RESTORING_SNAPSHOT"),
        "fetch": phase_ms(phases, pool_task, "PREPARING_REPOSITORY"),
        "setup": phase_ms(phases, pool_task, "RUNNING_SETUP_SCRIPT"),
        "hooks": phase_ms(phases, pool_task, "SETTING_UP_GIT_HOOKS"),
        "skills": phase_ms(phases, pool_task, "SETTING_UP_SKILLS"),
    });
    api.call(reqwest::Method::PUT, "/api/v1/environments/bench", Some(env.clone())).await;
    delete(api, &from_pool).await;
    pool_ready(api, 0).await?;

    let fetch = fetch_ms.unwrap_or(0.0);
    Ok(json!({
        "empty_ms": round(empty_ms),
        "cold_ms": round(cold_ms),
        "snapshot_ms": round(snapshot_ms),
        "pool_ms": round(pool_ms),
        "phases_ms": {"restore": restore_ms, "fetch": fetch_ms},
        "pool_phases_ms": pool_phases,
        "setup_s": snap["setup_secs"],
        "snapshot_over_empty_plus_fetch": ((snapshot_ms / (empty_ms + fetch)) * 1000.0).round() / 1000.0,
        "pool_over_empty": ((pool_ms / empty_ms) * 1000.0).round() / 1000.0,
        "cpu_ms": {
            "empty": {"halyard_nats": round((c1[0] - c0[0]) * 1000.0), "docker": round((c1[1] - c0[1]) * 1000.0)},
            "snapshot": {"halyard_nats": round((c3[0] - c2[0]) * 1000.0), "docker": round((c3[1] - c2[1]) * 1000.0)},
            "pool": {"halyard_nats": round((c5[0] - c4[0]) * 1000.0), "docker": round((c5[1] - c4[1]) * 1000.0)},
        },
        "disk_bytes": {"snapshot_image": snap["size_bytes"], "per_conversation_volume": per_conversation},
    }))
}

pub async fn run(reps: usize) -> Result<Value> {
    let context = Context::now();
    let (packages, modules) = crate::scaled((60, 200), (3, 10));
    let index_dir = index(packages, modules)?;
    let llm = ScriptedLlm::start().await;
    crate::step::script(&llm);
    let repos = tempfile::tempdir()?;
    let lock: String = (0..packages).map(|p| format!("pkg{p:03}\n")).collect();
    halyard_tests::bare_repository(repos.path(), "app.git", ("requirements.lock", &lock));
    let src = repos.path().join("app.git.src");
    std::fs::write(src.join("install.py"), INSTALL)?;
    halyard_tests::git(&src, &["add", "."]);
    halyard_tests::git(&src, &["commit", "-qm", "install"]);
    halyard_tests::git(&src, &["push", "-q", repos.path().join("app.git").to_str().context("path")?, "main"]);
    const TOKEN: &str = "ghp_bench-environments-token";
    let server = halyard_tests::GitServer::start(repos.path().to_path_buf(), "x-access-token", TOKEN).await;
    let opts = HalyardOptions::new(&llm.base_url)
        .set("HALYARD_LOG", "warn")
        .set("HALYARD_RATE_LIMIT_PER_MINUTE", "0")
        .set("HALYARD_SANDBOX", "docker")
        .set("HALYARD_SANDBOX_POOL_SIZE", "0")
        .set("HALYARD_GIT_API_ALLOW", "loopback");
    let h = Halyard::start(opts);
    let api = h.api(KEY);
    let provider = json!({"kind": "generic", "host": server.base.trim_start_matches("http://"), "token": TOKEN});
    api.call(reqwest::Method::PUT, "/api/v1/git-providers/local", Some(provider)).await;
    // The index, where the sandboxes' network reaches the host.
    let network = format!("halyard-{}-net-open", &h.deployment()[..12]);
    let inspect = || {
        std::process::Command::new("docker")
            .args(["network", "inspect", &network, "-f", "{{(index .IPAM.Config 0).Gateway}}"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    // (The supervisor makes it once it runs, which may be after the gateway answers.)
    let deadline = Instant::now() + Duration::from_secs(60);
    let gateway = loop {
        if let Some(g) = inspect() {
            break g;
        }
        ensure!(Instant::now() < deadline, "the sandboxes' network {network} was not made");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let port = serve_index(index_dir.path().to_path_buf(), &format!("{gateway}:0")).await?;
    let env = json!({
        "setup": ["python3 install.py"],
        "post_start": ["test -d vendor"],
        "env": {"INDEX_URL": format!("http://{gateway}:{port}")},
        "cache_key": ["requirements.lock"],
    });
    let (s, v) = api.call(reqwest::Method::PUT, "/api/v1/environments/bench", Some(env.clone())).await;
    ensure!(s == 201 || s == 200, "environment refused: {v}");
    let phases = follow_phases(&h).await?;
    let repo = format!("{}/app.git", server.base);
    let mut runs = Vec::new();
    for rep in 0..reps {
        let r = once(&h, &api, &phases, &env, &repo).await?;
        eprintln!("environments rep {rep}: {r}");
        runs.push(r);
    }
    let figures = crate::record::figures(&runs);
    let median = |k: &str| figures[k]["median"].as_f64();
    Ok(json!({
        "suite": "environments",
        "context": context,
        "repetitions": reps,
        "work": {"packages": packages, "modules_per_package": modules},
        "figures": figures,
        "target": {"snapshot_over_empty_plus_fetch": 1.5, "pool_ms": 100.0},
        "meets_target": {
            "snapshot": median("snapshot_over_empty_plus_fetch").map(|r| r <= 1.5),
            "pool": median("pool_ms").map(|m| m < 100.0),
        },
        "spread_of_setup_s": spread(runs.iter().filter_map(|r| r["setup_s"].as_f64())),
        "runs": runs,
        "reproduce": "cargo run --release -p halyard-load -- --suite environments (writes load/results/environments.json)",
    }))
}

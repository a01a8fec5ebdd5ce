//! Capacity across hosts (issue 52): 200 starts against three process-sandbox hosts of ten
//! slots each, from five users who each send their 40 at once, one user after another. Each
//! started conversation holds its sandbox for a random time (0.2 to 2 s, the same sequence in
//! every repetition) and the benchmark then deletes it, freeing a slot. Measured per repetition:
//! - every start served (READY, none refused or failed);
//! - `handoff_ms`: from a slot freeing (the deleted sandbox's `DELETED` record) to the next
//!   start's sandbox `RUNNING` on that host (target p50 under 50 ms);
//! - `fairness`: Jain's index over the starts each user was served, among those that had to
//!   wait, while every user still had some waiting (target at least 0.95; 1 is an even share);
//! - `wait_ms`: from the start's POST to its READY (p50, p99);
//! - CPU per start (nats-server, Halyard's processes with their sandboxes), and by part (the
//!   sandbox hosts, each other service, nats-server).
//!
//! The baseline, in the same invocation: the same starts and runs against the same three hosts
//! without slots, paced by the client as a client had to be when a full deployment refused
//! (at most 30 under way, the next sent when one's sandbox is deleted, in the order submitted).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use futures::StreamExt;
use halyard_protocol::system::{SandboxStatus, StartTaskStatus, SystemRecord};
use halyard_tests::{Api, Halyard, HalyardOptions, NatsServer, ScriptedLlm};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::record::{Context, spread};

const USERS: usize = 5;
const HOSTS: usize = 3;

/// One deployment: a nats-server, three sandbox hosts and the other services. (Fields drop in
/// order: the services stop while their nats-server still answers, which it must for them to
/// stop at once.)
struct Deployment {
    procs: Vec<Halyard>,
    apis: Vec<Api>,
    nats: NatsServer,
}

fn deployment(llm: &ScriptedLlm, slots: usize) -> Deployment {
    let nats = NatsServer::start();
    let keys: Vec<String> = (0..USERS).map(|u| format!("user{u}:user{u}-key")).collect();
    let service = |name: &str, uid_base: u32, publish: &str| {
        let mut opts = HalyardOptions::new(&llm.base_url)
            .serve(&nats.url, &[name])
            .set("HALYARD_SECRET", "a-shared-deployment-secret")
            .set("HALYARD_LOG", "warn")
            .set("HALYARD_RATE_LIMIT_PER_MINUTE", "0")
            .set("HALYARD_MAX_STARTING_PER_USER", "0")
            .set("HALYARD_SANDBOX_IDLE_STOP_SECS", "0")
            .set("HALYARD_PROCESS_UID_BASE", &uid_base.to_string())
            .set("HALYARD_SANDBOX_PUBLISH_HOST", publish)
            .set("HALYARD_SANDBOX_HOST_SLOTS", &slots.to_string());
        opts.api_keys = keys.join(",");
        Halyard::start(opts)
    };
    let mut procs: Vec<Halyard> =
        (0..HOSTS).map(|i| service("sandbox", 300_000 + 20_000 * i as u32, &format!("127.0.0.{}", 3 + i))).collect();
    procs.push(service("agent", 0, "127.0.0.1"));
    procs.push(service("conversations", 0, "127.0.0.1"));
    let gateway = service("gateway", 0, "127.0.0.1");
    let apis = (0..USERS).map(|u| gateway.api(&format!("user{u}-key"))).collect();
    procs.push(gateway);
    Deployment { procs, apis, nats }
}

/// The services of a [`Deployment`], in the order of its `procs` after the hosts.
const SERVICES: [&str; 3] = ["agent", "conversations", "gateway"];

impl Deployment {
    /// CPU seconds so far by part: the sandbox hosts (with their sandboxes), each other
    /// service, nats-server. Where a cost that grows with the starts served lives.
    fn cpu_by_part(&self) -> Vec<(&'static str, f64)> {
        let of = |p: &Halyard| crate::cpu_of_tree(p.pid())[1];
        let mut parts = vec![("sandbox_hosts", self.procs[..HOSTS].iter().map(of).sum())];
        parts.extend(SERVICES.iter().zip(&self.procs[HOSTS..]).map(|(name, p)| (*name, of(p))));
        parts.push(("nats_server", crate::cpu_seconds("nats-server")));
        parts
    }
}

/// What the record watcher saw, by receive time.
#[derive(Default)]
struct Seen {
    /// Per host: when its sandboxes were deleted.
    deleted: HashMap<String, Vec<Instant>>,
    /// Sandboxes that came up: (host, when RUNNING, whether it waited in the queue).
    running: Vec<(String, Instant, bool)>,
    queued: std::collections::HashSet<String>,
    /// Every sandbox that waited in the queue.
    waited: std::collections::HashSet<String>,
    /// Start tasks: READY (task id, when), and failures.
    ready: HashMap<String, Instant>,
    failed: Vec<String>,
}

async fn watch(nats_url: String, seen: Arc<Mutex<Seen>>) -> Result<tokio::task::JoinHandle<()>> {
    let client = async_nats::connect(nats_url).await?;
    let mut sub = client.subscribe("halyard.sys.>").await?;
    Ok(tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            let now = Instant::now();
            let Ok(env) = halyard_protocol::decode::<SystemRecord>(&msg.payload) else { continue };
            let mut s = seen.lock().await;
            match env.payload {
                SystemRecord::Sandbox(u) => {
                    let id = u.sandbox_id.to_string();
                    let host = u.host.clone().unwrap_or_default();
                    match u.status {
                        SandboxStatus::Queued => {
                            s.waited.insert(id.clone());
                            s.queued.insert(id);
                        }
                        SandboxStatus::Deleted => s.deleted.entry(host).or_default().push(now),
                        SandboxStatus::Running => {
                            let waited = s.queued.remove(&id);
                            s.running.push((host, now, waited));
                        }
                        _ => {}
                    }
                }
                SystemRecord::StartTask(t) => match t.status {
                    StartTaskStatus::Ready => {
                        s.ready.insert(t.task_id.to_string(), now);
                    }
                    StartTaskStatus::Error | StartTaskStatus::Cancelled => s.failed.push(format!("{}: {:?}", t.task_id, t.detail)),
                    _ => {}
                },
                _ => {}
            }
        }
    }))
}

/// The run lengths, the same in every repetition: a small linear congruential sequence.
fn run_lengths(n: usize) -> Vec<Duration> {
    let mut x: u64 = 0x2545_f491;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            Duration::from_millis(200 + (x >> 33) % 1800)
        })
        .collect()
}

/// Jain's fairness index of `shares`.
fn jain(shares: &[f64]) -> f64 {
    let sum: f64 = shares.iter().sum();
    let squares: f64 = shares.iter().map(|x| x * x).sum();
    if squares == 0.0 { 1.0 } else { sum * sum / (shares.len() as f64 * squares) }
}

/// One repetition: `starts` starts (user by user), each deleted after its run; `paced` keeps at
/// most `slots * HOSTS` under way from the client's side (the baseline).
async fn once(d: &Deployment, starts: usize, slots: usize, paced: bool) -> Result<Value> {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let watcher = watch(d.nats.url.clone(), seen.clone()).await?;
    let lengths = run_lengths(starts);
    let per_user = starts / USERS;
    let order: Vec<usize> = (0..USERS).flat_map(|u| std::iter::repeat_n(u, per_user)).collect();
    let capacity = Arc::new(tokio::sync::Semaphore::new(if paced { slots * HOSTS } else { starts }));
    let cpu0 = d.cpu_by_part();
    let t0 = Instant::now();
    let mut runs = Vec::new();
    for (i, &u) in order.iter().enumerate() {
        let permit = capacity.clone().acquire_owned().await?;
        let api = d.apis[u].clone();
        let (s, task) = api.post("/api/v1/conversations", json!({})).await;
        ensure!(s == 202, "start refused: {task}");
        let id = task["id"].as_str().context("task id")?.to_owned();
        let (seen, length, posted) = (seen.clone(), lengths[i], Instant::now());
        runs.push(tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(600);
            let ready = loop {
                if let Some(at) = seen.lock().await.ready.get(&id).copied() {
                    break at;
                }
                ensure!(Instant::now() < deadline, "start {id} never became READY");
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            tokio::time::sleep(length).await;
            let (_, task) = api.get(&format!("/api/v1/start-tasks/{id}")).await;
            let sandbox = task["sandbox_id"].as_str().context("the task's sandbox")?.to_owned();
            let (s, body) = api.call(reqwest::Method::DELETE, &format!("/api/v1/sandboxes/{sandbox}"), None).await;
            ensure!(s == 202, "delete refused: {body}");
            drop(permit);
            anyhow::Ok((u, ready, (ready - posted).as_secs_f64() * 1000.0, sandbox))
        }));
    }
    let mut served = Vec::new();
    for r in runs {
        served.push(r.await??);
    }
    let wall = t0.elapsed().as_secs_f64();
    // Let the last deletions land before the CPU is read.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let parts: Vec<(&str, f64)> =
        d.cpu_by_part().into_iter().zip(&cpu0).map(|((name, after), (_, before))| (name, after - before)).collect();
    let cpu: f64 = parts.iter().map(|(_, s)| s).sum();
    let per_start = |s: f64| (s * 1000.0 / starts as f64 * 10.0).round() / 10.0;
    let by_part: serde_json::Map<String, Value> = parts.iter().map(|(name, s)| ((*name).to_owned(), json!(per_start(*s)))).collect();
    watcher.abort();
    let s = seen.lock().await;
    ensure!(s.failed.is_empty(), "starts failed: {:?}", s.failed);
    served.sort_by_key(|(_, ready, _, _)| *ready);
    // Fairness among the starts that had to wait (all of them, paced by the client: each one
    // waited there), while every user still had some waiting: up to the first user's last.
    let contended: Vec<usize> =
        served.iter().filter(|(_, _, _, sandbox)| paced || s.waited.contains(sandbox)).map(|(u, _, _, _)| *u).collect();
    let waiting_users: Vec<usize> = (0..USERS).filter(|u| contended.contains(u)).collect();
    let window = waiting_users.iter().filter_map(|u| contended.iter().rposition(|v| v == u)).min().map_or(0, |i| i + 1);
    let shares: Vec<f64> = waiting_users.iter().map(|u| contended[..window].iter().filter(|v| *v == u).count() as f64).collect();
    // A slot freed, and the next start's sandbox up: with the queue, on the host whose slot
    // freed, for the starts that waited; paced by the client, anywhere, for the starts sent
    // after a deletion.
    let handoffs: Vec<f64> = s
        .running
        .iter()
        .filter(|(_, _, waited)| *waited || paced)
        .filter_map(|(host, at, _)| {
            let deletions = s.deleted.iter().filter(|(h, _)| paced || *h == host).flat_map(|(_, d)| d.iter());
            let freed = deletions.filter(|d| *d <= at).max()?;
            Some((*at - *freed).as_secs_f64() * 1000.0)
        })
        .collect();
    let mut waits: Vec<f64> = served.iter().map(|(_, _, w, _)| *w).collect();
    waits.sort_by(f64::total_cmp);
    let p99 = waits.get(((waits.len() as f64 * 0.99) as usize).min(waits.len().saturating_sub(1))).copied();
    Ok(json!({
        "starts": starts,
        "served": served.len(),
        "wall_s": (wall * 100.0).round() / 100.0,
        "handoff_ms": spread(handoffs.iter().copied()),
        "handoffs": handoffs.len(),
        "fairness": (jain(&shares) * 1000.0).round() / 1000.0,
        "fairness_window": window,
        "waited_in_queue": s.waited.len(),
        "shares": shares,
        "wait_ms": {"p50": waits.get(waits.len() / 2), "p99": p99},
        "cpu_ms_per_start": per_start(cpu),
        "cpu_ms_per_start_by_part": by_part,
    }))
}

pub async fn run(reps: usize) -> Result<Value> {
    let context = Context::now();
    let starts = crate::scaled(200, 20);
    // Ten slots a host; two in a smoke run, so that its twenty starts queue too.
    let slots = crate::scaled(10, 2);
    let llm = ScriptedLlm::start().await;
    let mut results = serde_json::Map::new();
    for (name, host_slots, paced) in [("queued", slots, false), ("baseline_client_paced", 0, true)] {
        let d = deployment(&llm, host_slots);
        let mut runs = Vec::new();
        for rep in 0..reps {
            crate::record::settle(Duration::from_secs(20));
            let r = once(&d, starts, slots, paced).await?;
            eprintln!("queue suite, {name}, repetition {rep}: {r}");
            runs.push(r);
        }
        let of = |f: &dyn Fn(&Value) -> Option<f64>| spread(runs.iter().filter_map(f));
        results.insert(
            name.into(),
            json!({
                "handoff_p50_ms": of(&|r| r["handoff_ms"]["median"].as_f64()),
                "fairness": of(&|r| r["fairness"].as_f64()),
                "wait_p50_ms": of(&|r| r["wait_ms"]["p50"].as_f64()),
                "wait_p99_ms": of(&|r| r["wait_ms"]["p99"].as_f64()),
                "cpu_ms_per_start": of(&|r| r["cpu_ms_per_start"].as_f64()),
                "wall_s": of(&|r| r["wall_s"].as_f64()),
                "runs": runs,
            }),
        );
    }
    let median = |mode: &str, key: &str| results[mode][key]["median"].as_f64();
    let ratio = |key: &str| median("queued", key).zip(median("baseline_client_paced", key)).map(|(a, b)| (a / b * 1000.0).round() / 1000.0);
    Ok(json!({
        "suite": "queue",
        "context": context,
        "repetitions": reps,
        "setup": {"hosts": HOSTS, "slots_per_host": slots, "users": USERS, "starts": starts, "run_ms": [200, 2000],
                  "arrival": "each user's starts at once, one user after another"},
        "results": results,
        "over_baseline": {"cpu_ms_per_start": ratio("cpu_ms_per_start"), "wait_p50_ms": ratio("wait_p50_ms"), "wall_s": ratio("wall_s")},
        "targets": {"handoff_p50_ms": 50.0, "fairness": 0.95},
        "meets_targets": {
            "handoff": median("queued", "handoff_p50_ms").map(|m| m < 50.0),
            "fairness": median("queued", "fairness").map(|m| m >= 0.95),
        },
        "reproduce": "cargo run --release -p halyard-load -- --suite queue (writes load/results/queue.json)",
    }))
}

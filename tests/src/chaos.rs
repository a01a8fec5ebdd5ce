//! The chaos run (issue 13): scripted conversations and webhook deliveries through a cluster
//! (three NATS nodes, two replicas of every service but the sandbox supervisor, each its own
//! process) while one process at a time, chosen at random, is killed with SIGKILL and started
//! again: an agent runner, a gateway, the sandbox supervisor, a dispatcher, a NATS node.
//!
//! At the end every conversation must have finished with a contiguous log, every webhook
//! receiver must have every event of its subscription's conversations (in each conversation's
//! order, the other user's none), and the processes' `/metrics` must agree with what a calm
//! run after the chaos did. `tests/tests/chaos.rs` runs a short form; `load --suite chaos` a
//! long one, and with no kills at all, the throughput of the cluster with one and with two
//! replicas of every service. Everything it does and finds is printed with the time since the
//! start.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::assert_log_is_contiguous;
use crate::{Halyard, HalyardOptions, NatsCluster, Receiver, Reply, ScriptedLlm};

const USERS: [(&str, &str); 2] = [("alice", "alice-secret-key"), ("bob", "bob-secret-key")];

/// How big a run.
#[derive(Clone, Debug)]
pub struct ChaosOptions {
    pub conversations: usize,
    /// Each kind of process is killed this many times (0: none; the conversations then all
    /// start at once, for a throughput figure).
    pub rounds: usize,
    /// Replicas of every service but the sandbox supervisor.
    pub replicas: usize,
    /// Tool calls per conversation before it finishes.
    pub steps: usize,
    /// The scripted LLM's think time per answer.
    pub think: Duration,
    /// How long a killed process stays down.
    pub down: Duration,
    pub seed: u64,
}

impl ChaosOptions {
    /// The short form the test command runs.
    pub fn short() -> Self {
        Self {
            conversations: 50,
            rounds: 1,
            replicas: 2,
            steps: 3,
            think: Duration::from_millis(150),
            down: Duration::from_secs(2),
            seed: seed_from_env(),
        }
    }
}

/// The seed from `CHAOS_SEED` (to repeat a run), else from the clock.
pub fn seed_from_env() -> u64 {
    std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1))
}

/// One kill: what, when (since the start), and how long until it served again.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Kill {
    pub what: String,
    pub at_s: f64,
    pub back_after_s: f64,
    /// For an agent runner: the conversations whose runs it held when it was killed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub held_runs: Vec<String>,
}

/// What a run did.
#[derive(Debug, serde::Serialize)]
pub struct ChaosReport {
    pub seed: u64,
    pub kills: Vec<Kill>,
    pub conversations: usize,
    pub events: usize,
    /// Distinct events the receivers accepted, and all their 2xx answers (redeliveries too).
    pub deliveries: usize,
    pub delivery_attempts_accepted: usize,
    /// From the first event appended to the last.
    pub run_s: f64,
    /// Runs taken over from a dead runner (`run_interrupted` events).
    pub takeovers: usize,
    /// Runs a killed agent runner held that had not finished when it died: each was taken
    /// over (the run asserts it), so `takeovers` is at least this.
    pub runs_cut: usize,
    /// Messages handed out again (a handler died, was too slow or asked to retry), as those alive at
    /// the end counted them: a lower bound, since a killed process takes its counts with it.
    pub redeliveries_at_least: usize,
    /// From an event's append to its first arrival at the webhook receiver: p50, p99, max.
    pub webhook_latency_ms: [f64; 3],
}

/// Node id prefix of the agent runners (`agent-runner-0`, ...).
const AGENT_NODE: &str = "agent-runner-";

/// The runs each agent runner (by index) holds now, read from the lease bucket: a lease written
/// and not handed over. Waits up to `patience` for any to hold one.
async fn runs_held(js: &async_nats::jetstream::Context, patience: Duration) -> HashMap<usize, Vec<String>> {
    use futures::StreamExt;
    let deadline = Instant::now() + patience;
    loop {
        let mut held: HashMap<usize, Vec<String>> = HashMap::new();
        if let Ok(kv) = js.get_key_value(halyard_protocol::subjects::AGENT_LEASE_BUCKET).await {
            if let Ok(mut keys) = kv.keys().await {
                while let Some(Ok(key)) = keys.next().await {
                    let Ok(Some(value)) = kv.get(&key).await else { continue };
                    let text = String::from_utf8_lossy(&value).into_owned();
                    let Some((node, at)) = text.split_once(' ') else { continue };
                    let runner = node.strip_prefix(AGENT_NODE).and_then(|i| i.parse().ok());
                    if let (Some(i), false) = (runner, at == "0") {
                        held.entry(i).or_default().push(key);
                    }
                }
            }
        }
        if !held.is_empty() || Instant::now() >= deadline {
            return held;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A tiny xorshift generator: the run is repeatable from its seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}

/// The gateways' current addresses (a restarted gateway has a new port), shared by the clients.
#[derive(Clone)]
struct Gateways(Arc<Mutex<Vec<String>>>);

impl Gateways {
    fn set(&self, i: usize, base: &str) {
        if let Ok(mut g) = self.0.lock() {
            g[i] = base.to_owned();
        }
    }

    /// One API call, on whichever gateway answers: a gateway that is down (refused, reset, 5xx)
    /// is skipped, for up to a minute.
    async fn call(&self, http: &reqwest::Client, key: &str, method: reqwest::Method, path: &str, body: Option<&Value>) -> (u16, Value) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last = String::new();
        loop {
            let bases = self.0.lock().map(|g| g.clone()).unwrap_or_default();
            for base in bases {
                let mut req = http.request(method.clone(), format!("{base}{path}")).bearer_auth(key).timeout(Duration::from_secs(10));
                if let Some(b) = body {
                    req = req.json(b);
                }
                match req.send().await {
                    Ok(resp) if resp.status().is_server_error() => last = format!("{base}: {}", resp.status()),
                    Ok(resp) => {
                        let status = resp.status().as_u16();
                        let text = resp.text().await.unwrap_or_default();
                        return (status, serde_json::from_str(&text).unwrap_or(Value::String(text)));
                    }
                    Err(e) => last = format!("{base}: {e}"),
                }
            }
            assert!(Instant::now() < deadline, "no gateway answered {method} {path}: {last}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn events(&self, http: &reqwest::Client, key: &str, conv: &str) -> Vec<Value> {
        crate::harness::all_events(conv, |path| async move { self.call(http, key, reqwest::Method::GET, &path, None).await }).await
    }
}

/// The cluster's processes. Fields drop in order: the services before the NATS nodes.
struct Cluster {
    gateways: Vec<Halyard>,
    agents: Vec<Halyard>,
    callbacks: Vec<Halyard>,
    sandbox: Halyard,
    others: Vec<Halyard>,
    nats: NatsCluster,
}

impl Cluster {
    fn all(&self) -> impl Iterator<Item = &Halyard> {
        self.gateways.iter().chain(&self.agents).chain(&self.callbacks).chain(std::iter::once(&self.sandbox)).chain(&self.others)
    }

    /// Every process's log lines that name `id`, and its warnings and errors, for a failure's
    /// report; the whole logs are kept in a directory it names.
    fn said_of(&self, id: &str) -> String {
        let dir = std::env::temp_dir().join(format!("halyard-chaos-{id}"));
        let _ = std::fs::create_dir_all(&dir);
        let mut out = format!("(every process's whole log is in {})\n", dir.display());
        for (i, h) in self.all().enumerate() {
            let log = h.log();
            let _ = std::fs::write(dir.join(format!("{i}-{}.log", h.deployment())), &log);
            let lines: Vec<&str> = log.lines().filter(|l| l.contains(id) || l.contains("WARN") || l.contains("ERROR")).collect();
            out += &format!("--- process {i} ({}):\n{}\n", h.deployment(), lines.join("\n"));
        }
        out
    }
}

/// Sums a counter over every process's `/metrics`.
async fn total(cluster: &Cluster, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut sum = 0.0;
    for h in cluster.all() {
        sum += h.scrape().await.sum(name, labels);
    }
    sum
}

/// Events in the logs of `convs`, all told.
async fn logged(gw: &Gateways, http: &reqwest::Client, convs: &[(usize, String)]) -> usize {
    let mut n = 0;
    for (user, conv) in convs {
        n += gw.events(http, USERS[*user].1, conv).await.len();
    }
    n
}

/// The log line that says when it happened.
fn say(t0: Instant, what: &str) {
    println!("[{:>7.2}s] {what}", t0.elapsed().as_secs_f64());
}

/// Distinct events a receiver accepted, by conversation, in first-delivery order.
fn delivered(r: &Receiver) -> HashMap<String, Vec<u64>> {
    let mut seen = HashSet::new();
    let mut out: HashMap<String, Vec<u64>> = HashMap::new();
    for e in r.accepted().iter().map(|x| x.json()) {
        if seen.insert(e["id"].as_str().unwrap_or_default().to_owned()) {
            out.entry(e["conversation_id"].as_str().unwrap_or_default().to_owned()).or_default().push(e["seq"].as_u64().unwrap_or(0));
        }
    }
    out
}

/// Runs the chaos (on a multi-threaded runtime: restarts block a thread until the process is
/// ready). Panics on the first broken promise.
pub async fn run(opts: ChaosOptions) -> ChaosReport {
    let t0 = Instant::now();
    let mut rng = Rng(opts.seed.max(1));
    say(t0, &format!("chaos seed {} (CHAOS_SEED={} repeats this run's kills)", opts.seed, opts.seed));

    let llm = ScriptedLlm::start().await;
    let (steps, think) = (opts.steps, opts.think);
    llm.fallback(move |req| {
        let done = req["messages"].as_array().map(|m| m.iter().filter(|m| m["role"] == "tool").count()).unwrap_or(0);
        let reply =
            if done < steps { Reply::tool("terminal", json!({"command": format!("echo step {done}")})) } else { Reply::finish("done") };
        Reply::Delay(think, Box::new(reply))
    });

    let nats = NatsCluster::start(3).await;
    say(t0, "three NATS nodes formed a cluster");
    // Agent runners get node ids of their own (kept across a restart), so that the lease
    // bucket says which of them holds which run.
    let service = |name: &str, node: Option<String>| {
        let mut opts = HalyardOptions::new(&llm.base_url)
            .serve(&nats.url, &[name])
            .set("HALYARD_SECRET", "a-shared-deployment-secret")
            .set("HALYARD_WEBHOOK_ALLOW", "loopback")
            .set("HALYARD_WEBHOOK_RETRY_BASE_MS", "200")
            // The calm runs start every conversation at once, and the clients call the first
            // gateway that answers: the per-user limit on starts in flight is not under test.
            .set("HALYARD_MAX_STARTING_PER_USER", "1000");
        // CHAOS_LOG sets every process's log filter, to look closer at a failure.
        if let Ok(filter) = std::env::var("CHAOS_LOG") {
            opts = opts.set("HALYARD_LOG", &filter);
        }
        if let Some(node) = node {
            opts = opts.set("HALYARD_NODE_ID", &node);
        }
        Halyard::start(opts)
    };
    // The sandbox supervisor first (it declares nothing the others wait for, and owns the
    // host's sandboxes), then two of everything else.
    let sandbox = service("sandbox", None);
    let n = opts.replicas.max(1);
    let agents = (0..n).map(|i| service("agent", Some(format!("{AGENT_NODE}{i}")))).collect();
    let callbacks = (0..n).map(|_| service("callbacks", None)).collect();
    let others = (0..n).flat_map(|_| [service("conversations", None), service("titles", None)]).collect();
    let gateways = (0..n).map(|_| service("gateway", None)).collect();
    // Every node's address, so that reading the leases survives a node's kill.
    let nodes: Vec<async_nats::ServerAddr> = nats.url.split(',').filter_map(|u| u.parse().ok()).collect();
    let leases = async_nats::jetstream::new(async_nats::connect(nodes).await.expect("connect to the cluster"));
    let mut c = Cluster { gateways, agents, callbacks, sandbox, others, nats };
    say(t0, &format!("{n} replica(s) of every service up (one sandbox supervisor)"));

    let gw = Gateways(Arc::new(Mutex::new(c.gateways.iter().map(|g| g.http.clone()).collect())));
    let http = reqwest::Client::new();
    let mut receivers = Vec::new();
    for (_, key) in USERS {
        let r = Receiver::start().await;
        let (s, w) = gw.call(&http, key, reqwest::Method::POST, "/api/v1/webhooks", Some(&json!({"url": r.url}))).await;
        assert_eq!(s, 201, "subscribe: {w}");
        receivers.push(r);
    }

    // The starts, spread over the chaos: one every `every`.
    let kinds = ["agent runner", "gateway", "sandbox supervisor", "dispatcher", "NATS node"];
    let kills_planned = kinds.len() * opts.rounds;
    let per_kill = opts.down + Duration::from_secs(3);
    let every = (per_kill * kills_planned as u32) / opts.conversations.max(1) as u32;
    let tasks: Arc<Mutex<Vec<(usize, String)>>> = Arc::default();
    let starter = {
        let (gw, http, tasks) = (gw.clone(), http.clone(), tasks.clone());
        let n = opts.conversations;
        tokio::spawn(async move {
            for i in 0..n {
                let user = i % USERS.len();
                let body = json!({"message": format!("chaos conversation {i}"), "title": format!("chaos {i}")});
                let (s, task) = gw.call(&http, USERS[user].1, reqwest::Method::POST, "/api/v1/conversations", Some(&body)).await;
                assert_eq!(s, 202, "start {i}: {task}");
                tasks.lock().expect("lock").push((user, task["id"].as_str().expect("task id").to_owned()));
                tokio::time::sleep(every).await;
            }
        })
    };

    // The kills: every kind `rounds` times, in a random order, one at a time.
    let mut plan: Vec<&str> = (0..opts.rounds).flat_map(|_| kinds).collect();
    for i in (1..plan.len()).rev() {
        plan.swap(i, rng.below(i + 1));
    }
    let mut kills = Vec::new();
    // Runs a killed runner held, with when it died.
    let mut cut: Vec<(String, std::time::SystemTime)> = Vec::new();
    for kind in plan {
        tokio::time::sleep(Duration::from_millis(1000 + rng.below(1000) as u64)).await;
        let at = t0.elapsed().as_secs_f64();
        let back = Instant::now();
        let (mut held_runs, mut killed_at) = (Vec::new(), std::time::SystemTime::now());
        let what = if kind == "NATS node" {
            let i = rng.below(3);
            c.nats.kill_node(i);
            say(t0, &format!("SIGKILL {kind} {i}"));
            tokio::time::sleep(opts.down).await;
            c.nats.start_node(i);
            format!("{kind} {i}")
        } else {
            // An agent runner that holds runs now, so the kill cuts runs off and tests their
            // takeover (any runner if none holds one within five seconds).
            let holding = if kind == "agent runner" { runs_held(&leases, Duration::from_secs(5)).await } else { HashMap::new() };
            let runners: Vec<usize> = holding.keys().copied().collect();
            let (i, h): (usize, &mut [Halyard]) = match kind {
                "agent runner" if !runners.is_empty() => (runners[rng.below(runners.len())], &mut c.agents),
                "agent runner" => (rng.below(n), &mut c.agents),
                "gateway" => (rng.below(n), &mut c.gateways),
                "dispatcher" => (rng.below(n), &mut c.callbacks),
                _ => (0, std::slice::from_mut(&mut c.sandbox)),
            };
            let h = &mut h[i];
            let pid = h.pid();
            h.kill9();
            held_runs = holding.get(&i).cloned().unwrap_or_default();
            killed_at = std::time::SystemTime::now();
            say(t0, &format!("SIGKILL {kind} {i} (pid {pid}, holding {} runs)", held_runs.len()));
            tokio::time::sleep(opts.down).await;
            h.restart();
            if kind == "gateway" {
                gw.set(i, &h.http);
            }
            format!("{kind} {i}")
        };
        let back_after_s = back.elapsed().as_secs_f64();
        say(t0, &format!("{what} is back ({back_after_s:.1} s after the kill)"));
        cut.extend(held_runs.iter().map(|conv| (conv.clone(), killed_at)));
        kills.push(Kill { what, at_s: at, back_after_s, held_runs });
    }
    starter.await.expect("every conversation started");
    say(t0, &format!("{} conversations started; the chaos is over, checking", opts.conversations));

    // Every start task READY, every run finished with a contiguous log.
    let tasks = tasks.lock().expect("lock").clone();
    let mut convs: Vec<(usize, String)> = Vec::new();
    for (user, task) in &tasks {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let (s, t) = gw.call(&http, USERS[*user].1, reqwest::Method::GET, &format!("/api/v1/start-tasks/{task}"), None).await;
            assert_eq!(s, 200, "task: {t}");
            match t["status"].as_str().unwrap_or_default() {
                "READY" => {
                    convs.push((*user, t["conversation_id"].as_str().expect("conversation id").to_owned()));
                    break;
                }
                "ERROR" => panic!("a start failed under chaos: {t}"),
                _ => {}
            }
            if Instant::now() > deadline {
                // The sandbox's id is the key to what the supervisors did with its create.
                let id = t["sandbox_id"].as_str().or(t["conversation_id"].as_str()).unwrap_or(task.as_str()).to_owned();
                panic!("start task wedged: {t}\nwhat the processes said of its sandbox:\n{}", c.said_of(&id));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let mut logs: HashMap<String, Vec<Value>> = HashMap::new();
    for (user, conv) in &convs {
        let deadline = Instant::now() + Duration::from_secs(120);
        let events = loop {
            let events = gw.events(&http, USERS[*user].1, conv).await;
            if events.iter().any(|e| e["status"] == "finished") {
                break events;
            }
            if Instant::now() > deadline {
                panic!(
                    "run wedged: {conv} never finished; its log: {}\nwhat the processes said of it:\n{}",
                    Value::Array(events),
                    c.said_of(conv)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_log_is_contiguous(&events);
        assert_eq!(events.iter().filter(|e| e["kind"] == "user_message").count(), 1, "{conv}: the message was appended twice");
        let (s, view) = gw.call(&http, USERS[*user].1, reqwest::Method::GET, &format!("/api/v1/conversations/{conv}"), None).await;
        assert_eq!(s, 200, "{view}");
        assert_ne!(view["execution_status"], "running", "{conv} still shows a run after finishing: {view}");
        logs.insert(conv.clone(), events);
    }
    let times: Vec<std::time::SystemTime> =
        logs.values().flatten().filter_map(|e| crate::receiver::appended_at(e["id"].as_str().unwrap_or_default())).collect();
    let run_s = match (times.iter().min(), times.iter().max()) {
        (Some(a), Some(b)) => b.duration_since(*a).unwrap_or_default().as_secs_f64(),
        _ => 0.0,
    };
    let events: usize = logs.values().map(Vec::len).sum();
    let takeovers = logs.values().flatten().filter(|e| e["code"] == "run_interrupted").count();
    // A run a killed runner held and that had not finished by then was taken over by another
    // runner, which says so in its log (one that finished before the kill owes nothing).
    let mut runs_cut = 0;
    for (conv, killed_at) in &cut {
        let Some(events) = logs.get(conv) else { continue };
        let finished = events.iter().find(|e| e["status"] == "finished");
        let finished_at = finished.and_then(|e| crate::receiver::appended_at(e["id"].as_str().unwrap_or_default()));
        if finished_at.is_some_and(|f| f > *killed_at) {
            runs_cut += 1;
            assert!(
                events.iter().any(|e| e["code"] == "run_interrupted"),
                "{conv}: its runner was killed mid-run, yet no runner took the run over; its log: {}",
                Value::Array(events.clone())
            );
        }
    }
    say(
        t0,
        &format!(
            "{} conversations finished, {events} events, logs contiguous, {takeovers} runs taken over ({runs_cut} cut by kills)",
            convs.len()
        ),
    );

    // Every receiver has every event of its user's conversations, in each one's order, and none
    // of the other user's.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let got: Vec<HashMap<String, Vec<u64>>> = receivers.iter().map(delivered).collect();
        let complete = convs.iter().all(|(user, conv)| got[*user].get(conv).map_or(0, Vec::len) >= logs[conv].len());
        if complete {
            for (user, conv) in &convs {
                let want: Vec<u64> = (1..=logs[conv].len() as u64).collect();
                assert_eq!(got[*user][conv], want, "{conv}: deliveries out of order or duplicated");
                assert!(!got[1 - *user].contains_key(conv), "{conv} reached the other user's webhook");
            }
            break;
        }
        if Instant::now() > deadline {
            let missing: Vec<String> = convs
                .iter()
                .filter(|(u, conv)| got[*u].get(conv).map_or(0, Vec::len) < logs[conv].len())
                .map(|(u, conv)| format!("{conv}: {}/{}", got[*u].get(conv).map_or(0, Vec::len), logs[conv].len()))
                .collect();
            panic!("webhook deliveries missing after the chaos: {missing:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The deliveries of the conversations this run follows: a start retried on another gateway
    // after the one it was sent to died may have made a conversation the run does not follow
    // (the client asked twice), whose events its receiver rightly gets too.
    let got: Vec<HashMap<String, Vec<u64>>> = receivers.iter().map(delivered).collect();
    let deliveries: usize = convs.iter().map(|(user, conv)| got[*user].get(conv).map_or(0, Vec::len)).sum();
    let mut latencies: Vec<f64> = Vec::new();
    let mut first = HashSet::new();
    for r in receivers.iter().flat_map(Receiver::accepted) {
        if first.insert(r.header("webhook-id").unwrap_or_default().to_owned()) {
            latencies.extend(r.latency_ms());
        }
    }
    latencies.sort_by(f64::total_cmp);
    let pct = |p: f64| latencies.get(((p / 100.0) * latencies.len().saturating_sub(1) as f64).round() as usize).copied().unwrap_or(0.0);
    let webhook_latency_ms = [pct(50.0), pct(99.0), pct(100.0)];
    let attempts_before: usize = receivers.iter().map(|r| r.accepted().len()).sum();
    say(t0, &format!("every webhook receiver has every event of its conversations, in order ({deliveries} events)"));

    // The metrics agree with what a calm run does (a killed process took its counts with it,
    // so they are compared over a run with every process up).
    let logged_before = logged(&gw, &http, &convs).await;
    let appended_before = total(&c, "halyard_events_appended_total", &[]).await;
    let succeeded_before = total(&c, "halyard_webhook_deliveries_total", &[("outcome", "succeeded")]).await;
    let mut calm = Vec::new();
    for i in 0..4 {
        let user = i % USERS.len();
        let body = json!({"message": format!("calm conversation {i}"), "title": format!("calm {i}")});
        let (s, task) = gw.call(&http, USERS[user].1, reqwest::Method::POST, "/api/v1/conversations", Some(&body)).await;
        assert_eq!(s, 202, "{task}");
        calm.push((user, task["id"].as_str().expect("task id").to_owned()));
    }
    for (user, task) in &calm {
        let key = USERS[*user].1;
        let deadline = Instant::now() + Duration::from_secs(60);
        let conv = loop {
            let (_, t) = gw.call(&http, key, reqwest::Method::GET, &format!("/api/v1/start-tasks/{task}"), None).await;
            if t["status"] == "READY" {
                break t["conversation_id"].as_str().expect("conversation id").to_owned();
            }
            assert!(t["status"] != "ERROR" && Instant::now() < deadline, "calm start: {t}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let events = loop {
            let events = gw.events(&http, key, &conv).await;
            if events.iter().any(|e| e["status"] == "finished") {
                break events;
            }
            assert!(Instant::now() < deadline, "calm run wedged: {}", Value::Array(events));
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let r = &receivers[*user];
        while delivered(r).get(&conv).map_or(0, Vec::len) < events.len() {
            assert!(Instant::now() < deadline, "calm deliveries missing");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        convs.push((*user, conv));
    }
    // A counter is bumped just after its work is acknowledged: give the last ones a moment.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let calm_events = logged(&gw, &http, &convs).await - logged_before;
        let appended = total(&c, "halyard_events_appended_total", &[]).await - appended_before;
        let succeeded = total(&c, "halyard_webhook_deliveries_total", &[("outcome", "succeeded")]).await - succeeded_before;
        let accepted = receivers.iter().map(|r| r.accepted().len()).sum::<usize>() - attempts_before;
        if appended as usize == calm_events && succeeded as usize == accepted {
            say(t0, &format!("metrics agree: {appended} events appended, {succeeded} deliveries made by the processes' own counts"));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "metrics disagree: {appended} appended counted for {calm_events} events; {succeeded} deliveries counted for {accepted} accepted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for kill in &kills {
        println!("killed {:<22} at {:>6.1} s, serving again {:.1} s later", kill.what, kill.at_s, kill.back_after_s);
    }
    let delivery_attempts_accepted = receivers.iter().map(|r| r.accepted().len()).sum();
    let redeliveries_at_least = total(&c, "halyard_messages_redelivered_total", &[]).await as usize;
    println!("{takeovers} runs taken over, at least {redeliveries_at_least} messages handed out again");
    ChaosReport {
        seed: opts.seed,
        kills,
        conversations: opts.conversations,
        events,
        deliveries,
        delivery_attempts_accepted,
        run_s,
        takeovers,
        runs_cut,
        redeliveries_at_least,
        webhook_latency_ms,
    }
}

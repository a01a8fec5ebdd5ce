#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Halyard as a cluster: every service its own process, two agent runners, over a three-node
//! JetStream cluster. A killed runner's runs are taken over by the other and finish; commands
//! reach a run whichever runner pulled them; a killed NATS node stops nothing, with the
//! services as processes and as the Compose file's containers.

use std::time::{Duration, Instant};

use halyard_tests::events::finished;
use halyard_tests::harness::assert_log_is_contiguous;
use halyard_tests::{Halyard, HalyardOptions, NatsCluster, Reply, ScriptedLlm, init};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";

/// Fields drop in order: the services stop before the NATS cluster under them.
struct Cluster {
    sandbox: Halyard,
    agents: Vec<Halyard>,
    gateway: Halyard,
    _others: Vec<Halyard>,
    nats: NatsCluster,
}

async fn cluster(llm: &ScriptedLlm) -> Cluster {
    let t = Instant::now();
    let nats = NatsCluster::start(3).await;
    eprintln!("[{:?}] nats cluster formed", t.elapsed());
    let service = |name: &str| {
        eprintln!("[{:?}] starting {name}", t.elapsed());
        Halyard::start(HalyardOptions::new(&llm.base_url).serve(&nats.url, &[name]).set("HALYARD_SECRET", "a-shared-deployment-secret"))
    };
    let sandbox = service("sandbox");
    let agents = vec![service("agent"), service("agent")];
    let others = vec![service("conversations"), service("titles"), service("callbacks")];
    let gateway = service("gateway");
    Cluster { sandbox, agents, gateway, _others: others, nats }
}

impl Cluster {
    /// The index of the agent runner holding `conv`'s run lease.
    async fn holder(&self, conv: &str) -> Option<usize> {
        let client = async_nats::connect(self.nats.url.split(',').collect::<Vec<_>>()).await.unwrap();
        let kv = async_nats::jetstream::new(client).get_key_value("halyard_agent_leases").await.unwrap();
        let value = kv.get(conv).await.ok()??;
        let node = String::from_utf8_lossy(&value).split(' ').next().unwrap_or_default().to_owned();
        self.agents.iter().position(|a| a.deployment() == node)
    }

    async fn wait_holder(&self, conv: &str) -> usize {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(i) = self.holder(conv).await {
                return i;
            }
            assert!(Instant::now() < deadline, "no runner holds {conv}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test]
async fn a_killed_runners_runs_are_taken_over_and_finish_on_a_three_node_jetstream() {
    init();
    let llm = ScriptedLlm::start().await;
    let t = Instant::now();
    let mut c = cluster(&llm).await;
    eprintln!("[{:?}] cluster up", t.elapsed());
    let api = c.gateway.api(ALICE);

    // Three copies of every stream and bucket on a three-node cluster.
    let client = async_nats::connect(c.nats.url.split(',').collect::<Vec<_>>()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    for stream in ["HALYARD_EVENTS", "HALYARD_COMMANDS", "HALYARD_SYSTEM", "KV_halyard_agent_leases", "KV_halyard_user"] {
        let info = js.get_stream(stream).await.unwrap().get_info().await.unwrap();
        assert_eq!(info.config.num_replicas, 3, "{stream}");
    }

    eprintln!("[{:?}] 1.", t.elapsed());
    // 1. The runner dies while the LLM thinks: the other runner asks again and finishes.
    llm.push([Reply::tool("terminal", json!({"command": "echo one >> trail.txt"})), Reply::Hang]);
    let (conv, task) = api.start_ready(json!({"message": "write the trail"})).await;
    llm.wait_requests(2).await;
    let holder = c.wait_holder(&conv).await;
    llm.push([Reply::finish("done")]);
    let killed = Instant::now();
    c.agents[holder].kill9();
    llm.release();
    let events = api.wait_events(&conv, "the takeover", |ev| ev.iter().any(|e| e["code"] == "run_interrupted")).await;
    let takeover = killed.elapsed();
    let events = if finished(&events) { events } else { api.wait_events(&conv, "the run to finish", finished).await };
    println!("takeover after SIGKILL of the runner (LLM call in flight): {takeover:?}");
    assert!(takeover < Duration::from_secs(10), "took {takeover:?}");
    assert_log_is_contiguous(&events);
    assert_eq!(events.iter().filter(|e| e["kind"] == "user_message").count(), 1);
    assert_eq!(c.holder(&conv).await, None, "the lease was not let go after the run");
    let trail = std::fs::read_to_string(c.sandbox.workspace(task["sandbox_id"].as_str().unwrap()).join("trail.txt")).unwrap();
    assert_eq!(trail, "one\n", "the finished tool call ran again");
    let last = llm.requests().last().cloned().unwrap();
    assert!(last["messages"].to_string().contains("write the trail"), "the new runner lost the history");
    c.agents[holder].restart();

    eprintln!("[{:?}] 2.", t.elapsed());
    // 2. The runner dies in a tool call: the call is recorded as interrupted, and the model,
    // told so, goes on.
    llm.push([Reply::tool("terminal", json!({"command": "echo started > s.txt; sleep 30", "timeout": 60}))]);
    let (conv, task) = api.start_ready(json!({"message": "long job"})).await;
    let workspace = c.sandbox.workspace(task["sandbox_id"].as_str().unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    while !workspace.join("s.txt").exists() {
        assert!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let holder = c.wait_holder(&conv).await;
    llm.push([Reply::finish("recovered")]);
    let asked = llm.requests().len();
    c.agents[holder].kill9();
    let events = api.wait_events(&conv, "the run to finish", finished).await;
    assert_log_is_contiguous(&events);
    let obs = events.iter().find(|e| e["kind"] == "observation").unwrap();
    assert!(obs["content"].as_str().unwrap().contains("Interrupted"), "{obs}");
    assert_eq!(obs["is_error"], true);
    let next = &llm.requests()[asked];
    assert!(next["messages"].to_string().contains("Interrupted: the agent runner"), "the model was not told: {next}");
    c.agents[holder].restart();

    eprintln!("[{:?}] 3.", t.elapsed());
    // 3. Commands reach the run whichever runner pulls them: interrupts of runs held by either
    // runner all land.
    let mut convs = Vec::new();
    for i in 0..4 {
        llm.push([Reply::Hang]);
        let (conv, _) = api.start_ready(json!({"message": format!("think {i}")})).await;
        convs.push(conv);
    }
    llm.wait_requests(asked + 1 + 4).await;
    for conv in &convs {
        let (s, _) = api.post(&format!("/api/v1/conversations/{conv}/interrupt"), json!({})).await;
        assert_eq!(s, 202);
    }
    for conv in &convs {
        api.wait_conversation(conv, "the interrupt", |c| c["execution_status"] == "idle").await;
    }
    llm.release();

    eprintln!("[{:?}] SIGTERM.", t.elapsed());
    // A runner stopped with SIGTERM hands its runs over at once, without waiting for the lease
    // to age.
    let asked = llm.requests().len();
    llm.push([Reply::Hang]);
    let (conv, _) = api.start_ready(json!({"message": "think until the handover"})).await;
    llm.wait_requests(asked + 1).await;
    let holder = c.wait_holder(&conv).await;
    llm.push([Reply::finish("handed over")]);
    let stopping = Instant::now();
    c.agents[holder].stop();
    llm.release();
    let events = api.wait_events(&conv, "the run to finish", finished).await;
    let handover = stopping.elapsed();
    println!("run finished on the other runner {handover:?} after SIGTERM to its runner");
    assert_log_is_contiguous(&events);
    assert!(events.iter().any(|e| e["code"] == "run_interrupted"));
    assert!(c.agents[holder].log().contains("handing the live run over"), "the run was not handed over");
    c.agents[holder].restart();

    eprintln!("[{:?}] 4.", t.elapsed());
    // 4. A NATS node dies under a conversation: nothing is lost, nothing stops.
    llm.push([Reply::tool("terminal", json!({"command": "echo survived"})), Reply::finish("done")]);
    c.nats.kill_node(0);
    let t4 = Instant::now();
    let (st, task) = api.post("/api/v1/conversations", json!({"message": "go on without node 0"})).await;
    if st != 202 {
        for h in [&c.gateway, &c.sandbox, &c.agents[0], &c.agents[1]] {
            let log = h.log();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            eprintln!("----\n{}", tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
        }
        panic!("start refused after {:?}: {task}", t4.elapsed());
    }
    eprintln!("[{:?}] start answered", t4.elapsed());
    let task = api.wait_task(task["id"].as_str().unwrap(), &["READY"]).await;
    eprintln!("[{:?}] ready", t4.elapsed());
    let conv = task["conversation_id"].as_str().unwrap().to_owned();
    let events = api.wait_events(&conv, "the run to finish", finished).await;
    assert_log_is_contiguous(&events);
    assert!(events.iter().any(|e| e["kind"] == "observation" && e["content"].as_str().unwrap_or_default().starts_with("survived")));
    // A service that starts while the node is down counts two nodes; it must not take copies
    // away from the streams.
    c.agents[0].stop();
    c.agents[0].restart();
    for stream in ["HALYARD_EVENTS", "KV_halyard_agent_leases"] {
        let info = js.get_stream(stream).await.unwrap().get_info().await.unwrap();
        assert_eq!(info.config.num_replicas, 3, "{stream} lost copies");
    }
    eprintln!("[{:?}] done", t.elapsed());
    c.nats.start_node(0);
}

/// `infra/cluster/up.sh` starts the local cluster (three NATS nodes, two replicas of every
/// service but the sandbox supervisor), a conversation goes through one gateway and reads the
/// same, live too, through the other; `down.sh` stops every process.
#[tokio::test]
async fn the_cluster_script_starts_a_working_cluster_and_stops_it() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::tool("terminal", json!({"command": "echo clustered"})), Reply::finish("done")]);
    let dir = tempfile::tempdir().unwrap();
    // The script uses this port and the 112 above it: all below the kernel's ephemeral range
    // (32768 up), where any test's outgoing connection or `:0` listener may hold one (a CI run
    // failed on "cannot listen" so).
    let port = 20_000 + (std::process::id() % 12_000) as u16;
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let script = |name: &str| {
        let mut cmd = std::process::Command::new("bash");
        cmd.arg(format!("{root}/infra/cluster/{name}"))
            .arg(dir.path())
            .env("HALYARD_BIN", halyard_tests::harness::halyard_bin())
            .env("HALYARD_CLUSTER_PORT", port.to_string())
            .env("HALYARD_API_KEYS", format!("alice:{ALICE}"))
            .env("HALYARD_LLM_BASE_URL", &llm.base_url)
            .env("HALYARD_LLM_MODEL", "scripted-model")
            .env("HALYARD_LLM_API_KEY", halyard_tests::harness::LLM_KEY)
            .env("HALYARD_TITLE_USE_LLM", "false")
            .env("HALYARD_SANDBOX", "process")
            .env("HALYARD_SANDBOX_POOL_SIZE", "0");
        cmd
    };
    let up = tokio::task::spawn_blocking({
        let mut cmd = script("up.sh");
        move || cmd.output().unwrap()
    })
    .await
    .unwrap();
    let said = String::from_utf8_lossy(&up.stdout).to_string();
    let pids = std::fs::read_to_string(dir.path().join("pids")).unwrap();
    // Stopped even if an assertion below fails.
    struct Down(std::process::Command);
    impl Drop for Down {
        fn drop(&mut self) {
            let _ = self.0.output();
        }
    }
    let down = Down(script("down.sh"));
    assert!(up.status.success(), "up.sh: {said}\n{}", String::from_utf8_lossy(&up.stderr));
    assert_eq!(pids.lines().count(), 3 + 1 + 2 * 6, "{pids}");
    assert!(said.contains("Halyard cluster up"), "{said}");

    let gateway = |n: u16| halyard_tests::Api {
        base: format!("http://127.0.0.1:{}", port + 100 + n),
        key: ALICE.into(),
        http: reqwest::Client::new(),
    };
    let (one, two) = (gateway(1), gateway(2));
    let (conv, _) = one.start_ready(json!({"message": "go"})).await;
    let events = one.wait_events(&conv, "the run to finish", finished).await;
    assert_log_is_contiguous(&events);
    // The other gateway's read model holds the same log; its WebSocket resumes from any seq.
    let theirs = two.wait_events(&conv, "the other gateway to catch up", |ev| ev.len() >= events.len()).await;
    assert_eq!(theirs[..events.len()], events[..]);
    let mut ws = two.ws(&conv, 3).await;
    let mut seen = Vec::new();
    while seen.len() < events.len() - 3 {
        let e = ws.next(Duration::from_secs(10)).await.expect("the WebSocket went quiet");
        seen.push(e);
    }
    assert_eq!(seen[..], events[3..]);

    drop(down);
    for line in pids.lines() {
        let pid = line.split(' ').next().unwrap();
        let alive = std::process::Command::new("kill").args(["-0", pid]).status().unwrap().success();
        assert!(!alive, "{line} still runs after down.sh");
    }
}

/// The Kubernetes manifests pass the API's own schemas, strictly (no unknown field), and probe
/// what every process serves.
#[test]
fn the_kubernetes_manifests_pass_the_api_schemas() {
    let manifests = concat!(env!("CARGO_MANIFEST_DIR"), "/../infra/k8s/halyard.yaml");
    let out = std::process::Command::new("python3")
        .args(["-m", "kubernetes_validate", "--strict", "--quiet", manifests])
        .output()
        .expect("python3 (pip install kubernetes-validate)");
    assert!(out.status.success(), "kubernetes-validate: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(manifests).unwrap();
    for service in ["gateway", "conversations", "agent", "callbacks", "titles", "automations", "sandbox"] {
        assert!(text.contains(&format!("- serve\n        - {service}\n")), "no workload runs {service}");
    }
    assert_eq!(text.matches("path: /readyz").count(), 7, "every workload has a readiness probe");
}

/// The Compose file passes docker-compose's own validation, refuses to start without the
/// deployment secret, and runs every service, two of each but the sandbox supervisor.
#[test]
fn the_compose_file_is_valid_and_runs_every_service() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../infra/cluster/compose.yaml");
    let compose = |args: &[&str], secret: bool| {
        let mut cmd = std::process::Command::new("docker-compose");
        cmd.args(["-f", file]).args(args).env_remove("HALYARD_SECRET").env("HALYARD_API_KEYS", "admin:k");
        if secret {
            cmd.env("HALYARD_SECRET", "s");
        }
        cmd.output().expect("docker-compose (apt-get install docker-compose)")
    };
    let out = compose(&["config", "-q"], true);
    assert!(out.status.success(), "docker-compose config: {}", String::from_utf8_lossy(&out.stderr));
    let out = compose(&["config", "-q"], false);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("set HALYARD_SECRET"));
    let mut services: Vec<String> =
        String::from_utf8_lossy(&compose(&["config", "--services"], true).stdout).lines().map(str::to_owned).collect();
    services.sort_unstable();
    let mut want: Vec<String> = ["nats-1", "nats-2", "nats-3", "setup-bus", "sandbox"].map(String::from).to_vec();
    for s in ["gateway", "conversations", "agent", "callbacks", "titles", "automations"] {
        want.extend([format!("{s}-1"), format!("{s}-2")]);
    }
    want.sort_unstable();
    assert_eq!(services, want);
}

/// `docker-compose up` of infra/cluster/compose.yaml, for real: an image made around this
/// build's binary by infra/build-local-image.sh (NATS nodes from it too: no registry here), a
/// three-node JetStream with three copies of every stream, and a conversation run through the
/// containers while the node leading the event log is killed. Nothing is lost and the other
/// gateway reads the same log.
#[tokio::test]
async fn compose_up_runs_a_conversation_while_a_nats_node_is_killed() {
    init();
    let llm = ScriptedLlm::start().await;
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let id = uuid::Uuid::new_v4().simple().to_string();
    let (tag, project, user) =
        (format!("halyard:compose-{}", &id[..12]), format!("halyardtest{}", &id[..12]), format!("compose{}", &id[..8]));
    let key = format!("{user}-secret-key");
    let built = std::process::Command::new("bash")
        .arg(format!("{root}/infra/build-local-image.sh"))
        .args([halyard_tests::harness::halyard_bin().as_os_str(), std::ffi::OsStr::new(&tag)])
        .output()
        .expect("bash");
    assert!(built.status.success(), "build-local-image.sh: {}", String::from_utf8_lossy(&built.stderr));
    let compose = |args: &[&str]| {
        let mut cmd = std::process::Command::new("docker-compose");
        cmd.args(["-f", &format!("{root}/infra/cluster/compose.yaml"), "-p", &project])
            .args(args)
            .env("HALYARD_IMAGE", &tag)
            .env("HALYARD_NATS_IMAGE", &tag)
            .env("HALYARD_SECRET", "a-shared-deployment-secret-for-compose")
            .env("HALYARD_API_KEYS", format!("{user}:{key}"))
            .env("HALYARD_ADMINS", &user)
            .env("HALYARD_LLM_BASE_URL", &llm.base_url)
            .env("HALYARD_LLM_MODEL", "scripted-model")
            .env("HALYARD_LLM_API_KEY", halyard_tests::harness::LLM_KEY)
            .env("HALYARD_TITLE_USE_LLM", "false")
            // A warm container belongs to no owner, so the clean-up below would not find it.
            .env("HALYARD_SANDBOX_POOL_SIZE", "0");
        cmd
    };
    // Everything goes, passed or failed: the project's containers and volumes, the sandboxes
    // its supervisor started (labelled with their owner; no warm pool), the image.
    struct Down(std::process::Command, String, String);
    impl Drop for Down {
        fn drop(&mut self) {
            let _ = self.0.output();
            let docker = |args: &[&str]| std::process::Command::new("docker").args(args).output().map(|o| o.stdout).unwrap_or_default();
            let owned = format!("label=dev.halyard.owner={}", self.1);
            for c in String::from_utf8_lossy(&docker(&["ps", "-aq", "--filter", &owned])).split_whitespace() {
                docker(&["rm", "-f", "-v", c]);
            }
            for v in String::from_utf8_lossy(&docker(&["volume", "ls", "-q", "--filter", &owned])).split_whitespace() {
                docker(&["volume", "rm", "-f", v]);
            }
            docker(&["rmi", "-f", &self.2]);
        }
    }
    let mut down = compose(&["down", "-v", "--timeout", "5"]);
    down.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    let _down = Down(down, user.clone(), tag.clone());
    let logs = |service: &str| {
        String::from_utf8_lossy(&compose(&["logs", "--no-color", "--tail", "40", service]).output().unwrap().stdout).to_string()
    };
    let up = compose(&["up", "-d"]).output().expect("docker-compose (apt-get install docker-compose)");
    assert!(up.status.success(), "docker-compose up: {}", String::from_utf8_lossy(&up.stderr));

    let gateway =
        |port: u16| halyard_tests::Api { base: format!("http://127.0.0.1:{port}"), key: key.clone(), http: reqwest::Client::new() };
    let (one, two) = (gateway(3001), gateway(3002));
    let deadline = Instant::now() + Duration::from_secs(180);
    for api in [&one, &two] {
        loop {
            if let Ok(r) = api.http.get(format!("{}/api/v1/conversations", api.base)).bearer_auth(&api.key).send().await {
                if r.status() == 200 {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "the gateways never answered:\n{}\n{}", logs("setup-bus"), logs("gateway-1"));
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    // Three copies of the log on three nodes; the node leading it is the one to kill.
    let nodes: Vec<String> = (14222..=14224).map(|p| format!("nats://127.0.0.1:{p}")).collect();
    let client = async_nats::connect(nodes).await.unwrap();
    assert_eq!(client.server_info().max_payload, 8 << 20, "the nodes did not take infra/cluster/nats.conf");
    let js = async_nats::jetstream::new(client);
    let info = js.get_stream("HALYARD_EVENTS").await.unwrap().get_info().await.unwrap();
    assert_eq!(info.config.num_replicas, 3);
    let leader = info.cluster.and_then(|c| c.leader).expect("the event log has a leader");
    assert!(["nats-1", "nats-2", "nats-3"].contains(&leader.as_str()), "{leader}");

    // The run writes, then waits on the model while the leader dies, then writes again.
    llm.push([Reply::tool("terminal", json!({"command": "echo before > trail.txt"})), Reply::Hang]);
    let (conv, task) = one.start_ready(json!({"message": "keep a trail"})).await;
    llm.wait_requests(2).await;
    let killed = compose(&["kill", &leader]).output().unwrap();
    assert!(killed.status.success(), "docker-compose kill: {}", String::from_utf8_lossy(&killed.stderr));
    llm.push([Reply::tool("terminal", json!({"command": "echo after >> trail.txt && cat trail.txt"})), Reply::finish("done")]);
    llm.release();
    let events = one.wait_events(&conv, "the run to finish", finished).await;
    assert_log_is_contiguous(&events);
    assert_eq!(events.iter().filter(|e| e["kind"] == "user_message").count(), 1);
    let last = events.iter().rfind(|e| e["kind"] == "observation" && e["tool"] == "terminal").unwrap();
    assert!(last["content"].as_str().unwrap().starts_with("before\nafter\n"), "{last}");
    let theirs = two.wait_events(&conv, "the other gateway to catch up", |ev| ev.len() >= events.len()).await;
    assert_eq!(theirs[..events.len()], events[..]);
    // The stream still asks for three copies; a new conversation runs on two nodes.
    let info = js.get_stream("HALYARD_EVENTS").await.unwrap().get_info().await.unwrap();
    assert_eq!(info.config.num_replicas, 3);
    assert_ne!(info.cluster.and_then(|c| c.leader).as_deref(), Some(leader.as_str()));
    llm.push([Reply::finish("still here")]);
    let (conv, _) = two.start_ready(json!({"message": "and now?"})).await;
    let events = two.wait_events(&conv, "the second run to finish", finished).await;
    assert_log_is_contiguous(&events);
    // The sandbox was a container on this engine, started by the supervisor's container.
    let sandbox = task["sandbox_id"].as_str().unwrap();
    let listed = std::process::Command::new("docker")
        .args(["ps", "-q", "--filter", &format!("label=dev.halyard.sandbox={sandbox}")])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&listed.stdout).trim().is_empty(), "no container for {sandbox}");
}

/// The Grafana dashboard charts only metrics `infra/README.md` documents (the bus and webhook tests
/// check the processes export them).
#[test]
fn the_dashboard_charts_documented_metrics() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(format!("{root}/infra/grafana/halyard.json")).unwrap()).unwrap();
    let readme = std::fs::read_to_string(format!("{root}/infra/README.md")).unwrap();
    let mut charted = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| w.starts_with("halyard_")) {
                let base = word.trim_end_matches("_bucket").trim_end_matches("_count").trim_end_matches("_sum");
                assert!(
                    readme.contains(&format!("`{base}")),
                    "{base} (panel {}) is not in the metrics table of infra/README.md",
                    panel["title"]
                );
                charted += 1;
            }
        }
    }
    assert!(charted >= 15, "{charted}");
}

/// With `HALYARD_OTLP_ENDPOINT`, every process exports its spans over OTLP/HTTP, as decoded by
/// the OpenTelemetry project's own protobuf definitions (`tests/servers/otlp_receiver.py`), and
/// a start's spans in the conversation manager and the agent runner (separate processes) share
/// the trace its command carried across the bus.
#[tokio::test]
async fn spans_are_exported_over_otlp_and_a_trace_crosses_the_bus() {
    init();
    let dir = tempfile::tempdir().unwrap();
    let port_file = dir.path().join("port");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/servers/otlp_receiver.py");
    let spans_file = dir.path().join("spans.jsonl");
    let mut receiver = std::process::Command::new("python3")
        .arg(script)
        .arg(&port_file)
        .stdout(std::fs::File::create(&spans_file).unwrap())
        .spawn()
        .expect("python3 (pip install opentelemetry-proto)");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let port = loop {
        if let Ok(p) = std::fs::read_to_string(&port_file) {
            if !p.is_empty() {
                break p;
            }
        }
        assert!(receiver.try_wait().unwrap().is_none(), "the OTLP receiver exited (pip install opentelemetry-proto)");
        assert!(Instant::now() < deadline, "the OTLP receiver did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let _receiver = Kill(receiver);

    let llm = ScriptedLlm::start().await;
    llm.push([Reply::tool("terminal", json!({"command": "echo traced"})), Reply::finish("done")]);
    let nats = halyard_tests::NatsServer::start();
    let service = |name: &str| {
        Halyard::start(
            HalyardOptions::new(&llm.base_url)
                .serve(&nats.url, &[name])
                .set("HALYARD_SECRET", "a-shared-deployment-secret")
                .set("HALYARD_OTLP_ENDPOINT", &format!("http://127.0.0.1:{port}")),
        )
    };
    let mut processes = vec![service("sandbox"), service("conversations"), service("agent"), service("gateway")];
    let api = processes[3].api(ALICE);
    let (conv, _) = api.start_ready(json!({"message": "trace me"})).await;
    api.wait_events(&conv, "the run to finish", finished).await;
    // A clean stop exports what is still buffered.
    for p in &mut processes {
        p.stop();
    }

    let spans: Vec<Value> = std::fs::read_to_string(&spans_file).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let named =
        |service: &str, name: &str| -> Vec<&Value> { spans.iter().filter(|s| s["service"] == service && s["name"] == name).collect() };
    let started = named("halyard-conversations", "conversation_command");
    assert!(!started.is_empty(), "no conversation_command span from the conversation manager: {spans:?}");
    let runs = named("halyard-agent", "agent_run");
    assert!(!runs.is_empty(), "no agent_run span from the agent runner: {spans:?}");
    assert!(
        runs.iter().any(|r| started.iter().any(|s| s["trace_id"] == r["trace_id"])),
        "the run is not in the trace of the start that asked for it: {spans:?}"
    );
    for s in started.iter().chain(&runs) {
        assert_eq!(s["trace_id"].as_str().unwrap().len(), 32);
        assert_ne!(s["parent_span_id"], "", "{s} is not under the trace it was sent with");
    }
}

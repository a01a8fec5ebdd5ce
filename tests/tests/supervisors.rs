#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Sandbox supervisors as replicas, each owning its own process host (its data dir and uid
//! range): a sandbox lives on the supervisor that made it; when that supervisor dies, its
//! sandboxes run on and their conversations go on, new sandboxes go to the other supervisor, and
//! commands for the dead one's sandboxes wait until it returns and adopts them.

use std::time::{Duration, Instant};

use halyard_tests::events::finished;
use halyard_tests::harness::assert_log_is_contiguous;
use halyard_tests::procs;
use halyard_tests::{Halyard, HalyardOptions, NatsServer, Reply, ScriptedLlm, init};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";

/// The supervisor (index) whose data dir holds the sandbox's workspace.
fn host_of(supervisors: &[Halyard], sandbox: &str) -> usize {
    supervisors.iter().position(|s| s.workspace(sandbox).exists()).expect("no supervisor holds the sandbox")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxes_stay_with_their_supervisor_and_wait_for_it_to_return() {
    init();
    let llm = ScriptedLlm::start().await;
    let nats = NatsServer::start();
    let service = |name: &str, uid_base: &str, publish: &str| {
        Halyard::start(
            HalyardOptions::new(&llm.base_url)
                .serve(&nats.url, &[name])
                .set("HALYARD_SECRET", "a-shared-deployment-secret")
                .set("HALYARD_PROCESS_UID_BASE", uid_base)
                .set("HALYARD_SANDBOX_PUBLISH_HOST", publish),
        )
    };
    // Two process hosts with uid ranges of their own, publishing their sandboxes on addresses
    // of their own (as hosts whose agent runners are elsewhere would).
    let mut sup = vec![service("sandbox", "210000", "127.0.0.3")];
    let _agent = service("agent", "0", "127.0.0.1");
    let _conversations = service("conversations", "0", "127.0.0.1");
    let gateway = service("gateway", "0", "127.0.0.1");
    let api = gateway.api(ALICE);

    // With one supervisor up, it makes every sandbox.
    let (on_a, task) = api.start_ready(json!({})).await;
    let sandbox_a = task["sandbox_id"].as_str().unwrap().to_owned();
    assert_eq!(host_of(&sup, &sandbox_a), 0);
    let pid_a = procs::executor_pid(&sup[0].workspace(&sandbox_a)).expect("the executor runs");

    // The second comes; the first dies. Its sandbox runs on, its conversation goes on, and new
    // sandboxes are made by the second.
    sup.push(service("sandbox", "260000", "127.0.0.2"));
    sup[0].kill9();
    assert_eq!(procs::state(pid_a).map(|s| s != 'Z'), Some(true), "the sandbox died with its supervisor");
    llm.push([Reply::tool("terminal", json!({"command": "echo still here"})), Reply::finish("done")]);
    let (s, b) = api.post(&format!("/api/v1/conversations/{on_a}/messages"), json!({"text": "go on"})).await;
    assert_eq!(s, 202, "{b}");
    let events = api.wait_events(&on_a, "the run in the orphaned sandbox", finished).await;
    assert_log_is_contiguous(&events);
    assert!(
        events.iter().any(|e| e["kind"] == "observation" && e["content"].as_str().unwrap_or_default().starts_with("still here")),
        "{}",
        Value::Array(events)
    );
    let mut on_b = Vec::new();
    for _ in 0..3 {
        let (conv, task) = api.start_ready(json!({})).await;
        let sandbox = task["sandbox_id"].as_str().unwrap().to_owned();
        assert_eq!(host_of(&sup, &sandbox), 1, "a sandbox went to the dead supervisor");
        let (_, view) = api.get(&format!("/api/v1/sandboxes/{sandbox}")).await;
        for url in view["exposed_urls"].as_array().unwrap() {
            assert!(url["url"].as_str().unwrap().starts_with("http://127.0.0.2:"), "{view}");
        }
        on_b.push((conv, sandbox));
    }
    // The agent reaches a sandbox there.
    llm.push([Reply::tool("terminal", json!({"command": "echo over there"})), Reply::finish("done")]);
    let (s, b) = api.post(&format!("/api/v1/conversations/{}/messages", on_b[0].0), json!({"text": "work"})).await;
    assert_eq!(s, 202, "{b}");
    let events = api.wait_events(&on_b[0].0, "the run on the second host", finished).await;
    assert!(events.iter().any(|e| e["kind"] == "observation" && e["content"].as_str().unwrap_or_default().starts_with("over there")));

    // A command for the dead supervisor's sandbox waits for it (whichever supervisor pulls it).
    let (s, b) = api.post(&format!("/api/v1/sandboxes/{sandbox_a}/pause"), json!({})).await;
    assert_eq!(s, 202, "{b}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, view) = api.get(&format!("/api/v1/sandboxes/{sandbox_a}")).await;
    assert_eq!(view["status"], "RUNNING", "paused without its host: {view}");
    // Commands for the live one's sandboxes are served, whichever supervisor pulls them.
    for (_, sandbox) in &on_b {
        let (s, b) = api.post(&format!("/api/v1/sandboxes/{sandbox}/pause"), json!({})).await;
        assert_eq!(s, 202, "{b}");
        api.wait_sandbox(sandbox, "the pause", |v| v["status"] == "PAUSED").await;
    }

    // The first returns: it adopts its running sandbox (the same process), and the waiting
    // pause is applied there.
    let restarted = Instant::now();
    sup[0].restart();
    api.wait_sandbox(&sandbox_a, "the pause once its host is back", |v| v["status"] == "PAUSED").await;
    println!("the waiting pause was applied {:?} after its supervisor came back", restarted.elapsed());
    assert_eq!(procs::executor_pid(&sup[0].workspace(&sandbox_a)), Some(pid_a), "the sandbox was made again, not adopted");
    assert_eq!(procs::state(pid_a), Some('T'), "the adopted executor was not stopped by the pause");
    let (s, b) = api.post(&format!("/api/v1/sandboxes/{sandbox_a}/resume"), json!({})).await;
    assert_eq!(s, 202, "{b}");
    api.wait_sandbox(&sandbox_a, "the resume", |v| v["status"] == "RUNNING").await;
    // Both supervisors serve commands again, each its own sandboxes.
    for (_, sandbox) in &on_b {
        let (s, b) = api.post(&format!("/api/v1/sandboxes/{sandbox}/resume"), json!({})).await;
        assert_eq!(s, 202, "{b}");
        api.wait_sandbox(sandbox, "the resume", |v| v["status"] == "RUNNING").await;
        assert_eq!(host_of(&sup, sandbox), 1);
    }

    // A supervisor that stops cleanly (SIGTERM) stops its sandboxes: only a crash leaves them.
    let executors: Vec<i32> = std::iter::once((0, sandbox_a.as_str()))
        .chain(on_b.iter().map(|(_, s)| (1, s.as_str())))
        .map(|(i, s)| procs::executor_pid(&sup[i].workspace(s)).expect("the executor runs"))
        .collect();
    for s in &mut sup {
        s.stop();
    }
    for pid in executors {
        assert!(procs::state(pid).is_none_or(|s| s == 'Z'), "executor {pid} outlived its supervisor's clean stop");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_from_an_environment_snapshot_goes_to_the_host_that_holds_it() {
    init();
    let llm = ScriptedLlm::start().await;
    let nats = NatsServer::start();
    let service = |name: &str, uid_base: &str| {
        Halyard::start(
            HalyardOptions::new(&llm.base_url)
                .serve(&nats.url, &[name])
                .set("HALYARD_SECRET", "a-shared-deployment-secret")
                .set("HALYARD_PROCESS_UID_BASE", uid_base),
        )
    };
    let sup = [service("sandbox", "210000"), service("sandbox", "260000")];
    let _agent = service("agent", "0");
    let _conversations = service("conversations", "0");
    let gateway = service("gateway", "0");
    let api = gateway.api(ALICE);
    let repo = tempfile::tempdir().unwrap();
    std::fs::set_permissions(repo.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(repo.path().join("README.md"), "# demo\n").unwrap();
    for args in [&["init", "-q"][..], &["add", "."], &["commit", "-qm", "init"]] {
        halyard_tests::git(repo.path(), args);
    }
    let env = json!({"setup": ["date +%s%N > installed-at.txt"]});
    let (s, v) = api.call(reqwest::Method::PUT, "/api/v1/environments/app", Some(env)).await;
    assert_eq!(s, 201, "{v}");
    let body = json!({"environment": "app", "repository": {"url": repo.path().to_string_lossy()}});

    // Set up once, on whichever host took the start: its snapshot is that host's.
    let (_, first) = api.start_ready(body.clone()).await;
    assert!(first["detail"].as_str().unwrap().contains("kept"), "{first}");
    let holder = host_of(&sup, first["sandbox_id"].as_str().unwrap());
    let installed = std::fs::read_to_string(sup[holder].workspace(first["sandbox_id"].as_str().unwrap()).join("installed-at.txt")).unwrap();
    let (_, list) = api.get("/api/v1/environments/snapshots").await;
    let id = list["items"][0]["id"].as_str().unwrap().to_owned();

    // Every later start goes there (whichever supervisor pulled it) and starts from it: none
    // sets up again on the other host.
    for _ in 0..4 {
        let asked = Instant::now();
        let (_, task) = api.start_ready(body.clone()).await;
        println!("ready in {:?}", asked.elapsed());
        let sandbox = task["sandbox_id"].as_str().unwrap();
        assert_eq!((task["snapshot"].as_str(), host_of(&sup, sandbox)), (Some(id.as_str()), holder), "{task}");
        assert_eq!(std::fs::read_to_string(sup[holder].workspace(sandbox).join("installed-at.txt")).unwrap(), installed);
    }
}

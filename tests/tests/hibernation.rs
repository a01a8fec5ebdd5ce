#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Hibernation, as a user sees it: a sandbox left idle for `HALYARD_SANDBOX_IDLE_STOP_SECS` keeps
//! nothing running (no executor, no shell, no server the agent left behind; a container is
//! stopped, not paused) and says why; its files stay. A look at the files, the terminal or a
//! message brings it back without the user doing anything, and the agent's next command runs in
//! a new shell in the directory it was in, with the user's secrets, told that the shell is new.
//! A hibernated sandbox does not count toward the running limits; waking it does.

use std::path::Path;

use halyard_tests::docker::{containers, inspect, require_engine};
use halyard_tests::events::finished_runs;
use halyard_tests::{Api, Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";

/// The processes whose working directory is under `dir` (the sandbox's executor and shells).
fn processes_in(dir: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(dir)))
        .collect()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
}

/// The agent's first run: a secret in the shell, a `cd`, and a server left running.
fn first_run(llm: &ScriptedLlm) {
    llm.push([
        Reply::tool(
            "terminal",
            json!({"command": "mkdir -p app/src && cd app/src && (setsid sleep 600 > /dev/null 2>&1 & echo $! > ../server.pid) && export LEFT=1 && echo ready", "security_risk": "low"}),
        ),
        Reply::finish("set up"),
    ]);
}

/// The agent's run after a wake-up: where its shell is, and whether the secret is there.
fn second_run(llm: &ScriptedLlm) {
    llm.push([
        Reply::tool(
            "terminal",
            json!({"command": "pwd; echo \"left=${LEFT:-unset}\"; test -n \"$DEPLOY_TOKEN\" && echo token-set", "security_risk": "low"}),
        ),
        Reply::finish("looked"),
    ]);
}

async fn hibernated(api: &Api, sandbox: &str) -> Value {
    let s = api.wait_sandbox(sandbox, "the idle sandbox to hibernate", |s| s["status"] == "HIBERNATED").await;
    assert!(s["detail"].as_str().unwrap_or_default().contains("hibernated after"), "{s}");
    assert_eq!(s["exposed_urls"], json!([]), "a hibernated sandbox exposes nothing: {s}");
    s
}

/// Sends a message that runs [`second_run`] and checks what the agent saw: a new shell, in its
/// last directory, with the secret, without what it had exported.
async fn message_wakes_it(llm: &ScriptedLlm, api: &Api, conv: &str) {
    second_run(llm);
    let (s, v) = api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "where are you?"})).await;
    assert_eq!(s, 202, "{v}");
    let events = api.wait_events(conv, "the run after waking", |ev| finished_runs(ev) == 2).await;
    let obs = events.iter().rev().find(|e| e["kind"] == "observation" && e["tool"] == "terminal").unwrap();
    let content = obs["content"].as_str().unwrap();
    assert!(content.starts_with("[This is a new shell"), "the agent is told its shell is new: {content}");
    assert!(content.contains("/app/src\nleft=unset\ntoken-set\n"), "its last directory, the secret, not the old export: {content}");
    assert!(!content.contains("s3cr3t-deploy"), "the secret's value never shows: {content}");
}

#[tokio::test]
async fn an_idle_process_sandbox_hibernates_and_wakes_on_a_look_or_a_message() {
    init();
    let llm = ScriptedLlm::start().await;
    first_run(&llm);
    let h = Halyard::start(
        HalyardOptions::new(&llm.base_url).set("HALYARD_SANDBOX_IDLE_STOP_SECS", "2").set("HALYARD_MAX_RUNNING_PER_USER", "1"),
    );
    let api = h.api(ALICE);
    assert_eq!(api.call(reqwest::Method::PUT, "/api/v1/secrets/DEPLOY_TOKEN", Some(json!({"value": "s3cr3t-deploy"}))).await.0, 201);
    let (conv, task) = api.start_ready(json!({"message": "set up"})).await;
    let sandbox = task["sandbox_id"].as_str().unwrap().to_owned();
    api.wait_events(&conv, "the first run", |ev| finished_runs(ev) == 1).await;
    let workspace = h.workspace(&sandbox);
    let root = workspace.parent().unwrap().to_owned();
    let server: u32 = std::fs::read_to_string(workspace.join("app/server.pid")).unwrap().trim().parse().unwrap();
    assert!(alive(server) && !processes_in(&root).is_empty(), "the sandbox runs while in use");

    // Idle: every process of the sandbox ends, the server the agent left in its own session
    // too; the files stay, and the conversation shows why.
    hibernated(&api, &sandbox).await;
    for _ in 0..50 {
        if !alive(server) && processes_in(&root).is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(!alive(server), "the agent's server ended with the sandbox");
    assert_eq!(processes_in(&root), Vec::<u32>::new(), "nothing of the sandbox runs");
    assert!(workspace.join("app/src").is_dir());
    api.wait_conversation(&conv, "the conversation to show it", |c| c["sandbox_status"] == "HIBERNATED").await;

    // It does not count toward the running limit: another conversation starts meanwhile...
    llm.push([Reply::tool("terminal", json!({"command": "sleep 30", "timeout": 60, "security_risk": "low"})), Reply::finish("slept")]);
    let (other, other_task) = api.start_ready(json!({"message": "take your time"})).await;
    api.wait_events(&other, "the other run's command", |ev| ev.iter().any(|e| e["kind"] == "action")).await;
    // ...and while its command runs, waking this one would pass the limit: refused, as a
    // start would be, with nothing lost.
    let (s, e) = api.get(&format!("/api/v1/conversations/{conv}/files")).await;
    assert_eq!((s, e["error"]["code"].as_str()), (429, Some("sandbox_quota_user")), "{e}");
    let other_sandbox = other_task["sandbox_id"].as_str().unwrap().to_owned();
    assert_eq!(api.call(reqwest::Method::DELETE, &format!("/api/v1/sandboxes/{other_sandbox}"), None).await.0, 202);
    for _ in 0..300 {
        if api.get(&format!("/api/v1/sandboxes/{other_sandbox}")).await.0 == 404 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    // A look at the files wakes it, answered as if it had never stopped.
    let (s, listing) = api.get(&format!("/api/v1/conversations/{conv}/files")).await;
    assert_eq!(s, 200, "{listing}");
    assert!(listing.to_string().contains("\"app\""), "{listing}");
    let woke = api.get(&format!("/api/v1/sandboxes/{sandbox}")).await.1;
    assert_eq!(woke["status"], "RUNNING", "{woke}");

    // Idle again; then a message wakes it, and the agent carries on where it was.
    hibernated(&api, &sandbox).await;
    message_wakes_it(&llm, &api, &conv).await;
}

#[tokio::test]
async fn an_idle_container_is_stopped_not_paused_and_a_message_starts_it_again() {
    init();
    require_engine();
    let llm = ScriptedLlm::start().await;
    first_run(&llm);
    let h = Halyard::start(
        HalyardOptions::new(&llm.base_url)
            .set("HALYARD_SANDBOX", "docker")
            .set("HALYARD_SANDBOX_POOL_SIZE", "0")
            .set("HALYARD_SANDBOX_IDLE_STOP_SECS", "2"),
    );
    let api = h.api(ALICE);
    assert_eq!(api.call(reqwest::Method::PUT, "/api/v1/secrets/DEPLOY_TOKEN", Some(json!({"value": "s3cr3t-deploy"}))).await.0, 201);
    let (conv, task) = api.start_ready(json!({"message": "set up"})).await;
    let sandbox = task["sandbox_id"].as_str().unwrap().to_owned();
    api.wait_events(&conv, "the first run", |ev| finished_runs(ev) == 1).await;
    let found = containers(&h.deployment(), Some(&format!("dev.halyard.sandbox={sandbox}")));
    let [container] = found.as_slice() else { panic!("one container for the sandbox: {found:?}") };

    hibernated(&api, &sandbox).await;
    assert_eq!(inspect(container, "{{.State.Status}}"), "exited", "stopped, not paused: its memory is freed");

    // The same container starts again (what the agent installed in it stays).
    message_wakes_it(&llm, &api, &conv).await;
    assert_eq!(inspect(container, "{{.State.Status}}"), "running");
    let (s, file) = api.get(&format!("/api/v1/conversations/{conv}/files?path=app/server.pid")).await;
    assert_eq!(s, 200, "{file}");
}

#[tokio::test]
async fn idle_conversations_leave_every_services_memory_and_come_back_from_the_log() {
    init();
    let llm = ScriptedLlm::start().await;
    let receiver = halyard_tests::Receiver::start().await;
    let h = Halyard::start(
        HalyardOptions::new(&llm.base_url)
            .set("HALYARD_SANDBOX_IDLE_STOP_SECS", "2")
            .set("HALYARD_IDLE_EVICT_SECS", "3")
            .set("HALYARD_WEBHOOK_ALLOW", "loopback"),
    );
    let api = h.api(ALICE);
    assert_eq!(api.post("/api/v1/webhooks", json!({"url": receiver.url})).await.0, 201);
    let mut convs = Vec::new();
    for i in 0..3 {
        llm.push([
            Reply::tool("terminal", json!({"command": format!("echo note {i} > note.txt"), "security_risk": "low"})),
            Reply::finish("noted"),
        ]);
        let (conv, _) = api.start_ready(json!({"message": format!("remember the number {i}")})).await;
        api.wait_events(&conv, "the run", |ev| finished_runs(ev) == 1).await;
        convs.push(conv);
    }
    // A client watched one of them, and left.
    api.ws(&convs[0], 0).await.close().await;
    // In use, every service holds something of them...
    let held = h.scrape().await;
    for gauge in ["halyard_agent_conversations_in_memory", "halyard_gateway_views_in_memory", "halyard_webhook_conversations_in_memory"] {
        assert!(held.sum(gauge, &[]) >= 1.0, "{gauge} counts the conversations in use");
    }
    // ...and idle, nothing: runs evicted, sandboxes hibernated, views and webhook lanes
    // forgotten, the client's channel gone.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let m = h.scrape().await;
        let left: Vec<(&str, f64)> =
            halyard_tests::IN_MEMORY_GAUGES.iter().map(|g| (*g, m.sum(g, &[]))).filter(|(_, v)| *v > 0.0).collect();
        if left.is_empty() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "idle conversations are still held in memory: {left:?}");
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    for conv in &convs {
        api.wait_conversation(conv, "its sandbox to hibernate", |c| c["sandbox_status"] == "HIBERNATED").await;
    }
    // Asked again, a conversation comes back from the log whole: the model sees what was said
    // and done before, and the sandbox wakes with its files.
    llm.push([Reply::tool("terminal", json!({"command": "cat note.txt", "security_risk": "low"})), Reply::finish("read")]);
    let (s, v) = api.post(&format!("/api/v1/conversations/{}/messages", convs[1]), json!({"text": "which number was it?"})).await;
    assert_eq!(s, 202, "{v}");
    let events = api.wait_events(&convs[1], "the answer", |ev| finished_runs(ev) == 2).await;
    let prompt = llm.requests().iter().rev().find(|r| r.to_string().contains("which number was it?")).cloned().unwrap_or_default();
    assert!(prompt.to_string().contains("remember the number 1"), "the history came back from the log: {prompt}");
    let obs = events.iter().rev().find(|e| e["kind"] == "observation" && e["tool"] == "terminal").unwrap();
    assert!(obs["content"].as_str().unwrap().contains("note 1\n"), "{obs}");
    halyard_tests::harness::assert_log_is_contiguous(&events);
}

#[tokio::test]
async fn a_share_link_never_wakes_a_hibernated_sandbox_on_its_owners_quota() {
    init();
    let llm = ScriptedLlm::start().await;
    first_run(&llm);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_SANDBOX_IDLE_STOP_SECS", "2"));
    let api = h.api(ALICE);
    let (conv, task) = api.start_ready(json!({"message": "set up"})).await;
    let sandbox = task["sandbox_id"].as_str().unwrap().to_owned();
    api.wait_events(&conv, "the first run", |ev| finished_runs(ev) == 1).await;
    let (s, link) = api.post(&format!("/api/v1/conversations/{conv}/share"), json!({})).await;
    assert_eq!(s, 201, "{link}");
    let token = link["token"].as_str().unwrap().to_owned();
    hibernated(&api, &sandbox).await;

    // Whoever holds the link reads what changed only while the sandbox runs: asleep, it stays
    // asleep, and the link says why.
    let resp = reqwest::Client::new().get(format!("{}/api/v1/shared/{token}/changes", h.http)).send().await.unwrap();
    let status = resp.status().as_u16();
    let e: Value = resp.json().await.unwrap();
    assert_eq!((status, e["error"]["code"].as_str()), (409, Some("sandbox_hibernated")), "{e}");
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert_eq!(api.get(&format!("/api/v1/sandboxes/{sandbox}")).await.1["status"], "HIBERNATED", "the link woke it");
    // Its owner's own look wakes it.
    let (s, _) = api.get(&format!("/api/v1/conversations/{conv}/changes")).await;
    assert_eq!(s, 200);
    assert_eq!(api.get(&format!("/api/v1/sandboxes/{sandbox}")).await.1["status"], "RUNNING");
}

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! The agent loop's guarantees: LLM failures, iteration limits, pause and resume, a sandbox
//! that dies, repository preparation.

use std::time::Duration;

use halyard_tests::events::last_status;
use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, git, init, procs};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";
const BOB: &str = "bob-secret-key";

#[tokio::test]
async fn llm_failures_are_retried_then_reported_and_the_conversation_goes_on() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::Status(500), Reply::Status(429), Reply::finish("made it")]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_LLM_MAX_RETRIES", "2"));
    let api = h.api(ALICE);
    let (conv, _) = api.start_ready(json!({"message": "go"})).await;
    let events = api.wait_events(&conv, "finish", |ev| last_status(ev).as_deref() == Some("finished")).await;
    assert_eq!(llm.requests().len(), 3, "two failures retried, then success");
    assert!(events.iter().all(|e| e["kind"] != "agent_error"));

    // Failing for good: one error event, status error, and the next message works.
    llm.push([Reply::Status(503), Reply::Status(503), Reply::Status(503)]);
    api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "again"})).await;
    let events = api.wait_events(&conv, "the error", |ev| last_status(ev).as_deref() == Some("error")).await;
    let err = events.iter().rev().find(|e| e["kind"] == "agent_error").expect("agent_error event");
    assert_eq!(err["code"], "llm_server_error");
    assert!(err["message"].as_str().unwrap().contains("503"), "{err}");
    assert_eq!(llm.requests().len(), 6);

    llm.push([Reply::Text("back".into())]);
    let (s, _) = api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "once more"})).await;
    assert_eq!(s, 202);
    api.wait_events(&conv, "recovery", |ev| ev.iter().any(|e| e["kind"] == "agent_message" && e["text"] == "back")).await;
}

#[tokio::test]
async fn the_iteration_limit_ends_a_run_with_an_error() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.fallback(|_| Reply::tool("think", json!({"thought": "hmm"})));
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_MAX_ITERATIONS", "3"));
    let api = h.api(ALICE);
    let (conv, _) = api.start_ready(json!({"message": "loop forever"})).await;
    let events = api.wait_events(&conv, "the limit", |ev| last_status(ev).as_deref() == Some("error")).await;
    let err = events.iter().rev().find(|e| e["kind"] == "agent_error").unwrap();
    assert_eq!(err["code"], "max_iterations");
    assert_eq!(events.iter().filter(|e| e["kind"] == "action").count(), 3);
    assert_eq!(llm.requests().len(), 3);
}

#[tokio::test]
async fn pause_freezes_the_sandbox_and_resume_continues_the_run() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::tool("terminal", json!({"command": "echo one > one.txt"}))]);
    llm.push((0..6).map(|i| Reply::Delay(Duration::from_millis(150), Box::new(Reply::tool("think", json!({"thought": format!("t{i}")}))))));
    llm.push([Reply::tool("terminal", json!({"command": "cat one.txt"})), Reply::finish("resumed fine")]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);
    // Titled at start, so no generated title event lands at an unpredictable moment.
    let (conv, task) = api.start_ready(json!({"message": "work slowly", "title": "slow work"})).await;
    let workspace = h.workspace(task["sandbox_id"].as_str().unwrap());
    api.wait_events(&conv, "first thoughts", |ev| ev.iter().filter(|e| e["tool"] == "think").count() >= 2).await;

    let (s, _) = api.post(&format!("/api/v1/conversations/{conv}/pause"), json!({})).await;
    assert_eq!(s, 202);
    let c = api.wait_conversation(&conv, "paused", |c| c["execution_status"] == "paused" && c["sandbox_status"] == "PAUSED").await;
    assert_eq!(c["status"], "READY");
    let pid = procs::executor_pid(&workspace).expect("executor process");
    assert_eq!(procs::state(pid), Some('T'), "the executor is frozen");
    // Nothing happens while paused.
    let before = api.events(&conv).await.len();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(api.events(&conv).await.len(), before);

    let (s, _) = api.post(&format!("/api/v1/conversations/{conv}/resume"), json!({})).await;
    assert_eq!(s, 202);
    let events = api.wait_events(&conv, "the run to finish after resume", |ev| last_status(ev).as_deref() == Some("finished")).await;
    assert_ne!(procs::state(pid), Some('T'));
    let cat = events.iter().rev().find(|e| e["kind"] == "observation" && e["tool"] == "terminal").unwrap();
    assert!(cat["content"].as_str().unwrap().starts_with("one"), "{cat}");
    let c = api.wait_conversation(&conv, "running sandbox", |c| c["sandbox_status"] == "RUNNING").await;
    assert_eq!(c["execution_status"], "finished");
}

/// Paused while a command runs: the command is frozen with the sandbox, and the resume waits
/// for its result and records it before the agent goes on (no action is left without one).
#[tokio::test]
async fn pausing_during_a_command_keeps_its_result() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::tool("terminal", json!({"command": "sleep 3; echo after-sleep"})), Reply::finish("done")]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);
    let (conv, _) = api.start_ready(json!({"message": "sleep a while", "title": "sleeper"})).await;
    api.wait_events(&conv, "the command to start", |ev| ev.iter().any(|e| e["kind"] == "action" && e["tool"] == "terminal")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (s, _) = api.post(&format!("/api/v1/conversations/{conv}/pause"), json!({})).await;
    assert_eq!(s, 202);
    api.wait_conversation(&conv, "paused", |c| c["execution_status"] == "paused" && c["sandbox_status"] == "PAUSED").await;
    let (s, _) = api.post(&format!("/api/v1/conversations/{conv}/resume"), json!({})).await;
    assert_eq!(s, 202);
    let events = api.wait_events(&conv, "the run to finish after resume", |ev| last_status(ev).as_deref() == Some("finished")).await;
    // The action has exactly one result, the command's own output, recorded before the next
    // LLM call.
    let action = events.iter().position(|e| e["kind"] == "action" && e["tool"] == "terminal").unwrap();
    let results: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e["kind"] == "observation" && e["tool_call_id"] == events[action]["tool_call_id"])
        .map(|(i, _)| i)
        .collect();
    assert_eq!(results.len(), 1, "{}", Value::Array(events.clone()));
    let result = &events[results[0]];
    assert!(result["content"].as_str().unwrap().contains("after-sleep"), "{result}");
    let next_call = events.iter().skip(action + 1).position(|e| e["kind"] == "llm_call").map(|i| i + action + 1).unwrap();
    assert!(results[0] < next_call, "the agent went on before the command's result: {}", Value::Array(events.clone()));
    // And the model saw it.
    let second = &llm.requests()[1];
    assert!(second.to_string().contains("after-sleep"), "{second}");
}

/// A conversation whose sandbox was deleted cannot go on, and says so at once rather than
/// waiting for a sandbox that will never answer.
#[tokio::test]
async fn a_message_after_the_sandbox_was_deleted_is_refused_at_once_with_a_way_forward() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::finish("hello")]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);
    let (conv, task) = api.start_ready(json!({"message": "hi", "title": "doomed"})).await;
    api.wait_events(&conv, "finish", |ev| last_status(ev).as_deref() == Some("finished")).await;
    let sandbox = task["sandbox_id"].as_str().unwrap();
    let (s, _) = api.call(reqwest::Method::DELETE, &format!("/api/v1/sandboxes/{sandbox}"), None).await;
    assert!(s == 202 || s == 204 || s == 200, "{s}");
    api.wait_conversation(&conv, "the sandbox to be deleted", |c| c["sandbox_status"] == "DELETED").await;
    // Refused, not accepted to wait: the answer is the refusal.
    for path in ["messages", "resume"] {
        let body = if path == "messages" { json!({"text": "go on"}) } else { json!({}) };
        let (s, e) = api.post(&format!("/api/v1/conversations/{conv}/{path}"), body).await;
        assert_eq!((s, e["error"]["code"].as_str()), (409, Some("sandbox_deleted")), "{path}: {e}");
        assert!(e["error"]["message"].as_str().unwrap().contains("POST /api/v1/conversations"), "{e}");
    }
    // Nothing was queued for the agent.
    let events = api.events(&conv).await;
    assert!(!events.iter().any(|e| e["kind"] == "user_message" && e["text"] == "go on"), "{}", Value::Array(events));
}

#[tokio::test]
async fn a_killed_sandbox_is_reported_and_reprovisioned_with_its_files() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::tool("terminal", json!({"command": "echo precious > keep.txt"})), Reply::finish("saved")]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);
    let (conv, task) = api.start_ready(json!({"message": "save a file"})).await;
    let workspace = h.workspace(task["sandbox_id"].as_str().unwrap());
    api.wait_events(&conv, "finish", |ev| last_status(ev).as_deref() == Some("finished")).await;

    let pid = procs::executor_pid(&workspace).expect("executor process");
    assert!(procs::group(pid).len() >= 2, "the sandbox's forwarder is in its group: {:?}", procs::group(pid));
    procs::kill(pid);
    let c = api.wait_conversation(&conv, "the death to be noticed", |c| c["sandbox_status"] == "ERROR").await;
    assert_eq!(c["status"], "READY");
    // What the executor left in its group (its forwarder, slirp4netns) ends with it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !procs::group(pid).is_empty() {
        assert!(std::time::Instant::now() < deadline, "left behind: {:?}", procs::group(pid));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    llm.push([Reply::tool("terminal", json!({"command": "cat keep.txt"})), Reply::finish("still there")]);
    api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "is it still there?"})).await;
    let events = api.wait_finished(&conv, 2).await;
    let cat = events.iter().rev().find(|e| e["kind"] == "observation" && e["tool"] == "terminal").unwrap();
    // The agent is told its shell is new (a restart, as after a hibernation).
    let content = cat["content"].as_str().unwrap();
    assert!(content.starts_with("[This is a new shell") && content.contains("\nprecious\n"), "{cat}");
    api.wait_conversation(&conv, "a new executor", |c| c["sandbox_status"] == "RUNNING").await;
    let new_pid = procs::executor_pid(&workspace).expect("new executor");
    assert_ne!(new_pid, pid);
}

fn make_repo(setup: &str) -> tempfile::TempDir {
    let repo = tempfile::tempdir().unwrap();
    let p = repo.path();
    // Readable by every user, as a repository shared on a host is: an isolated process sandbox
    // runs under a uid of its own.
    std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(p.join(".openhands")).unwrap();
    std::fs::write(p.join("README.md"), "# demo\n").unwrap();
    std::fs::write(p.join(".openhands/setup.sh"), setup).unwrap();
    std::fs::write(p.join(".openhands/pre-commit.sh"), "echo checked\n").unwrap();
    std::fs::write(p.join("AGENTS.md"), "Always answer in haiku.\n").unwrap();
    git(p, &["init", "-q"]);
    git(p, &["add", "."]);
    git(p, &["commit", "-qm", "init"]);
    git(p, &["checkout", "-qb", "feature"]);
    std::fs::write(p.join("feature.txt"), "on the branch\n").unwrap();
    git(p, &["add", "."]);
    git(p, &["commit", "-qm", "feature"]);
    git(p, &["checkout", "-q", "main"]);
    repo
}

#[tokio::test]
async fn a_repository_is_cloned_set_up_and_its_skills_loaded() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::finish("ok")]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);
    let repo = make_repo("echo setup-ran > setup-marker.txt\n");
    let url = repo.path().to_string_lossy().to_string();
    let (conv, task) = api.start_ready(json!({"message": "hi", "repository": {"url": url, "branch": "feature"}})).await;
    let ws = h.workspace(task["sandbox_id"].as_str().unwrap());
    assert_eq!(std::fs::read_to_string(ws.join("feature.txt")).unwrap(), "on the branch\n");
    assert_eq!(std::fs::read_to_string(ws.join("setup-marker.txt")).unwrap(), "setup-ran\n");
    assert!(std::fs::read_to_string(ws.join(".git/hooks/pre-commit")).unwrap().contains("pre-commit.sh"));
    let events = api.wait_events(&conv, "finish", |ev| last_status(ev).as_deref() == Some("finished")).await;
    let skills = &events[0]["skills"];
    assert!(skills.as_array().unwrap().iter().any(|s| s["name"] == "AGENTS.md"), "{skills}");
    let system = &llm.requests()[0]["messages"][0];
    assert_eq!(system["role"], "system");
    assert!(system["content"].as_str().unwrap().contains("Always answer in haiku."));
    let (_, c) = api.get(&format!("/api/v1/conversations/{conv}")).await;
    assert_eq!(c["repository"]["branch"], "feature");
}

#[tokio::test]
async fn a_failing_phase_is_named_in_the_start_task() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);

    let repo = make_repo("echo broken dependency >&2; exit 3\n");
    let (_, task) = api.post("/api/v1/conversations", json!({"repository": {"url": repo.path().to_string_lossy()}})).await;
    let task = api.wait_task(task["id"].as_str().unwrap(), &["READY", "ERROR"]).await;
    assert_eq!(task["status"], "ERROR");
    let detail = task["detail"].as_str().unwrap();
    assert!(detail.contains("RUNNING_SETUP_SCRIPT") && detail.contains("exit code 3") && detail.contains("broken dependency"), "{detail}");

    let (_, task) = api.post("/api/v1/conversations", json!({"repository": {"url": "/no/such/repository"}})).await;
    let task = api.wait_task(task["id"].as_str().unwrap(), &["READY", "ERROR"]).await;
    assert_eq!(task["status"], "ERROR");
    assert!(task["detail"].as_str().unwrap().contains("PREPARING_REPOSITORY"), "{task}");
    let conv = task["conversation_id"].as_str().unwrap();
    let (_, c) = api.get(&format!("/api/v1/conversations/{conv}")).await;
    assert_eq!(c["status"], "ERROR");
    let (s, resp) = api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "hello?"})).await;
    assert_eq!((s, resp["error"]["code"].as_str()), (409, Some("conversation_failed")));
}

/// A failed start shows what was asked and why it failed, in one status a person reads, and
/// can be tried again as it was asked.
#[tokio::test]
async fn a_failed_start_shows_its_message_and_reason_and_is_retried_as_asked() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);
    // The repository is not there yet: the clone fails.
    let repo = make_repo("echo set up\n");
    let away = repo.path().with_extension("away");
    std::fs::rename(repo.path(), &away).unwrap();
    let start = json!({"message": "count the files", "title": "retry me", "confirmation_policy": "risky",
        "repository": {"url": repo.path().to_string_lossy(), "branch": "feature"}});
    let (_, first) = api.post("/api/v1/conversations", start).await;
    let failed = api.wait_task(first["id"].as_str().unwrap(), &["READY", "ERROR"]).await;
    assert_eq!(failed["status"], "ERROR", "{failed}");
    let conv = failed["conversation_id"].as_str().unwrap().to_owned();
    let (_, c) = api.get(&format!("/api/v1/conversations/{conv}")).await;
    assert_eq!((c["state"].as_str(), c["message"].as_str()), (Some("start_failed"), Some("count the files")), "{c}");
    assert!(c["state_detail"].as_str().unwrap_or_default().contains("PREPARING_REPOSITORY"), "{c}");
    let (_, listed) = api.get("/api/v1/conversations?state=start_failed").await;
    assert_eq!(listed["items"][0]["id"].as_str(), Some(conv.as_str()), "{listed}");
    let (_, found) = api.get("/api/v1/conversations?q=count%20files").await;
    assert_eq!(found["count"], 1, "the first message is searched: {found}");
    let (s, e) = api.get("/api/v1/conversations?state=broken").await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_query")), "{e}");
    let old_sandbox = c["sandbox_id"].as_str().unwrap().to_owned();
    // Nothing runs in a failed start's sandbox: it is gone, and counts against no quota.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while api.get(&format!("/api/v1/sandboxes/{old_sandbox}")).await.0 != 404 {
        assert!(std::time::Instant::now() < deadline, "the failed start's sandbox was not deleted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Once the repository is there, the same request starts: message, title, branch, policy.
    std::fs::rename(&away, repo.path()).unwrap();
    llm.push([Reply::finish("three files")]);
    let (s, again) = api.post(&format!("/api/v1/conversations/{conv}/retry"), json!({})).await;
    assert_eq!(s, 202, "{again}");
    assert_ne!(again["id"], first["id"]);
    let ready = api.wait_task(again["id"].as_str().unwrap(), &["READY", "ERROR"]).await;
    assert_eq!(ready["status"], "READY", "{ready}");
    let events = api.wait_events(&conv, "the retried run", |ev| last_status(ev).as_deref() == Some("finished")).await;
    let started = events.iter().find(|e| e["kind"] == "conversation_started").cloned().unwrap_or_default();
    assert_eq!(started["confirmation_policy"], "risky", "{started}");
    assert!(events.iter().any(|e| e["kind"] == "user_message" && e["text"] == "count the files"));
    let c = api.wait_conversation(&conv, "finished", |c| c["state"] == "finished").await;
    assert_eq!((c["title"].as_str(), c["repository"]["branch"].as_str()), (Some("retry me"), Some("feature")), "{c}");
    assert_eq!(c["start_task_id"], again["id"]);
    assert_ne!(c["sandbox_id"].as_str(), Some(old_sandbox.as_str()));
    assert!(h.workspace(c["sandbox_id"].as_str().unwrap()).join("feature.txt").exists(), "the branch was cloned");
    // The conversation keeps its new sandbox.
    let (_, c) = api.get(&format!("/api/v1/conversations/{conv}")).await;
    assert_eq!((c["state"].as_str(), c["sandbox_status"].as_str()), (Some("finished"), Some("RUNNING")), "{c}");

    // Only a failed start is retried; another user's conversation is not found.
    let (s, e) = api.post(&format!("/api/v1/conversations/{conv}/retry"), json!({})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (409, Some("start_not_failed")), "{e}");
    let (s, _) = h.api(BOB).post(&format!("/api/v1/conversations/{conv}/retry"), json!({})).await;
    assert_eq!(s, 404);
}

#[tokio::test]
async fn an_idle_sandbox_is_paused_with_a_reason_and_a_message_resumes_it() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::tool("terminal", json!({"command": "sleep 3; echo slept > s.txt", "timeout": 30})), Reply::finish("done")]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_SANDBOX_IDLE_PAUSE_SECS", "2"));
    let api = h.api(ALICE);
    let (conv, task) = api.start_ready(json!({"message": "sleep a little"})).await;
    let sandbox = task["sandbox_id"].as_str().unwrap().to_owned();
    // A command running longer than the idle limit is activity: the sandbox is not paused
    // under it, and the run finishes.
    api.wait_finished(&conv, 1).await;
    assert!(h.workspace(&sandbox).join("s.txt").exists());
    // Then, idle: paused, saying why.
    let s = api.wait_sandbox(&sandbox, "the idle pause", |s| s["status"] == "PAUSED").await;
    assert!(s["detail"].as_str().unwrap().contains("without activity"), "{s}");
    api.wait_conversation(&conv, "the conversation to show it", |c| c["sandbox_status"] == "PAUSED").await;
    // A new message resumes it.
    llm.push([Reply::tool("terminal", json!({"command": "cat s.txt"})), Reply::finish("read")]);
    assert_eq!(api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "read it"})).await.0, 202);
    let events = api.wait_finished(&conv, 2).await;
    let obs = events.iter().rev().find(|e| e["kind"] == "observation" && e["tool"] == "terminal").unwrap();
    assert!(obs["content"].as_str().unwrap().starts_with("slept"), "{obs}");
}

/// Runs `replies` as one conversation's run and returns its events once it has ended.
async fn run_until_it_ends(llm: &ScriptedLlm, api: &halyard_tests::Api, replies: Vec<Reply>) -> Vec<Value> {
    llm.push(replies);
    let (conv, _) = api.start_ready(json!({"message": "go"})).await;
    api.wait_events(&conv, "the run to end", |ev| {
        ev.iter()
            .any(|e| e["kind"] == "execution_status" && ["finished", "stuck", "error"].contains(&e["status"].as_str().unwrap_or_default()))
    })
    .await
}

/// An agent that repeats itself is stopped, saying which of the four patterns it fell into;
/// one that loops while making progress is not.
#[tokio::test]
async fn a_repeating_agent_is_stopped_as_stuck_and_a_loop_that_makes_progress_is_not() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);
    let terminal = |c: &str| Reply::tool("terminal", json!({"command": c}));
    let think = |t: &str| Reply::tool("think", json!({"thought": t}));
    let cases: Vec<(&str, Vec<Reply>, usize)> = vec![
        ("same result 4 times", (0..4).map(|_| terminal("echo same")).collect(), 4),
        ("failed with the same error 3 times", (0..3).map(|_| terminal("cat /no/such/file")).collect(), 3),
        ("only talked to itself", (0..8).map(|i| think(&format!("hmm {i}"))).collect(), 8),
        (
            "alternated between two actions 3 times each",
            (0..6).map(|i| terminal(if i % 2 == 0 { "echo a" } else { "echo b" })).collect(),
            6,
        ),
    ];
    for (pattern, replies, steps) in cases {
        let events = run_until_it_ends(&llm, &api, replies).await;
        let error = events
            .iter()
            .find(|e| e["kind"] == "agent_error")
            .unwrap_or_else(|| panic!("{pattern}: no error: {}", Value::Array(events.clone())));
        assert_eq!(error["code"], "stuck", "{error}");
        assert!(error["message"].as_str().unwrap().contains(pattern), "{error}");
        // The last status, not the last event: the generated title can land after the run's end.
        let status = events.iter().rev().find(|e| e["kind"] == "execution_status").unwrap();
        assert_eq!((status["kind"].as_str(), status["status"].as_str()), (Some("execution_status"), Some("stuck")), "{status}");
        assert!(status["reason"].as_str().unwrap().contains(pattern), "{status}");
        assert_eq!(events.iter().filter(|e| e["kind"] == "action").count(), steps, "{pattern}: stopped at the right step");
    }

    // Ten rounds of the same command whose output changes, then finish: not stuck.
    let count = "n=$(cat counter 2>/dev/null || echo 0); echo $((n+1)) > counter; cat counter";
    let mut replies: Vec<Reply> = (0..10).map(|_| terminal(count)).collect();
    replies.push(Reply::finish("counted to ten"));
    let events = run_until_it_ends(&llm, &api, replies).await;
    assert!(events.iter().all(|e| e["kind"] != "agent_error"), "{}", Value::Array(events.clone()));
    assert_eq!(last_status(&events).as_deref(), Some("finished"));
    // A stuck conversation takes a message and goes on.
    let (conv, _) = api.start_ready(json!({})).await;
    llm.push((0..4).map(|_| terminal("echo again")));
    api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "loop"})).await;
    api.wait_events(&conv, "stuck", |ev| ev.iter().any(|e| e["status"] == "stuck")).await;
    let (_, view) = api.get(&format!("/api/v1/conversations/{conv}")).await;
    assert_eq!(view["execution_status"], "stuck", "{view}");
    llm.push([Reply::finish("unstuck")]);
    api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "try something else"})).await;
    api.wait_finished(&conv, 1).await;
}

/// Whether a process whose command line contains `needle` runs on this machine.
fn running(needle: &str) -> bool {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .any(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").contains(needle)))
}

/// `interrupt` stops a command that would run for ten minutes, at once: the step ends with what
/// it printed and a note, the run waits for the user, the sandbox keeps running, and the next
/// message goes on.
#[tokio::test]
async fn interrupt_stops_a_long_command_now_and_the_conversation_goes_on() {
    init();
    let llm = ScriptedLlm::start().await;
    let marker = format!("sleep 6{}", std::process::id() % 100 + 100);
    llm.push([Reply::tool("terminal", json!({"command": format!("echo started; {marker}; echo never"), "timeout": 900}))]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);
    let (conv, task) = api.start_ready(json!({"message": "wait a long time"})).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !running(&marker) {
        assert!(std::time::Instant::now() < deadline, "the long command never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (s, answer) = api.post(&format!("/api/v1/conversations/{conv}/interrupt"), json!({})).await;
    assert_eq!(s, 202, "{answer}");
    let events = api
        .wait_events(&conv, "the interrupted step", |ev| {
            ev.iter().any(|e| e["kind"] == "execution_status" && e["reason"] == "interrupted by the user")
        })
        .await;
    let obs = events.iter().find(|e| e["kind"] == "observation" && e["tool"] == "terminal").expect("an observation");
    let content = obs["content"].as_str().unwrap();
    assert!(content.contains("started") && content.contains("[Interrupted by the user.]") && !content.contains("never"), "{content}");
    assert_eq!(last_status(&events).as_deref(), Some("idle"), "the run waits for the user");
    assert!(!running(&marker), "the command still runs in the sandbox");
    let (_, sandbox) = api.get(&format!("/api/v1/sandboxes/{}", task["sandbox_id"].as_str().unwrap())).await;
    assert_eq!(sandbox["status"], "RUNNING", "{sandbox}");

    llm.push([Reply::tool("terminal", json!({"command": "echo still here"})), Reply::finish("back")]);
    api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "go on"})).await;
    let events = api.wait_finished(&conv, 1).await;
    assert!(events.iter().any(|e| e["kind"] == "observation" && e["content"].as_str().unwrap_or_default().starts_with("still here")));
    // Interrupting a conversation with no run is accepted and changes nothing.
    let before = api.events(&conv).await.len();
    assert_eq!(api.post(&format!("/api/v1/conversations/{conv}/interrupt"), json!({})).await.0, 202);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(api.events(&conv).await.len(), before);
}

/// Every LLM call's tokens and cost add up in the conversation's view; a budget in tokens or in
/// dollars ends a run with `budget_exceeded` before a call would pass it.
#[tokio::test]
async fn llm_calls_are_metered_and_a_budget_stops_a_run_before_it_is_passed() {
    init();
    let llm = ScriptedLlm::start().await;
    // USD per million tokens: prompt, completion, cached.
    let (p, c, k) = (10.0, 20.0, 2.5);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_LLM_PRICE", "10,20,2.5"));
    let api = h.api(ALICE);
    let price =
        |prompt: u64, completion: u64, cached: u64| ((prompt - cached) as f64 * p + cached as f64 * k + completion as f64 * c) / 1e6;

    llm.push([Reply::tool("terminal", json!({"command": "echo one"})), Reply::finish("done")]);
    let (conv, _) = api.start_ready(json!({"message": "count"})).await;
    let events = api.wait_finished(&conv, 1).await;
    let mut total = 0.0;
    for (call, (prompt, completion, cached)) in events.iter().filter(|e| e["kind"] == "llm_call").zip(llm.usages()) {
        let want = price(prompt, completion, cached);
        assert!((call["cost_usd"].as_f64().unwrap() - want).abs() < 1e-9, "{call} vs {want}");
        total += want;
    }
    let (_, view) = api.get(&format!("/api/v1/conversations/{conv}")).await;
    assert_eq!(view["metrics"]["llm_calls"], 2);
    assert!((view["metrics"]["cost_usd"].as_f64().unwrap() - total).abs() < 1e-6, "{view}");

    // Endless work, each step different (not stuck): only the budget stops it.
    llm.fallback(|_| Reply::tool("terminal", json!({"command": "date +%N"})));
    let cases = [(json!({"max_tokens": 3000}), "token budget of 3000"), (json!({"max_budget_usd": 0.03}), "budget of $0.03")];
    for (limit, says) in cases {
        let asked = llm.requests().len();
        let mut body = json!({"message": "work forever"});
        body.as_object_mut().unwrap().extend(limit.as_object().unwrap().clone());
        let (conv, _) = api.start_ready(body).await;
        let events = api.wait_events(&conv, "the budget to stop it", |ev| ev.iter().any(|e| e["kind"] == "agent_error")).await;
        let error = events.iter().find(|e| e["kind"] == "agent_error").unwrap();
        assert_eq!(error["code"], "budget_exceeded", "{error}");
        assert!(error["message"].as_str().unwrap().contains(says), "{error}");
        let calls: Vec<&Value> = events.iter().filter(|e| e["kind"] == "llm_call").collect();
        assert!(calls.len() >= 2, "the budget allowed some calls: {}", calls.len());
        assert_eq!(calls.len(), llm.requests().len() - asked, "every call is recorded");
        let tokens: u64 = calls.iter().map(|e| e["prompt_tokens"].as_u64().unwrap() + e["completion_tokens"].as_u64().unwrap()).sum();
        let cost: f64 = calls.iter().map(|e| e["cost_usd"].as_f64().unwrap()).sum();
        if limit.get("max_tokens").is_some() {
            assert!(tokens <= 3000, "passed the token budget: {tokens}");
        } else {
            assert!(cost <= 0.03, "passed the dollar budget: {cost}");
        }
    }
    // A budget too small for even one call stops the run before it asks the LLM.
    let asked = llm.requests().len();
    let (conv, _) = api.start_ready(json!({"message": "hi", "max_tokens": 5})).await;
    api.wait_events(&conv, "refused", |ev| ev.iter().any(|e| e["code"] == "budget_exceeded")).await;
    assert_eq!(llm.requests().len(), asked);
    let (s, e) = api.post("/api/v1/conversations", json!({"max_budget_usd": -1})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_field")), "{e}");
}

/// `ask` answers a question from the conversation's history with one LLM call (no tools, the
/// history as a transcript), during a live run too, without adding to the log or disturbing the
/// run; another user gets 404.
#[tokio::test]
async fn ask_answers_from_the_history_without_touching_the_log_or_the_run() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([
        Reply::tool("terminal", json!({"command": "echo made-a-change > notes.txt && echo done"})),
        Reply::finish("wrote notes.txt"),
    ]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);
    let (conv, _) = api.start_ready(json!({"message": "write some notes"})).await;
    let before = api.wait_finished(&conv, 1).await;

    llm.push([Reply::Text("You wrote notes.txt with the word made-a-change.".into())]);
    let (s, answer) = api.post(&format!("/api/v1/conversations/{conv}/ask"), json!({"question": "What did you write?"})).await;
    assert_eq!(s, 200, "{answer}");
    assert_eq!(answer["answer"], "You wrote notes.txt with the word made-a-change.");
    let request = llm.requests().last().cloned().unwrap();
    assert!(request.get("tools").is_none(), "a question offers no tools: {request}");
    let prompt = request["messages"].to_string();
    assert!(prompt.contains("write some notes") && prompt.contains("made-a-change") && prompt.contains("What did you write?"), "{prompt}");
    assert_eq!(api.events(&conv).await, before, "the log is unchanged");

    // During a run: the run goes on and finishes as scripted.
    llm.push([Reply::Delay(Duration::from_millis(400), Box::new(Reply::tool("terminal", json!({"command": "echo step"}))))]);
    api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "one more step"})).await;
    api.wait_events(&conv, "the run", |ev| ev.iter().filter(|e| e["status"] == "running").count() == 2).await;
    // The run's LLM call is in flight. What comes next depends on who asks: a question (no
    // tools) is answered, the run's next call finishes it.
    llm.fallback(
        |request| {
            if request.get("tools").is_none() { Reply::Text("It is taking one more step.".into()) } else { Reply::finish("stepped") }
        },
    );
    let (s, answer) = api.post(&format!("/api/v1/conversations/{conv}/ask"), json!({"question": "What are you doing?"})).await;
    assert_eq!(s, 200, "{answer}");
    let events = api.wait_finished(&conv, 2).await;
    assert!(events.iter().any(|e| e["kind"] == "observation" && e["content"].as_str().unwrap_or_default().starts_with("step")));
    assert!(events.iter().all(|e| !e.to_string().contains("What are you doing?")), "the question is not in the log");

    let (s, _) = h.api("bob-secret-key").post(&format!("/api/v1/conversations/{conv}/ask"), json!({"question": "hi"})).await;
    assert_eq!(s, 404);
    let (s, e) = api.post(&format!("/api/v1/conversations/{conv}/ask"), json!({"question": " "})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_field")), "{e}");
}

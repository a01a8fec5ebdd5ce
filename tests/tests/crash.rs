#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Crash safety: `halyard up` killed with SIGKILL in the middle of a run, then started again on
//! the same data dir. Nothing is lost, nothing is duplicated, the cut-off step is reported, and
//! the run goes on from the log by itself.

use std::time::{Duration, Instant};

use halyard_tests::harness::assert_log_is_contiguous;
use halyard_tests::procs;
use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use serde_json::json;

const ALICE: &str = "alice-secret-key";

#[tokio::test]
async fn sigkill_while_the_llm_thinks_then_restart() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::tool("terminal", json!({"command": "echo before > marker.txt"})), Reply::Hang]);
    let mut h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);
    let (conv, task) = api.start_ready(json!({"message": "start working", "title": "survivor"})).await;
    llm.wait_requests(2).await;
    let before = api.wait_events(&conv, "the first observation", |ev| ev.iter().any(|e| e["kind"] == "observation")).await;

    h.kill9();
    llm.release();
    // The run goes on after the restart, in the same workspace.
    llm.push([Reply::tool("terminal", json!({"command": "cat marker.txt"})), Reply::finish("continued")]);
    h.restart();
    let api = h.api(ALICE);

    // Everything is still there, identical.
    let (s, c) = api.get(&format!("/api/v1/conversations/{conv}")).await;
    assert_eq!(s, 200, "{c}");
    assert_eq!(c["title"], "survivor");
    let (_, list) = api.get("/api/v1/conversations").await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    let (_, t) = api.get(&format!("/api/v1/start-tasks/{}", task["id"].as_str().unwrap())).await;
    assert_eq!(t["status"], "READY");
    let events = api.wait_finished(&conv, 1).await;
    assert_eq!(&events[..before.len()], &before[..], "history changed across the restart");
    assert_log_is_contiguous(&events);
    assert!(events.iter().any(|e| e["code"] == "run_interrupted"), "the cut-off run was not reported");
    let c = api.wait_conversation(&conv, "status finished", |c| c["execution_status"] == "finished").await;
    assert_eq!(c["last_event_seq"], events.len());
    let cat = events.iter().rev().find(|e| e["kind"] == "observation" && e["tool"] == "terminal").unwrap();
    assert!(cat["content"].as_str().unwrap().starts_with("before"), "{cat}");
    assert_eq!(events.iter().filter(|e| e["kind"] == "user_message").count(), 1);
    // The LLM was given the whole history, the first message included.
    let last_request = llm.requests().last().cloned().unwrap();
    assert!(last_request["messages"].to_string().contains("start working"));

    // And it all survives a clean restart too.
    h.stop();
    h.restart();
    let api = h.api(ALICE);
    assert_eq!(api.events(&conv).await, events);
}

#[tokio::test]
async fn sigkill_during_a_tool_call_then_restart() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::tool("terminal", json!({"command": "echo started > s.txt; sleep 20; echo never > n.txt", "timeout": 60}))]);
    let mut h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);
    let (conv, task) = api.start_ready(json!({"message": "long job"})).await;
    let workspace = h.workspace(task["sandbox_id"].as_str().unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    while !workspace.join("s.txt").exists() {
        assert!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The command runs; its action is (or is about to be) projected. (Other writers, such as
    // the title setter, may append after it: the action need not be the last event.)
    let before = api
        .wait_events(&conv, "the action", |ev| ev.iter().any(|e| e["kind"] == "action") && !ev.iter().any(|e| e["kind"] == "observation"))
        .await;

    h.kill9();
    // The run goes on after the restart: the model is told the call was cut off.
    llm.push([Reply::Text("ok, starting over".into())]);
    h.restart();
    let api = h.api(ALICE);
    let after = api.wait_events(&conv, "an answer", |ev| ev.iter().any(|e| e["text"] == "ok, starting over")).await;
    assert_eq!(&after[..before.len()], &before[..]);
    assert_log_is_contiguous(&after);
    assert!(after.iter().any(|e| e["code"] == "run_interrupted"));
    let obs = after.iter().find(|e| e["kind"] == "observation").expect("the cut-off call's result is recorded");
    assert_eq!(obs["is_error"], true);

    // The LLM call is well-formed: the cut-off tool call has its recorded result.
    let req = llm.requests().last().cloned().unwrap();
    let msgs = req["messages"].as_array().unwrap();
    let call_id = msgs.iter().find_map(|m| m["tool_calls"][0]["id"].as_str()).unwrap();
    let result = msgs.iter().find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id).expect("a result for the cut-off call");
    assert!(result["content"].as_str().unwrap().contains("Interrupted"));
}

/// A sandbox whose supervisor was killed while it made it (its record says `STARTING`, its
/// workspace was not there yet) is made again after the restart, not reported `MISSING`: its
/// start still waits for it, and nothing of it was there to lose. The record is the one such a
/// kill leaves (chaos runs met it: the start failed with "workspace directory is gone").
#[tokio::test]
async fn a_sandbox_cut_short_while_starting_is_made_after_the_restart() {
    use halyard_platform::bus;
    use halyard_protocol::command::SandboxCommand;
    use halyard_protocol::system::{SandboxStatus, SystemRecord};
    use halyard_protocol::{Envelope, SandboxId, subjects};
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::finish("done")]);
    let mut h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);
    let (conv, task) = api.start_ready(json!({"message": "go"})).await;
    api.wait_finished(&conv, 1).await;
    // A record as a kill between `STARTING` and the workspace's making leaves it: the real
    // sandbox's, for another id, with no process and no workspace.
    let js = async_nats::jetstream::new(h.nats_client("admin").await);
    let real: SandboxId = task["sandbox_id"].as_str().unwrap().parse().unwrap();
    let (_, env) = bus::last_record::<SystemRecord>(&js, subjects::SYSTEM_STREAM, &subjects::sandbox_record(real)).await.unwrap().unwrap();
    let SystemRecord::Sandbox(mut record) = env.payload else { panic!("not a sandbox record") };
    let cut = SandboxId::new();
    record.sandbox_id = cut;
    record.status = SandboxStatus::Starting;
    (record.pid, record.detail, record.exposed_urls) = (None, None, Vec::new());
    // (No conversation's: the real one keeps its own sandbox.)
    record.conversation_id = None;
    let forged = Envelope::new(SystemRecord::Sandbox(record), halyard_platform::now_ms());
    bus::publish(&js, subjects::sandbox_record(cut), &forged).await.unwrap();

    h.kill9();
    h.restart();
    let js = async_nats::jetstream::new(h.nats_client("admin").await);
    let status = |js: async_nats::jetstream::Context| async move {
        let last = bus::last_record::<SystemRecord>(&js, subjects::SYSTEM_STREAM, &subjects::sandbox_record(cut)).await.unwrap();
        match last.map(|(_, e)| e.payload) {
            Some(SystemRecord::Sandbox(s)) => (s.status, s.detail),
            other => panic!("not a sandbox record: {other:?}"),
        }
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (now, detail) = status(js.clone()).await;
        assert_ne!(now, SandboxStatus::Missing, "a sandbox cut short while starting was given up: {detail:?}");
        if now == SandboxStatus::Running {
            break;
        }
        assert!(Instant::now() < deadline, "the sandbox was not made again: {now:?} {detail:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Its workspace is there, and it goes when deleted.
    assert!(h.workspace(&cut.to_string()).exists());
    bus::send(&js, subjects::sandbox_command(cut), SandboxCommand::Delete { sandbox_id: cut }, None).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while status(js.clone()).await.0 != SandboxStatus::Deleted {
        assert!(Instant::now() < deadline, "the sandbox was not deleted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The executors running in `sandboxes` (the supervisor's directory of them), each with the
/// sandbox whose workspace it serves.
fn executors_in(sandboxes: &std::path::Path) -> Vec<(String, i32)> {
    let dirs = std::fs::read_dir(sandboxes).into_iter().flatten().flatten();
    let each = dirs.map(|d| (d.file_name().to_string_lossy().into_owned(), procs::executor_pids(&d.path().join("workspace"))));
    each.flat_map(|(sandbox, pids)| pids.into_iter().map(move |pid| (sandbox.clone(), pid))).collect()
}

/// Whether process `pid` listens on a TCP port in its network (the executor does once it has
/// said where, before its supervisor records it).
fn listening(pid: i32) -> bool {
    // State `0A` is LISTEN; the table is the process's own network namespace's.
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
    table.lines().skip(1).any(|l| l.split_whitespace().nth(3) == Some("0A"))
}

/// A supervisor killed after it spawned a sandbox's executor but before any record named it
/// leaves that executor running. The start is made again after the restart, and the executor
/// left behind is ended: one executor serves the workspace, not two, and none outlives the
/// sandbox.
#[tokio::test]
async fn an_executor_a_killed_start_left_running_is_ended_when_its_sandbox_is_made_again() {
    init();
    let llm = ScriptedLlm::start().await;
    // A start cut short is handed out again after the commands' ack wait: 3 s, not 30.
    let mut h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_COMMAND_ACK_WAIT_MS", "3000"));
    let sandboxes = h.workspace("-").parent().and_then(|p| p.parent()).unwrap().to_owned();
    // The kill must land after the executor was spawned and before its record names it; one
    // that lands after (its record was faster than the look at `/proc`) is tried again.
    let mut tried = Vec::new();
    for _ in 0..5 {
        let api = h.api(ALICE);
        llm.push([Reply::finish("done")]);
        let (s, task) = api.post("/api/v1/conversations", json!({"message": "go"})).await;
        assert_eq!(s, 202, "{task}");
        // Killed the moment the executor listens: its start is under way, not recorded.
        let deadline = Instant::now() + Duration::from_secs(30);
        let (sandbox, left) = loop {
            if let Some(found) = executors_in(&sandboxes).into_iter().find(|(s, pid)| !tried.contains(s) && listening(*pid)) {
                break found;
            }
            assert!(Instant::now() < deadline, "no executor started");
        };
        h.kill9();
        assert!(procs::state(left).is_some_and(|s| s != 'Z'), "the executor died with its supervisor");
        tried.push(sandbox.clone());
        h.restart();
        let api = h.api(ALICE);
        let task = api.wait_task(task["id"].as_str().unwrap(), &["READY"]).await;
        assert_eq!(task["sandbox_id"], sandbox.as_str());
        api.wait_finished(task["conversation_id"].as_str().unwrap(), 1).await;
        if h.log().lines().any(|l| l.contains("adopted running executor") && l.contains(&sandbox)) {
            continue;
        }
        let serving = procs::executor_pids(&h.workspace(&sandbox));
        assert_eq!(serving.len(), 1, "executors in the workspace: {serving:?}");
        assert_ne!(serving[0], left, "the executor left behind was adopted without a record of it");
        // (Given the two seconds a group has to end before it is killed.)
        let deadline = Instant::now() + Duration::from_secs(10);
        while procs::state(left).is_some_and(|s| s != 'Z') {
            assert!(Instant::now() < deadline, "the executor left behind still runs beside the new one");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        return;
    }
    panic!("five kills all landed after the executor's record named it");
}

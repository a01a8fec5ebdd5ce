#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Work that is checked: a start's `result_schema` (the agent's `finish` carries a `result`
//! checked against it; a wrong one is sent back with why), its `verify` checks (a command in
//! the sandbox, an LLM judge) that send the agent back when they fail, up to
//! `max_verify_attempts`, each a `verification` event; the result and the verdict on the
//! conversation, in a webhook's deliveries, and on `halyard run --result-schema`'s stdout.

use std::time::{Duration, Instant};

use halyard_tests::{Api, Halyard, HalyardOptions, Receiver, Reply, ScriptedLlm, init};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {"files": {"type": "integer", "minimum": 0}, "summary": {"type": "string"}},
        "required": ["files", "summary"],
        "additionalProperties": false
    })
}

fn finish_with(result: Value) -> Reply {
    Reply::tool("finish", json!({"message": "done", "result": result}))
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

/// The `finish` observations (what the agent was told when it called `finish`).
fn finish_results(events: &[Value]) -> Vec<&Value> {
    events.iter().filter(|e| e["kind"] == "observation" && e["tool"] == "finish").collect()
}

async fn start_finished(api: &Api, body: Value) -> (String, Vec<Value>) {
    let (conv, _) = api.start_ready(body).await;
    let events = api.wait_finished(&conv, 1).await;
    (conv, events)
}

#[tokio::test]
async fn a_result_is_checked_against_its_schema_and_reaches_the_conversation_and_webhooks() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_WEBHOOK_ALLOW", "loopback"));
    let api = h.api(ALICE);
    let receiver = Receiver::start().await;
    let (s, w) = api.post("/api/v1/webhooks", json!({"url": receiver.url})).await;
    assert_eq!(s, 201, "{w}");

    // The first result is the wrong shape: the agent is told why and gives a right one.
    llm.push([finish_with(json!({"files": "two"})), finish_with(json!({"files": 2, "summary": "fixed both"}))]);
    let (conv, events) = start_finished(&api, json!({"message": "fix it", "title": "typed", "result_schema": schema()})).await;

    // The model was offered `finish` with the schema as its `result`.
    let request = &llm.requests()[0];
    let finish = request["tools"].as_array().unwrap().iter().find(|t| t["function"]["name"] == "finish").unwrap();
    assert_eq!(finish["function"]["parameters"]["properties"]["result"], schema());
    assert_eq!(finish["function"]["parameters"]["required"], json!(["message", "result"]));
    let told = finish_results(&events);
    assert_eq!(told.len(), 2, "{told:?}");
    let why = told[0]["content"].as_str().unwrap();
    assert!(told[0]["is_error"] == true && why.contains("does not match its schema") && why.contains("/files"), "{why}");
    let results = of_kind(&events, "result");
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["result"], json!({"files": 2, "summary": "fixed both"}));
    let view = api.wait_conversation(&conv, "its result", |c| !c["result"].is_null()).await;
    assert_eq!(view["result"], json!({"files": 2, "summary": "fixed both"}));

    // A webhook receiver gets the result event like any other.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = receiver.accepted().iter().map(|r| r.json()).any(|e| e["kind"] == "result" && e["result"]["files"] == 2);
        if got {
            break;
        }
        assert!(Instant::now() < deadline, "the result event was not delivered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Starts that cannot be checked are refused in words.
    for (body, says) in [
        (json!({"message": "x", "result_schema": {"type": 12}}), "not a valid JSON Schema"),
        (json!({"message": "x", "result_schema": {"$ref": "https://example.com/s.json"}}), "another document"),
        (json!({"message": "x", "verify": [{"command": "true", "judge": {"rubric": "r"}}]}), "one of them"),
        (json!({"message": "x", "verify": [{"command": "true"}], "max_verify_attempts": 0}), "max_verify_attempts"),
    ] {
        let (s, e) = api.post("/api/v1/conversations", body).await;
        assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_field")), "{e}");
        assert!(e["error"]["message"].as_str().unwrap().contains(says), "{e}");
    }
}

#[tokio::test]
async fn a_failing_check_sends_the_agent_back_and_the_second_attempt_passes() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);

    // The check is the project's test: the agent finishes before it passes, is sent back with
    // what the test printed, fixes it, and finishes again.
    llm.push([
        Reply::finish("done"),
        Reply::tool("terminal", json!({"command": "echo ok > status.txt", "security_risk": "low"})),
        Reply::finish("done now"),
    ]);
    let check = "test \"$(cat status.txt 2>/dev/null)\" = ok || { echo 'status.txt is not ok'; exit 3; }";
    let (conv, events) =
        start_finished(&api, json!({"message": "make status ok", "title": "checked", "verify": [{"command": check}]})).await;
    let checks = of_kind(&events, "verification");
    assert_eq!(checks.len(), 2, "{checks:?}");
    assert_eq!(
        (checks[0]["attempt"].as_u64(), checks[0]["passed"].as_bool(), checks[0]["sent_back"].as_bool()),
        (Some(1), Some(false), Some(true))
    );
    assert!(checks[0]["output"].as_str().unwrap().contains("status.txt is not ok"), "{}", checks[0]);
    assert!(checks[0]["output"].as_str().unwrap().contains("exit code 3"), "{}", checks[0]);
    assert_eq!(
        (checks[1]["attempt"].as_u64(), checks[1]["passed"].as_bool(), checks[1]["score"].as_f64()),
        (Some(2), Some(true), Some(1.0))
    );
    // The agent read what the check said, in the result of its first `finish`.
    let told = finish_results(&events);
    assert!(told[0]["is_error"] == true && told[0]["content"].as_str().unwrap().contains("status.txt is not ok"), "{}", told[0]);
    // The model was told the check at the start.
    let system = llm.requests()[0]["messages"][0]["content"].as_str().unwrap_or_default().to_owned();
    assert!(system.contains("status.txt"), "{system}");
    let view = api.wait_conversation(&conv, "its verdict", |c| c["verdict"]["attempt"] == 2).await;
    assert_eq!(view["verdict"], json!({"passed": true, "score": 1.0, "attempt": 2, "checks": 1}));
    assert_eq!(view["state"], "finished");

    // A check that never passes: after `max_verify_attempts` the run ends with the verdict
    // failed, not a loop.
    llm.push([Reply::finish("one"), Reply::finish("two")]);
    let body = json!({"message": "never", "title": "never", "verify": [{"command": "echo nope; false"}], "max_verify_attempts": 2});
    let (conv, events) = start_finished(&api, body).await;
    let checks = of_kind(&events, "verification");
    assert_eq!(
        checks.iter().map(|c| (c["attempt"].as_u64(), c["sent_back"].as_bool())).collect::<Vec<_>>(),
        [(Some(1), Some(true)), (Some(2), None)]
    );
    let view = api.wait_conversation(&conv, "its verdict", |c| c["verdict"]["attempt"] == 2).await;
    assert_eq!((view["verdict"]["passed"].as_bool(), view["state"].as_str()), (Some(false), Some("finished")));

    // The user's next message is a new turn: its own attempts (numbered on), sent back again.
    llm.push([Reply::finish("three"), Reply::finish("four")]);
    let (s, b) = api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "try again"})).await;
    assert_eq!(s, 202, "{b}");
    let events = api.wait_finished(&conv, 2).await;
    let checks = of_kind(&events, "verification");
    let seen: Vec<(Option<u64>, Option<bool>)> = checks.iter().map(|c| (c["attempt"].as_u64(), c["sent_back"].as_bool())).collect();
    assert_eq!(seen, [(Some(1), Some(true)), (Some(2), None), (Some(3), Some(true)), (Some(4), None)]);
    api.wait_conversation(&conv, "the new verdict", |c| c["verdict"]["attempt"] == 4).await;
}

#[tokio::test]
async fn an_llm_judge_scores_the_work_and_its_verdict_is_recorded() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);
    let rubric = "The change adds a test for the empty input.";

    // The agent writes a file and finishes; the judge (the same scripted server) scores it.
    llm.push([
        Reply::tool("terminal", json!({"command": "echo 'def test_empty(): pass' > test_empty.py", "security_risk": "low"})),
        Reply::finish("added the test"),
        Reply::Text("{\"score\": 0.9, \"reasons\": \"a test for the empty input was added\"}".into()),
    ]);
    let body = json!({"message": "add a test", "title": "judged", "verify": [{"judge": {"rubric": rubric, "threshold": 0.7}}]});
    let (conv, events) = start_finished(&api, body).await;
    let checks = of_kind(&events, "verification");
    assert_eq!(checks.len(), 1, "{checks:?}");
    assert_eq!(
        (checks[0]["check"].as_str(), checks[0]["passed"].as_bool(), checks[0]["score"].as_f64()),
        (Some("judge"), Some(true), Some(0.9))
    );
    assert_eq!(checks[0]["output"], "a test for the empty input was added");
    // The judge was asked with the rubric, the task and the workspace's change; its call counts.
    let asked = llm.requests()[2]["messages"].to_string();
    assert!(
        asked.contains("adds a test for the empty input") && asked.contains("add a test") && asked.contains("test_empty.py"),
        "{asked}"
    );
    let view = api.wait_conversation(&conv, "its verdict", |c| !c["verdict"].is_null()).await;
    assert_eq!(view["verdict"]["score"], 0.9);
    assert_eq!(view["metrics"]["llm_calls"], 3, "{view}");

    // A judge that answers no verdict fails the check, in words.
    llm.push([Reply::finish("done"), Reply::Text("looks fine to me".into())]);
    let body = json!({"message": "again", "title": "again", "verify": [{"judge": {"rubric": rubric}}], "max_verify_attempts": 1});
    let (_, events) = start_finished(&api, body).await;
    let checks = of_kind(&events, "verification");
    assert_eq!(checks[0]["passed"], false);
    assert!(checks[0]["output"].as_str().unwrap().contains("not a verdict"), "{}", checks[0]);
}

#[tokio::test]
async fn halyard_run_prints_the_result_as_json_on_stdout() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    llm.push([finish_with(json!({"files": 3, "summary": "three files"}))]);
    let dir = tempfile::tempdir().unwrap();
    let schema_file = dir.path().join("schema.json");
    std::fs::write(&schema_file, schema().to_string()).unwrap();
    let file = schema_file.display().to_string();
    let args = ["run", "count the files", "--result-schema", file.as_str(), "--title", "counted"];
    let out = halyard_tests::harness::client(dir.path(), &h.http, ALICE, &args).await;
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    // Standard output is the result and nothing else; the transcript went to standard error.
    let printed: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(printed, json!({"files": 3, "summary": "three files"}));
    assert!(stderr.contains("result:") && stderr.contains("[finished]"), "{stderr}");
}

#[tokio::test]
async fn an_environments_checks_apply_to_the_starts_that_use_it() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);
    let env = json!({"verify": [{"command": "test -f built.txt || { echo 'run make first'; exit 1; }"}]});
    let (s, v) = api.call(reqwest::Method::PUT, "/api/v1/environments/checked", Some(env)).await;
    assert_eq!(s, 201, "{v}");
    let bad = json!({"verify": [{"judge": {"rubric": ""}}]});
    let (s, v) = api.call(reqwest::Method::PUT, "/api/v1/environments/broken", Some(bad)).await;
    assert_eq!((s, v["error"]["code"].as_str()), (400, Some("invalid_field")), "{v}");

    // The agent finishes too early, is sent back with the environment's check, and fixes it.
    llm.push([
        Reply::finish("done"),
        Reply::tool("terminal", json!({"command": "touch built.txt", "security_risk": "low"})),
        Reply::finish("built"),
    ]);
    let (conv, task) = api.start_ready(json!({"message": "build it", "title": "env checks", "environment": "checked"})).await;
    assert!(task["detail"].as_str().unwrap_or_default().contains("nothing to set up"), "{task}");
    let events = api.wait_finished(&conv, 1).await;
    let checks = of_kind(&events, "verification");
    assert_eq!(checks.iter().map(|c| c["passed"].as_bool().unwrap()).collect::<Vec<_>>(), [false, true], "{checks:?}");
    assert!(checks[0]["output"].as_str().unwrap().contains("run make first"));
    let (_, list) = api.get("/api/v1/environments/snapshots").await;
    assert_eq!(list["items"], json!([]), "an environment with nothing to set up keeps no snapshot");
}

#[tokio::test]
async fn a_judge_of_an_organizations_profile_judges_only_that_organizations_conversations() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);
    // A user's own environment naming another organization's profile for its judge.
    let env = json!({"verify": [{"judge": {"rubric": "good", "llm_profile": "@acme/strong"}}]});
    let (s, v) = api.call(reqwest::Method::PUT, "/api/v1/environments/borrowed", Some(env)).await;
    assert_eq!(s, 201, "{v}");
    llm.push([Reply::finish("done")]);
    let body = json!({"message": "x", "title": "borrowed", "environment": "borrowed"});
    let (conv, _) = api.start_ready(body).await;
    // Sent back with the refusal, the agent (out of script) answers in words and waits.
    api.wait_conversation(&conv, "the run to end", |c| c["state"] == "idle").await;
    let events = api.events(&conv).await;
    let checks = of_kind(&events, "verification");
    assert_eq!(checks[0]["passed"], false);
    assert!(checks[0]["output"].as_str().unwrap().contains("organization acme's"), "{}", checks[0]);
    // No judge was asked: only the agent's two calls (its finish, and its answer after).
    assert_eq!(llm.requests().len(), 2);
}

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Long tasks, as a user checks them: the agent's plan (`task_tracker`, OpenHands' tool) is the
//! conversation's state, read back from `GET /conversations/{id}/tasks` and the event log.

use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";
const BOB: &str = "bob-secret-key";

fn finished(ev: &[Value]) -> bool {
    ev.iter().any(|e| e["kind"] == "execution_status" && e["status"] == "finished")
}

#[tokio::test]
async fn the_agents_plan_is_the_conversations_state() {
    init();
    let llm = ScriptedLlm::start().await;
    let plan = |second: &str, third: &str| {
        json!({"command": "plan", "task_list": [
            {"title": "Read the code", "notes": "", "status": "done"},
            {"title": "Fix the parser", "notes": "in src/parse.rs", "status": second},
            {"title": "Run the tests", "status": third}
        ]})
    };
    llm.push([
        Reply::tool("task_tracker", json!({"command": "view"})),
        Reply::tool("task_tracker", plan("in_progress", "todo")),
        Reply::tool("terminal", json!({"command": "echo fixed", "security_risk": "low"})),
        // A plan the tool refuses changes nothing.
        Reply::tool("task_tracker", json!({"command": "plan", "task_list": [{"title": "x", "status": "someday"}]})),
        Reply::tool("task_tracker", plan("done", "in_progress")),
        Reply::tool("task_tracker", json!({"command": "view"})),
        Reply::finish("planned and fixed"),
    ]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let alice = h.api(ALICE);
    let (conv, _) = alice.start_ready(json!({"message": "fix the parser"})).await;
    let events = alice.wait_events(&conv, "the run", finished).await;

    // Offered to the model under OpenHands' name, with its arguments.
    let first = &llm.requests()[0];
    let tool = first["tools"].as_array().unwrap().iter().find(|t| t["function"]["name"] == "task_tracker").expect("task_tracker offered");
    assert_eq!(tool["function"]["parameters"]["properties"]["command"]["enum"], json!(["view", "plan"]));

    // Each accepted plan is one `task_list` event, after its action and before its result.
    let lists: Vec<&Value> = events.iter().filter(|e| e["kind"] == "task_list").collect();
    assert_eq!(lists.len(), 2, "two plans were accepted");
    assert_eq!(lists[0]["items"][1]["status"], "in_progress");
    let observations: Vec<&Value> = events.iter().filter(|e| e["kind"] == "observation" && e["tool"] == "task_tracker").collect();
    assert_eq!(observations.len(), 5);
    assert!(observations[0]["content"].as_str().unwrap().contains("no plan yet"), "{}", observations[0]);
    assert_eq!(observations[2]["is_error"], true, "{}", observations[2]);
    assert!(observations[2]["content"].as_str().unwrap().contains("`todo`, `in_progress` or `done`"), "{}", observations[2]);
    let view = observations[4]["content"].as_str().unwrap();
    assert!(view.contains("2. [done] Fix the parser\n   in src/parse.rs\n3. [in_progress] Run the tests"), "{view}");

    // The API answers the last plan, in order; nobody else's.
    let (s, tasks) = alice.get(&format!("/api/v1/conversations/{conv}/tasks")).await;
    assert_eq!(s, 200, "{tasks}");
    assert_eq!(
        tasks["items"],
        json!([
            {"title": "Read the code", "notes": "", "status": "done"},
            {"title": "Fix the parser", "notes": "in src/parse.rs", "status": "done"},
            {"title": "Run the tests", "notes": "", "status": "in_progress"}
        ])
    );
    assert_eq!(h.api(BOB).get(&format!("/api/v1/conversations/{conv}/tasks")).await.0, 404);
    // A conversation with no plan has an empty one.
    llm.push([Reply::finish("nothing to plan")]);
    let (other, _) = alice.start_ready(json!({"message": "say hi"})).await;
    alice.wait_events(&other, "the other run", finished).await;
    let (_, none) = alice.get(&format!("/api/v1/conversations/{other}/tasks")).await;
    assert_eq!(none["items"], json!([]));
}

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

#[tokio::test]
async fn tags_are_given_at_start_changed_by_patch_and_found_by() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let alice = h.api(ALICE);
    let patch = |conv: &str, body: Value| {
        let (api, path) = (h.api(ALICE), format!("/api/v1/conversations/{conv}"));
        async move { api.call(reqwest::Method::PATCH, &path, Some(body)).await }
    };
    let (one, _) = alice.start_ready(json!({"tags": {"ticket": "ENG-42", "team": "parser"}})).await;
    let (two, _) = alice.start_ready(json!({"tags": {"ticket": "ENG-43"}})).await;
    let (_three, _) = alice.start_ready(json!({})).await;
    let (_, c) = alice.get(&format!("/api/v1/conversations/{one}")).await;
    assert_eq!(c["tags"], json!({"ticket": "ENG-42", "team": "parser"}));

    let ids =
        |page: &Value| -> Vec<String> { page["items"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap().to_owned()).collect() };
    let (s, page) = alice.get("/api/v1/conversations?tag=ticket:ENG-42").await;
    assert_eq!((s, ids(&page)), (200, vec![one.clone()]), "{page}");
    let (_, page) = alice.get("/api/v1/conversations?tag=ticket").await;
    assert_eq!(ids(&page).len(), 2, "any value of the key: {page}");
    let (_, count) = alice.get("/api/v1/conversations/count?tag=team:parser").await;
    assert_eq!(count["count"], 1);
    // Bob's own conversations only, whatever the tag.
    let (_, bobs) = h.api(BOB).get("/api/v1/conversations?tag=ticket").await;
    assert_eq!(bobs["items"], json!([]));

    // A merge patch: one value changed, one tag removed, one added; the title stays.
    let (s, _) = patch(&one, json!({"tags": {"ticket": "ENG-44", "team": null, "sprint": "12"}})).await;
    assert_eq!(s, 202);
    let c = alice.wait_conversation(&one, "the tags to change", |c| c["tags"]["ticket"] == "ENG-44").await;
    assert_eq!(c["tags"], json!({"ticket": "ENG-44", "sprint": "12"}));
    let (_, page) = alice.get("/api/v1/conversations?tag=ticket:ENG-42").await;
    assert_eq!(page["items"], json!([]));
    let (_, page) = alice.get("/api/v1/conversations?tag=sprint:12").await;
    assert_eq!(ids(&page), vec![one.clone()]);
    // Title and tags at once; then only the title, which leaves the tags.
    let (s, _) = patch(&two, json!({"title": "Parser work", "tags": {"sprint": "12"}})).await;
    assert_eq!(s, 202);
    alice.wait_conversation(&two, "both to change", |c| c["title"] == "Parser work" && c["tags"]["sprint"] == "12").await;
    let (_, page) = alice.get("/api/v1/conversations?tag=sprint:12").await;
    assert_eq!(ids(&page).len(), 2);

    // Refused in words, nothing changed.
    for (body, what) in [
        (json!({}), "say what changes"),
        (json!({"tags": {"has space": "x"}}), "letters, digits"),
        (json!({"tags": {"k": "line\nbreak"}}), "control characters"),
        (json!({"tags": {"k": "x".repeat(300)}}), "over 256"),
    ] {
        let (s, err) = patch(&one, body).await;
        assert_eq!((s, err["error"]["code"].as_str()), (400, Some("invalid_field")), "{err}");
        assert!(err["error"]["message"].as_str().unwrap().contains(what), "{err}");
    }
    let many: serde_json::Map<String, Value> = (0..21).map(|i| (format!("k{i}"), json!("v"))).collect();
    let (s, err) = alice.post("/api/v1/conversations", json!({"tags": many})).await;
    assert_eq!((s, err["error"]["code"].as_str()), (400, Some("invalid_field")), "{err}");
    let (s, err) = alice.get("/api/v1/conversations?tag=bad%20key:x").await;
    assert_eq!((s, err["error"]["code"].as_str()), (400, Some("invalid_query")), "{err}");
    let (s, _) = h.api(BOB).call(reqwest::Method::PATCH, &format!("/api/v1/conversations/{one}"), Some(json!({"tags": {"x": "y"}}))).await;
    assert_eq!(s, 404);
    let (_, c) = alice.get(&format!("/api/v1/conversations/{one}")).await;
    assert_eq!(c["tags"], json!({"ticket": "ENG-44", "sprint": "12"}));

    // A fork carries the tags its source has now.
    llm.push([Reply::finish("ok")]);
    let (s, _) = alice.post(&format!("/api/v1/conversations/{one}/messages"), json!({"text": "hi"})).await;
    assert_eq!(s, 202);
    alice.wait_events(&one, "a run", finished).await;
    let (s, task) = alice.post(&format!("/api/v1/conversations/{one}/fork"), json!({"at_seq": 1})).await;
    assert_eq!(s, 202, "{task}");
    let task = alice.wait_task(task["id"].as_str().unwrap(), &["READY"]).await;
    let (_, fork) = alice.get(&format!("/api/v1/conversations/{}", task["conversation_id"].as_str().unwrap())).await;
    assert_eq!(fork["tags"], json!({"ticket": "ENG-44", "sprint": "12"}));
}

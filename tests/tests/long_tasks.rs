#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Long tasks, as a user checks them: the agent's plan (`task_tracker`, OpenHands' tool) is the
//! conversation's state, read back from `GET /conversations/{id}/tasks` and the event log; tags;
//! and helpers (`delegate`): child conversations in the parent's workspace,
//! side by side, reached by the parent's pause, resume, interrupt and deletion, paid from its
//! budget.

use halyard_tests::llm::tool_names;
use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, finished, init};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";
const BOB: &str = "bob-secret-key";

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

/// The first user message of an LLM request (which conversation is asking), and how many tool
/// results it holds (how far that conversation is).
fn asker(body: &Value) -> (String, usize, String) {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let first = messages.iter().find(|m| m["role"] == "user").and_then(|m| m["content"].as_str()).unwrap_or_default().to_owned();
    let results: Vec<&Value> = messages.iter().filter(|m| m["role"] == "tool").collect();
    let last = results.last().and_then(|m| m["content"].as_str()).unwrap_or_default().to_owned();
    (first, results.len(), last)
}

#[tokio::test]
async fn helpers_work_in_parallel_in_the_parents_workspace() {
    init();
    let llm = ScriptedLlm::start().await;
    // One script for every conversation, told apart by their first message: the parent writes a
    // file, asks for three helpers (refused: two at most here), then two; each helper waits for
    // the other to be working too (so they ran side by side, or neither finishes), reads the file
    // and says what it found.
    llm.fallback(|body| {
        let (first, step, last) = asker(body);
        let helper = |me: &str, other: &str| {
            let wait = format!(
                "touch {me}.ready; for i in $(seq 1 600); do [ -f {other}.ready ] && break; sleep 0.1; done; \
                 [ -f {other}.ready ] && echo together; cat shared.txt"
            );
            match step {
                0 => Reply::tool("terminal", json!({"command": wait, "timeout": 90, "security_risk": "low"})),
                _ => {
                    let with = if last.contains("together") { "together" } else { "alone" };
                    let read = if last.contains("written-by-parent") { "written-by-parent" } else { "nothing" };
                    Reply::finish(&format!("helper {me} read {read}, {with}"))
                }
            }
        };
        let task = |title: &str, who: &str| json!({"title": title, "prompt": format!("helper {who}: read shared.txt")});
        match first.as_str() {
            "split the work" => match step {
                0 => Reply::tool("terminal", json!({"command": "echo written-by-parent > shared.txt", "security_risk": "low"})),
                1 => Reply::tool("delegate", json!({"tasks": [task("A", "a"), task("B", "b"), task("C", "c")]})),
                2 => Reply::tool("delegate", json!({"tasks": [task("Reader A", "a"), task("Reader B", "b")]})),
                _ => Reply::finish(&format!("the helpers said: {last}")),
            },
            "helper a: read shared.txt" => helper("a", "b"),
            "helper b: read shared.txt" => helper("b", "a"),
            other => Reply::Text(format!("unexpected conversation {other}")),
        }
    });
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_MAX_DELEGATES", "2").set("HALYARD_MAX_DELEGATION_DEPTH", "1"));
    let alice = h.api(ALICE);
    let (parent, _) = alice.start_ready(json!({"message": "split the work"})).await;
    let events = alice.wait_events(&parent, "the parent's run", finished).await;

    // Fan-out is limited by the setting: the model is told, and tries again.
    let delegations: Vec<&Value> = events.iter().filter(|e| e["kind"] == "observation" && e["tool"] == "delegate").collect();
    assert_eq!(delegations.len(), 2, "{delegations:?}");
    assert_eq!(delegations[0]["is_error"], true);
    assert!(delegations[0]["content"].as_str().unwrap().contains("At most 2 tasks"), "{}", delegations[0]);

    // Two helpers, recorded in the parent's log and on the conversation.
    let started: Vec<&Value> = events.iter().filter(|e| e["kind"] == "sub_conversations_started").collect();
    assert_eq!(started.len(), 1);
    let children: Vec<String> =
        started[0]["children"].as_array().unwrap().iter().map(|c| c["conversation_id"].as_str().unwrap().to_owned()).collect();
    assert_eq!(started[0]["children"][0]["title"], "Reader A");
    let view = alice
        .wait_conversation(&parent, "its helpers listed", |v| v["sub_conversation_ids"].as_array().is_some_and(|a| a.len() == 2))
        .await;
    assert_eq!(view["sub_conversation_ids"], json!(children));

    // Each ran in the parent's sandbox, beside the other, read the parent's file, and said so;
    // the parent's result holds both final messages.
    let result = delegations[1]["content"].as_str().unwrap();
    assert_eq!(delegations[1]["is_error"], false, "{result}");
    for (child, me) in children.iter().zip(["a", "b"]) {
        let said = format!("helper {me} read written-by-parent, together");
        assert!(result.contains(&said), "{said} missing from: {result}");
        let (s, c) = alice.get(&format!("/api/v1/conversations/{child}")).await;
        assert_eq!(s, 200, "{c}");
        assert_eq!(c["parent_conversation_id"], parent.as_str());
        assert_eq!(c["sandbox_id"], view["sandbox_id"], "one sandbox, one workspace");
        assert_eq!(c["state"], "finished");
        // Its own log: its task as its first message, its own command.
        let log = alice.events(child).await;
        assert_eq!(log.iter().find(|e| e["kind"] == "user_message").unwrap()["text"], format!("helper {me}: read shared.txt"));
        assert!(log.iter().any(|e| e["kind"] == "action" && e["tool"] == "terminal"));
        assert!(log.iter().all(|e| e["kind"] != "sub_conversations_started"));
    }
    // What each helper used is in the parent's log, and its budget.
    let ended: Vec<&Value> = events.iter().filter(|e| e["kind"] == "sub_conversation_ended").collect();
    assert_eq!(ended.len(), 2);
    assert!(ended.iter().all(|e| e["status"] == "finished" && e["used_tokens"].as_u64().unwrap() > 0), "{ended:?}");

    // Depth is limited by the setting: helpers are not offered `delegate`, the parent was.
    let requests = llm.requests();
    for r in &requests {
        let (first, _, _) = asker(r);
        let can = tool_names(r).iter().any(|t| t == "delegate");
        assert_eq!(can, first == "split the work", "{first}: {:?}", tool_names(r));
    }

    // The list has the helpers, each naming its parent.
    let (_, list) = alice.get("/api/v1/conversations").await;
    let items = list["items"].as_array().unwrap();
    for child in &children {
        let item = items.iter().find(|c| c["id"] == child.as_str()).expect("helper listed");
        assert_eq!(item["parent_conversation_id"], parent.as_str());
    }
    // A helper's workspace is its parent's: restoring or forking it is refused with the way.
    let (s, refused) = alice.post(&format!("/api/v1/conversations/{}/restore", children[0]), json!({"at_seq": 1})).await;
    assert_eq!((s, refused["error"]["code"].as_str()), (409, Some("helper_conversation")), "{refused}");
    let (s, _) = alice.post(&format!("/api/v1/conversations/{}/fork", children[0]), json!({"at_seq": 1})).await;
    assert_eq!(s, 409);
    // Nobody else sees them.
    assert_eq!(h.api(BOB).get(&format!("/api/v1/conversations/{}", children[0])).await.0, 404);

    // Deleting the parent deletes its helpers.
    let (s, _) = alice.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{parent}"), None).await;
    assert_eq!(s, 202);
    for child in &children {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while alice.get(&format!("/api/v1/conversations/{child}")).await.0 != 404 {
            assert!(std::time::Instant::now() < deadline, "helper {child} outlived its parent");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    assert_eq!(h.service_permission_violations(), Vec::<String>::new());
}

#[tokio::test]
async fn pausing_resuming_and_interrupting_the_parent_reach_its_helper() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.fallback(|body| {
        let (first, step, last) = asker(body);
        match (first.as_str(), step) {
            ("delegate a long job", 0) => Reply::tool("delegate", json!({"tasks": [{"title": "Long job", "prompt": "run the long job"}]})),
            ("delegate a long job", _) => Reply::finish(&format!("done: {last}")),
            ("run the long job", 0) => {
                Reply::tool("terminal", json!({"command": "echo started; sleep 300", "timeout": 600, "security_risk": "low"}))
            }
            ("run the long job", _) => Reply::Text("the long job was stopped".into()),
            (other, _) => Reply::Text(format!("unexpected conversation {other}")),
        }
    });
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let alice = h.api(ALICE);
    let (parent, _) = alice.start_ready(json!({"message": "delegate a long job"})).await;
    let view = alice.wait_conversation(&parent, "a helper", |v| v["sub_conversation_ids"].as_array().is_some_and(|a| a.len() == 1)).await;
    let child = view["sub_conversation_ids"][0].as_str().unwrap().to_owned();
    // (The parent's log names the helper before the helper's own start is seen.)
    alice.wait_conversation(&child, "the helper's start", |_| true).await;
    alice.wait_events(&child, "the helper's command", |ev| ev.iter().any(|e| e["kind"] == "action" && e["tool"] == "terminal")).await;

    // A pause of the parent pauses the helper; a resume resumes both, and the parent watches on.
    let (s, body) = alice.post(&format!("/api/v1/conversations/{parent}/pause"), json!({})).await;
    assert_eq!(s, 202, "{body}");
    alice.wait_conversation(&child, "the helper paused", |v| v["execution_status"] == "paused").await;
    let (s, body) = alice.post(&format!("/api/v1/conversations/{parent}/resume"), json!({})).await;
    assert_eq!(s, 202, "{body}");
    alice.wait_conversation(&child, "the helper running again", |v| v["execution_status"] == "running").await;
    alice.wait_conversation(&parent, "the parent running again", |v| v["execution_status"] == "running").await;

    // An interrupt of the parent stops the helper's command; the parent's result says so.
    let (s, body) = alice.post(&format!("/api/v1/conversations/{parent}/interrupt"), json!({})).await;
    assert_eq!(s, 202, "{body}");
    let child_events = alice
        .wait_events(&child, "the helper interrupted", |ev| {
            ev.iter().any(|e| e["kind"] == "execution_status" && e["reason"] == "interrupted by the user")
        })
        .await;
    let cut = child_events.iter().rev().find(|e| e["kind"] == "observation" && e["tool"] == "terminal").expect("the command's result");
    assert!(cut["content"].as_str().unwrap().contains("started"), "{cut}");
    let events = alice
        .wait_events(&parent, "the parent interrupted", |ev| {
            ev.iter().any(|e| e["kind"] == "execution_status" && e["reason"] == "interrupted by the user")
        })
        .await;
    let result = events.iter().find(|e| e["kind"] == "observation" && e["tool"] == "delegate").expect("the delegate result");
    let content = result["content"].as_str().unwrap();
    assert!(content.contains("Long job") && content.contains("[Interrupted by the user"), "{content}");
    let ended = events.iter().find(|e| e["kind"] == "sub_conversation_ended").expect("the helper's end");
    assert_eq!(ended["conversation_id"], child.as_str());
    assert_eq!(ended["status"], "idle");
    assert_eq!(h.service_permission_violations(), Vec::<String>::new());
}

#[tokio::test]
async fn helpers_share_what_is_left_of_the_parents_budget() {
    init();
    let llm = ScriptedLlm::start().await;
    // Helpers that never finish: only the budget stops them.
    llm.fallback(|body| {
        let (first, step, _) = asker(body);
        match (first.starts_with("spend it"), step) {
            (true, 0) => Reply::tool(
                "delegate",
                json!({"tasks": [{"title": "Spender 1", "prompt": "keep going, 1"}, {"title": "Spender 2", "prompt": "keep going, 2"}]}),
            ),
            (true, _) => Reply::finish("spent"),
            _ => Reply::tool("terminal", json!({"command": format!("echo step {step}"), "security_risk": "low"})),
        }
    });
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let alice = h.api(ALICE);
    // The parent's every prompt is long (its first message is), longer than what two helpers can
    // leave unspent (less than each one's next prompt, a few hundred tokens).
    let message = format!("spend it. {}", "Context the parent keeps. ".repeat(350));
    let (parent, _) = alice.start_ready(json!({"message": message, "max_tokens": 8000})).await;
    let events = alice
        .wait_events(&parent, "both helpers' ends", |ev| ev.iter().filter(|e| e["kind"] == "sub_conversation_ended").count() == 2)
        .await;
    let own = events.iter().find(|e| e["kind"] == "llm_call").unwrap();
    let spent_before = own["prompt_tokens"].as_u64().unwrap() + own["completion_tokens"].as_u64().unwrap();
    let share = (8000 - spent_before) / 2;
    for ended in events.iter().filter(|e| e["kind"] == "sub_conversation_ended") {
        // Each helper had half of what the parent had left, and stopped at it.
        let child = ended["conversation_id"].as_str().unwrap();
        let log = alice.events(child).await;
        assert_eq!(log[0]["budget"]["max_tokens"].as_u64(), Some(share), "{}", log[0]);
        assert_eq!(ended["status"], "error", "{ended}");
        assert!(ended["message"].as_str().unwrap().contains(&format!("token budget of {share}")), "{ended}");
        let used: u64 = log
            .iter()
            .filter(|e| e["kind"] == "llm_call")
            .map(|e| e["prompt_tokens"].as_u64().unwrap() + e["completion_tokens"].as_u64().unwrap())
            .sum();
        assert_eq!(ended["used_tokens"].as_u64(), Some(used), "what the parent pays is what the helper used");
        assert!(used > share / 2, "the helper worked until its share ran low: {used} of {share}");
    }
    // The parent counts what they used: its next call would pass its budget, so it ends there.
    let events = alice.wait_events(&parent, "the parent's end", |ev| ev.iter().any(|e| e["kind"] == "agent_error")).await;
    let error = events.iter().find(|e| e["kind"] == "agent_error").unwrap();
    assert_eq!(error["code"], "budget_exceeded", "{error}");
}

#[tokio::test]
async fn a_deleted_helper_ends_its_part_and_leaves_the_parents_sandbox() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.fallback(|body| {
        let (first, step, last) = asker(body);
        match (first.as_str(), step) {
            ("delegate, then go on", 0) => Reply::tool("delegate", json!({"tasks": [{"title": "Slow", "prompt": "take your time"}]})),
            ("delegate, then go on", 1) => Reply::tool("terminal", json!({"command": "echo still here", "security_risk": "low"})),
            ("delegate, then go on", _) => Reply::finish(&format!("went on: {last}")),
            _ => Reply::tool(
                "terminal",
                json!({"command": "sleep 300 & echo $! > slow.pid; wait $!", "timeout": 600, "security_risk": "low"}),
            ),
        }
    });
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let alice = h.api(ALICE);
    let (parent, _) = alice.start_ready(json!({"message": "delegate, then go on"})).await;
    let view = alice.wait_conversation(&parent, "a helper", |v| v["sub_conversation_ids"].as_array().is_some_and(|a| a.len() == 1)).await;
    let child = view["sub_conversation_ids"][0].as_str().unwrap().to_owned();
    alice.wait_conversation(&child, "the helper's start", |_| true).await;
    alice.wait_events(&child, "the helper's command", |ev| ev.iter().any(|e| e["kind"] == "action" && e["tool"] == "terminal")).await;
    let workspace = h.workspace(view["sandbox_id"].as_str().unwrap());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !workspace.join("slow.pid").exists() {
        assert!(std::time::Instant::now() < deadline, "the helper's command never ran");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let sleeper: u32 = std::fs::read_to_string(workspace.join("slow.pid")).unwrap().trim().parse().unwrap();
    let alive = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
    };
    assert!(alive(sleeper), "the helper's command runs");

    let (s, _) = alice.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{child}"), None).await;
    assert_eq!(s, 202);
    // The parent goes on without it, in its sandbox, which the helper's deletion left alone.
    let events = alice.wait_events(&parent, "the parent's end", finished).await;
    let ended = events.iter().find(|e| e["kind"] == "sub_conversation_ended").expect("the helper's end");
    assert_eq!((ended["conversation_id"].as_str(), ended["status"].as_str()), (Some(child.as_str()), Some("deleted")));
    let last = events.iter().rev().find(|e| e["kind"] == "observation" && e["tool"] == "terminal").unwrap();
    assert!(last["content"].as_str().unwrap().contains("still here"), "{last}");
    assert_eq!(alice.get(&format!("/api/v1/conversations/{child}")).await.0, 404);
    // What the helper ran in its shell was stopped with it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while alive(sleeper) {
        assert!(std::time::Instant::now() < deadline, "the deleted helper's command still runs");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

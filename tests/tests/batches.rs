#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Batches: twenty starts run four at a time, each an ordinary conversation tagged with its
//! batch, checked by a command; the results table (and its CSV) says which passed; the failed
//! ones run again on request; two batches compare item by item; and a batch goes on after
//! `halyard up` is killed mid-batch, with no item run twice and none lost; best of three picks
//! each item's highest-scored attempt. Plus the CLI's `halyard batch run`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use halyard_tests::llm::latest_turn;
use halyard_tests::{Api, Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";

/// The agent of every item: it makes `done.txt` when its task says `pass` (or once `fixed`),
/// then finishes; otherwise it finishes at once. Each answer is a moment long (`pace`), so
/// items overlap.
fn agent(llm: &ScriptedLlm, fixed: Arc<AtomicBool>, pace: Duration) {
    llm.fallback(move |req| {
        let turn = latest_turn(req);
        let task = turn.first().and_then(|m| m["content"].as_str()).unwrap_or_default().to_owned();
        let acted = turn.iter().any(|m| m["role"] == "tool");
        let reply = if !acted && (task.contains("pass") || fixed.load(Ordering::SeqCst)) {
            Reply::tool("terminal", json!({"command": "touch done.txt", "security_risk": "low"}))
        } else {
            Reply::finish("done")
        };
        Reply::Delay(pace, Box::new(reply))
    });
}

fn items(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"message": format!("task {i}: {}", if i % 3 == 0 { "fail" } else { "pass" }), "title": format!("item {i}")}))
        .collect()
}

/// Polls the batch until it is done; the most items seen running at once.
async fn wait_done(api: &Api, id: &str) -> (Value, u64) {
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut most = 0;
    loop {
        let (s, b) = api.get(&format!("/api/v1/batches/{id}")).await;
        assert_eq!(s, 200, "{b}");
        most = most.max(b["counts"]["running"].as_u64().unwrap());
        if b["status"] == "done" {
            return (b, most);
        }
        assert!(Instant::now() < deadline, "the batch did not finish: {b}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn statuses(b: &Value) -> Vec<String> {
    b["items"].as_array().unwrap().iter().map(|r| r["status"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn a_batch_runs_its_items_a_few_at_a_time_into_one_table_reruns_its_failures_and_compares() {
    init();
    let llm = ScriptedLlm::start().await;
    let fixed = Arc::new(AtomicBool::new(false));
    agent(&llm, fixed.clone(), Duration::from_millis(150));
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);
    let check = json!([{"command": "test -f done.txt"}]);
    let body = json!({"name": "A", "items": items(20), "concurrency": 4, "verify": check, "max_verify_attempts": 1});
    let (s, created) = api.post("/api/v1/batches", body).await;
    assert_eq!(s, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["items"].as_array().unwrap().len(), 20);

    let (done, most) = wait_done(&api, &id).await;
    assert!((2..=4).contains(&most), "at most 4 ran at once, and more than one did: {most}");
    // Items 0, 3, 6, ... never made the file: their check failed; the rest passed.
    let want: Vec<String> = (0..20).map(|i| if i % 3 == 0 { "failed" } else { "passed" }.to_owned()).collect();
    assert_eq!(statuses(&done), want);
    assert_eq!((done["counts"]["passed"].as_u64(), done["counts"]["failed"].as_u64()), (Some(13), Some(7)));
    for (i, r) in done["items"].as_array().unwrap().iter().enumerate() {
        assert_eq!(r["verdict"], if i % 3 == 0 { "failed" } else { "passed" }, "{r}");
        assert!(r["tokens"].as_u64().unwrap() > 0 && r["duration_secs"].as_f64().unwrap() > 0.0, "{r}");
    }
    // Ordinary conversations, tagged with their batch and item.
    let conv = done["items"][4]["conversation_id"].as_str().unwrap();
    let (_, c) = api.get(&format!("/api/v1/conversations/{conv}")).await;
    assert_eq!((c["tags"]["batch"].as_str(), c["tags"]["batch_item"].as_str()), (Some(id.as_str()), Some("4")), "{c}");
    let (_, tagged) = api.get(&format!("/api/v1/conversations?tag=batch:{id}&limit=100")).await;
    assert_eq!(tagged["count"], 20, "{tagged}");
    // The table as CSV.
    let csv = reqwest::Client::new()
        .get(format!("{}/api/v1/batches/{id}?format=csv", h.http))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 21, "{csv}");
    assert!(lines[0].starts_with("index,status,state,verdict,score") && lines[1].starts_with("0,failed,finished,failed,0"), "{csv}");

    // The failed ones run again (the agent does better now); the passed ones do not.
    fixed.store(true, Ordering::SeqCst);
    let (s, again) = api.post(&format!("/api/v1/batches/{id}/rerun"), json!({})).await;
    assert_eq!(s, 200, "{again}");
    assert_eq!(again["counts"]["waiting"].as_u64().unwrap() + again["counts"]["running"].as_u64().unwrap(), 7, "{again}");
    let (done, _) = wait_done(&api, &id).await;
    assert_eq!(statuses(&done), vec!["passed".to_owned(); 20]);
    for (i, r) in done["items"].as_array().unwrap().iter().enumerate() {
        assert_eq!(r["round"], if i % 3 == 0 { 1 } else { 0 }, "{r}");
    }
    assert_eq!(done["items"][4]["conversation_id"], conv, "a passed item ran again");

    // A second batch (the agent as it is now) against the first as it first ran: compared
    // against a batch whose failures stand.
    fixed.store(false, Ordering::SeqCst);
    let body =
        json!({"name": "B", "items": items(6), "concurrency": 3, "verify": [{"command": "test -f done.txt"}], "max_verify_attempts": 1});
    let (_, b) = api.post("/api/v1/batches", body).await;
    let b_id = b["id"].as_str().unwrap().to_owned();
    wait_done(&api, &b_id).await;
    let (s, cmp) = api.get(&format!("/api/v1/batches/{b_id}/compare/{id}")).await;
    assert_eq!(s, 200, "{cmp}");
    assert_eq!(cmp["fixed"], json!([0, 3]), "{cmp}");
    assert_eq!(cmp["summary"], "A passes 2 that B failed, fails 0 that B passed");
    assert_eq!((cmp["both_passed"].as_u64(), cmp["undecided"].as_u64()), (Some(4), Some(14)));

    // Another user sees none of it; a bad batch is refused in words.
    let (s, _) = h.api("bob-secret-key").get(&format!("/api/v1/batches/{id}")).await;
    assert_eq!(s, 404);
    let (s, e) = api.post("/api/v1/batches", json!({"items": [], "concurrency": 4})).await;
    assert!(s == 400 && e["error"]["message"].as_str().unwrap().contains("`items`"), "{e}");
    let (s, e) = api.post("/api/v1/batches", json!({"items": [{"message": "x"}], "concurrency": 99})).await;
    assert!(s == 400 && e["error"]["message"].as_str().unwrap().contains("`concurrency`"), "{e}");
}

#[tokio::test]
async fn a_batch_goes_on_after_halyard_is_killed_with_no_item_run_twice_and_none_lost() {
    init();
    let llm = ScriptedLlm::start().await;
    agent(&llm, Arc::new(AtomicBool::new(true)), Duration::from_millis(400));
    let mut h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);
    let (s, created) = api.post("/api/v1/batches", json!({"items": items(8), "concurrency": 2})).await;
    assert_eq!(s, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    // Killed while items run and others wait.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, b) = api.get(&format!("/api/v1/batches/{id}")).await;
        if b["counts"]["passed"].as_u64().unwrap() >= 2 && b["counts"]["running"].as_u64().unwrap() >= 1 {
            break;
        }
        assert!(Instant::now() < deadline, "the batch did not get going: {b}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    h.kill9();
    h.restart();
    let api = h.api(ALICE);
    let (done, _) = wait_done(&api, &id).await;
    if statuses(&done) != vec!["passed".to_owned(); 8] {
        // The batch's view says an item's start failed, not why: its conversation says.
        let mut why = Vec::new();
        for r in done["items"].as_array().unwrap().iter().filter(|r| r["status"] != "passed") {
            let (_, c) = api.get(&format!("/api/v1/conversations/{}", r["conversation_id"].as_str().unwrap_or("-"))).await;
            why.push(format!("{}: {} {}", r["conversation_id"], c["state"], c["error_detail"]));
            // And what Halyard did with its sandbox, on both sides of the kill.
            let ids: Vec<&str> = [&c["sandbox_id"], &r["conversation_id"]].into_iter().filter_map(Value::as_str).collect();
            why.extend(h.log().lines().filter(|l| ids.iter().any(|id| l.contains(id))).map(str::to_owned));
            // And what its executor said.
            if let Some(sandbox) = c["sandbox_id"].as_str() {
                let log = h.workspace(sandbox).with_file_name("executor.log");
                why.push(format!("{}:\n{}", log.display(), std::fs::read_to_string(&log).unwrap_or_default()));
            }
        }
        panic!("every item should pass after the restart; not passed:\n{}\n{done}", why.join("\n"));
    }
    // One conversation per item, each started once and finished once.
    let (_, tagged) = api.get(&format!("/api/v1/conversations?tag=batch:{id}&limit=100")).await;
    assert_eq!(tagged["count"], 8, "{tagged}");
    for r in done["items"].as_array().unwrap() {
        assert_eq!(r["round"], 0);
        let events = api.events(r["conversation_id"].as_str().unwrap()).await;
        let count = |kind: &str| events.iter().filter(|e| e["kind"] == kind).count();
        assert_eq!(count("conversation_started"), 1);
        assert_eq!(events.iter().filter(|e| e["kind"] == "user_message").count(), 1, "an item's task was sent twice");
    }
}

#[tokio::test]
async fn halyard_batch_run_shows_progress_and_prints_the_table() {
    init();
    let llm = ScriptedLlm::start().await;
    agent(&llm, Arc::new(AtomicBool::new(false)), Duration::from_millis(50));
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("tasks.jsonl");
    std::fs::write(&tasks, "{\"message\": \"task a: pass\"}\n\n{\"message\": \"task b: fail\"}\n").unwrap();
    let file = tasks.display().to_string();
    let args = ["batch", "run", file.as_str(), "--concurrency", "2", "--verify", "test -f done.txt", "--max-verify-attempts", "1"];
    let out = halyard_tests::harness::client(dir.path(), &h.http, ALICE, &args).await;
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // One item failed its check: exit 1, with the table on stdout and the bar on stderr.
    assert_eq!(out.status.code(), Some(1), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stderr.contains("2/2 done: 1 passed, 1 failed") && stderr.contains("[###"), "{stderr}");
    let rows: Vec<&str> = stdout.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    assert!(rows[0].contains("passed") && rows[1].contains("failed"), "{stdout}");
}

#[tokio::test]
async fn best_of_three_picks_each_items_highest_scored_attempt() {
    init();
    let llm = ScriptedLlm::start().await;
    // The agent finishes at once; the judge (a call without tools) scores an item's attempts
    // 0.3, 0.9 and 0.6 in the order it is asked.
    let asked = Arc::new(std::sync::Mutex::new(std::collections::HashMap::<String, usize>::new()));
    llm.fallback(move |req| {
        if req["tools"].as_array().is_none_or(Vec::is_empty) {
            let prompt = req["messages"].to_string();
            let task = if prompt.contains("task A") { "A" } else { "B" };
            let mut asked = asked.lock().unwrap();
            let n = asked.entry(task.to_owned()).or_default();
            let score = [0.3, 0.9, 0.6][*n % 3];
            *n += 1;
            return Reply::Text(format!("{{\"score\": {score}, \"reasons\": \"scored {score}\"}}"));
        }
        Reply::finish("done")
    });
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);
    let body = json!({
        "items": [{"message": "task A"}, {"message": "task B"}],
        "attempts": 3,
        "concurrency": 6,
        "verify": [{"judge": {"rubric": "is it good", "threshold": 0.5}}],
        "max_verify_attempts": 1,
    });
    let (s, created) = api.post("/api/v1/batches", body).await;
    assert_eq!((s, created["attempts"].as_u64()), (201, Some(3)), "{created}");
    let (done, _) = wait_done(&api, created["id"].as_str().unwrap()).await;
    for row in done["items"].as_array().unwrap() {
        let attempts = row["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 3, "{row}");
        let mut scores: Vec<f64> = attempts.iter().map(|a| a["score"].as_f64().unwrap()).collect();
        let best = row["best_attempt"].as_u64().unwrap() as usize;
        assert_eq!(attempts[best]["score"], 0.9, "{row}");
        assert_eq!((row["status"].as_str(), row["score"].as_f64()), (Some("passed"), Some(0.9)), "{row}");
        assert_eq!(row["conversation_id"], attempts[best]["conversation_id"]);
        scores.sort_by(f64::total_cmp);
        assert_eq!(scores, [0.3, 0.6, 0.9], "{row}");
        // The others are kept: ordinary conversations, tagged with their attempt.
        let other = attempts[(best + 1) % 3]["conversation_id"].as_str().unwrap();
        let (_, c) = api.get(&format!("/api/v1/conversations/{other}")).await;
        assert!(c["tags"]["batch_attempt"].is_string(), "{c}");
    }
    let (s, e) = api.post("/api/v1/batches", json!({"items": [{"message": "x"}], "attempts": 9})).await;
    assert!(s == 400 && e["error"]["message"].as_str().unwrap().contains("`attempts`"), "{e}");
}

#[tokio::test]
async fn a_paused_batch_starts_nothing_until_resumed_and_a_cancelled_one_never_again() {
    init();
    let llm = ScriptedLlm::start().await;
    agent(&llm, Arc::new(AtomicBool::new(true)), Duration::from_millis(300));
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);
    let (_, b) = api.post("/api/v1/batches", json!({"items": items(4), "concurrency": 1})).await;
    let id = b["id"].as_str().unwrap().to_owned();
    let (s, paused) = api.post(&format!("/api/v1/batches/{id}/pause"), json!({})).await;
    assert_eq!((s, paused["status"].as_str()), (200, Some("paused")), "{paused}");
    // What ran when it was paused ends; nothing else starts.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (_, now) = api.get(&format!("/api/v1/batches/{id}")).await;
    let started = now["items"].as_array().unwrap().iter().filter(|r| r["status"] != "waiting").count();
    assert!(started <= 1 && now["counts"]["running"] == 0, "items started while paused: {now}");
    let (_, resumed) = api.post(&format!("/api/v1/batches/{id}/resume"), json!({})).await;
    assert_eq!(resumed["status"], "running");
    let (done, _) = wait_done(&api, &id).await;
    assert_eq!(statuses(&done), vec!["passed".to_owned(); 4]);

    // Cancelled: its waiting items never start, and it stays cancelled.
    let (_, b) = api.post("/api/v1/batches", json!({"items": items(4), "concurrency": 1})).await;
    let id = b["id"].as_str().unwrap().to_owned();
    let (_, cancelled) = api.post(&format!("/api/v1/batches/{id}/cancel"), json!({})).await;
    assert_eq!(cancelled["status"], "cancelled");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (_, now) = api.get(&format!("/api/v1/batches/{id}")).await;
    assert_eq!(now["status"], "cancelled", "{now}");
    assert!(now["counts"]["waiting"].as_u64().unwrap() >= 3, "{now}");
    let (s, e) = api.post(&format!("/api/v1/batches/{id}/resume"), json!({})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (409, Some("batch_cancelled")), "{e}");
}

#[tokio::test]
async fn a_template_makes_a_batchs_items_from_rows_with_its_checks() {
    init();
    let llm = ScriptedLlm::start().await;
    agent(&llm, Arc::new(AtomicBool::new(true)), Duration::from_millis(50));
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);
    let template = json!({
        "start": {"message": "Fix {{issue}} in the {{ part }}", "title": "fix {{issue}}"},
        "verify": [{"command": "test -f done.txt"}],
        "max_verify_attempts": 1,
    });
    let (s, t) = api.call(reqwest::Method::PUT, "/api/v1/templates/fix", Some(template)).await;
    assert_eq!((s, t["parameters"].clone()), (201, json!(["issue", "part"])), "{t}");
    let rows = json!([{"issue": "#1", "part": "parser"}, {"issue": "#2", "part": "lexer"}]);
    let (s, b) = api.post("/api/v1/batches", json!({"template": "fix", "rows": rows, "concurrency": 2})).await;
    assert_eq!(s, 201, "{b}");
    let (done, _) = wait_done(&api, b["id"].as_str().unwrap()).await;
    assert_eq!(statuses(&done), ["passed", "passed"]);
    // Each row made its item, and the template's check ran on it.
    assert_eq!(done["items"][1]["message"], "Fix #2 in the lexer");
    assert_eq!(done["items"][0]["verdict"], "passed", "{done}");
    let conv = done["items"][0]["conversation_id"].as_str().unwrap();
    let (_, c) = api.get(&format!("/api/v1/conversations/{conv}")).await;
    assert_eq!((c["title"].as_str(), c["message"].as_str()), (Some("fix #1"), Some("Fix #1 in the parser")), "{c}");

    // Refused in words: a row without a value, a template that is not yours, both ways at once.
    let (s, e) = api.post("/api/v1/batches", json!({"template": "fix", "rows": [{"issue": "#3"}]})).await;
    assert!(s == 400 && e["error"]["message"].as_str().unwrap().contains("`rows[0]`: no value for `part`"), "{e}");
    let (s, e) = h.api("bob-secret-key").post("/api/v1/batches", json!({"template": "fix", "rows": rows})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("unknown_template")), "{e}");
    let (s, _) = api.post("/api/v1/batches", json!({"template": "fix", "rows": rows, "items": [{"message": "x"}]})).await;
    assert_eq!(s, 400);
    let (s, e) = api.call(reqwest::Method::PUT, "/api/v1/templates/bad", Some(json!({"start": {"message": "a {{b c}}"}}))).await;
    assert!(s == 400 && e["error"]["message"].as_str().unwrap().contains("not a parameter"), "{e}");
}

#[tokio::test]
async fn a_start_with_attempts_is_a_group_whose_best_attempt_is_chosen_and_the_others_are_kept_read_only() {
    init();
    let llm = ScriptedLlm::start().await;
    // One attempt (whichever asks first) writes the file the check wants; the others finish at
    // once and fail it.
    let given = Arc::new(AtomicBool::new(false));
    llm.fallback(move |req| {
        let acted = latest_turn(req).iter().any(|m| m["role"] == "tool");
        if !acted && !given.swap(true, Ordering::SeqCst) {
            let text = "one\ntwo\nthree\n";
            return Reply::tool("file_editor", json!({"command": "create", "path": "done.txt", "file_text": text, "security_risk": "low"}));
        }
        Reply::finish("done")
    });
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);
    // A template's start, its parameters filled in, and its checks.
    let template = json!({"start": {"message": "Fix {{what}}"}, "verify": [{"command": "test -f done.txt"}], "max_verify_attempts": 1});
    assert_eq!(api.call(reqwest::Method::PUT, "/api/v1/templates/fixer", Some(template)).await.0, 201);
    let (s, e) = api.post("/api/v1/conversations", json!({"template": "fixer", "attempts": 3})).await;
    assert!(s == 400 && e["error"]["message"].as_str().unwrap().contains("no value for `what`"), "{e}");
    let (s, e) = api.post("/api/v1/conversations", json!({"message": "x", "attempts": 3, "org": "acme"})).await;
    assert!(s == 400 && e["error"]["message"].as_str().unwrap().contains("`org` does not go with `attempts`"), "{e}");
    let body = json!({"template": "fixer", "parameters": {"what": "the login page"}, "attempts": 3});
    let (s, group) = api.post("/api/v1/conversations", body).await;
    assert_eq!((s, group["attempts"].as_u64(), group["concurrency"].as_u64()), (201, Some(3), Some(3)), "{group}");
    assert_eq!(group["items"][0]["message"], "Fix the login page");
    let id = group["id"].as_str().unwrap();
    let (done, most) = wait_done(&api, id).await;
    assert_eq!(most, 1, "one item, its attempts side by side");
    let row = &done["items"][0];
    let best = row["best_attempt"].as_u64().unwrap() as usize;
    let attempts = row["attempts"].as_array().unwrap();
    let passed: Vec<usize> = (0..3).filter(|i| attempts[*i]["status"] == "passed").collect();
    assert_eq!(passed, [best], "{row}");
    assert_eq!((row["status"].as_str(), row["conversation_id"].clone()), (Some("passed"), attempts[best]["conversation_id"].clone()));

    // Side by side with how much each changed: the best wrote one file of three lines.
    let (_, with_diff) = api.get(&format!("/api/v1/batches/{id}?diff=true")).await;
    let attempts = with_diff["items"][0]["attempts"].as_array().unwrap().clone();
    assert_eq!(attempts[best]["diff"], json!({"files": 1, "additions": 3, "deletions": 0}), "{with_diff}");
    let other = (best + 1) % 3;
    assert_eq!(attempts[other]["diff"], json!({"files": 0, "additions": 0, "deletions": 0}), "{with_diff}");

    // The chosen one carries on; the others are kept to read, and a fork carries on from one.
    let url = |i: usize| format!("/api/v1/conversations/{}/messages", attempts[i]["conversation_id"].as_str().unwrap());
    let (s, e) = api.post(&url(other), json!({"text": "go on"})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (409, Some("attempt_not_chosen")), "{e}");
    let (s, _) = api.get(&format!("/api/v1/conversations/{}/events", attempts[other]["conversation_id"].as_str().unwrap())).await;
    assert_eq!(s, 200);
    let (s, e) = api.post(&url(best), json!({"text": "thanks"})).await;
    assert_eq!(s, 202, "{e}");
}

#[tokio::test]
async fn an_organizations_templates_are_its_members_to_start_from_while_they_are_members() {
    init();
    const BOB: &str = "bob-secret-key";
    let llm = ScriptedLlm::start().await;
    agent(&llm, Arc::new(AtomicBool::new(false)), Duration::ZERO);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let (alice, bob) = (h.api(ALICE), h.api(BOB));
    assert_eq!(alice.post("/api/v1/orgs", json!({"name": "acme"})).await.0, 201);
    alice.add_to_org("acme", &bob, None).await;
    let template = json!({"start": {"message": "task {{n}}: pass"}, "verify": [{"command": "test -f done.txt"}], "max_verify_attempts": 1});
    let put = |api: &halyard_tests::Api, t: Value| {
        let api = api.clone();
        async move { api.call(reqwest::Method::PUT, "/api/v1/orgs/acme/templates/triage", Some(t)).await }
    };
    // Set by its owners and admins only; read by its members.
    let (s, e) = put(&bob, template.clone()).await;
    assert_eq!((s, e["error"]["code"].as_str()), (403, Some("forbidden")), "{e}");
    assert_eq!(put(&alice, template).await.0, 201);
    let (_, list) = bob.get("/api/v1/orgs/acme/templates").await;
    assert_eq!(list["items"][0]["parameters"], json!(["n"]), "{list}");
    let (_, audit) = alice.get("/api/v1/orgs/acme/audit").await;
    assert!(audit.to_string().contains("org.template.put"), "{audit}");

    // Bob starts from it, as `@acme/triage`: its message filled in, its checks run.
    let (s, task) = bob.post("/api/v1/conversations", json!({"template": "@acme/triage", "parameters": {"n": "4"}})).await;
    assert_eq!(s, 202, "{task}");
    let conv = task["conversation_id"].as_str().unwrap();
    let events = bob.wait_finished(conv, 1).await;
    assert_eq!(events.iter().find(|e| e["kind"] == "user_message").unwrap()["text"], "task 4: pass");
    let verdict = bob.wait_conversation(conv, "its verdict", |c| !c["verdict"].is_null()).await;
    assert_eq!(verdict["verdict"]["passed"], true, "{verdict}");
    // A batch from it too.
    let (s, b) = bob.post("/api/v1/batches", json!({"template": "@acme/triage", "rows": [{"n": "1"}, {"n": "2"}]})).await;
    assert_eq!((s, b["items"].as_array().map(Vec::len)), (201, Some(2)), "{b}");
    // An automation names its owner's own templates only.
    let body = json!({"name": "x", "trigger": {"kind": "webhook"}, "template": "@acme/triage"});
    let (s, e) = bob.post("/api/v1/automations", body).await;
    assert!(s == 400 && e["error"]["message"].as_str().unwrap().contains("your own templates"), "{e}");

    // Removed, Bob no longer starts from it.
    assert_eq!(alice.call(reqwest::Method::DELETE, "/api/v1/orgs/acme/members/bob", None).await.0, 204);
    let (s, e) = bob.post("/api/v1/conversations", json!({"template": "@acme/triage", "parameters": {"n": "5"}})).await;
    assert_eq!(s, 404, "{e}");
    assert_eq!(bob.get("/api/v1/orgs/acme/templates").await.0, 404);
}

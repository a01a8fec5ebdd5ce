#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! The agent for real work: a long run that condenses its history and finishes, a context-length
//! error that condenses and retries, the Anthropic wire, confirmation across a restart, and
//! skills that enter by trigger or load on demand.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use halyard_tests::events::last_status;
use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";

/// Whether an LLM request is the condenser's (its system prompt), in either wire.
fn is_summary_request(body: &Value) -> bool {
    let system = body["system"][0]["text"].as_str().or(body["messages"][0]["content"].as_str()).unwrap_or_default();
    system.starts_with("You condense the history")
}

/// A request's prompt in tokens as gpt-4o counts them: every message's text and tool calls
/// (4 tokens of framing each) and the tools' definitions.
fn prompt_tokens(body: &Value) -> usize {
    let bpe = tiktoken_rs::o200k_base_singleton();
    let count = |s: &str| bpe.encode_ordinary(s).len();
    let messages: usize = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            4 + count(m["content"].as_str().unwrap_or_default())
                + m["tool_calls"].as_array().map_or(0, |calls| {
                    calls
                        .iter()
                        .map(|c| count(c["function"]["name"].as_str().unwrap()) + count(c["function"]["arguments"].as_str().unwrap()))
                        .sum()
                })
        })
        .sum();
    messages + body.get("tools").map_or(0, |t| count(&t.to_string()))
}

#[tokio::test]
async fn a_300_step_run_condenses_its_history_and_finishes_within_the_window() {
    init();
    let llm = ScriptedLlm::start().await;
    let steps = Arc::new(AtomicU64::new(0));
    let counter = steps.clone();
    llm.fallback(move |body| {
        if is_summary_request(body) {
            return Reply::Text("Summary: the agent echoed numbered steps into steps.log; all succeeded.".into());
        }
        let n = counter.fetch_add(1, Ordering::SeqCst);
        if n < 300 {
            Reply::tool("terminal", json!({"command": format!("echo step {n} >> steps.log && echo step {n}"), "security_risk": "low"}))
        } else {
            Reply::finish("300 steps done")
        }
    });
    let (window, reserve) = (8000, 2000);
    let h = Halyard::start(
        HalyardOptions::new(&llm.base_url)
            .set("HALYARD_LLM_MODEL", "gpt-4o-mini")
            .set("HALYARD_LLM_CONTEXT_WINDOW", &window.to_string())
            .set("HALYARD_LLM_CONTEXT_RESERVE", &reserve.to_string())
            .set("HALYARD_MAX_ITERATIONS", "400"),
    );
    let api = h.api(ALICE);
    let (conv, task) =
        api.start_ready(json!({"message": "Echo 300 numbered steps into steps.log, one command each.", "title": "long run"})).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(240);
    loop {
        let (_, c) = api.get(&format!("/api/v1/conversations/{conv}")).await;
        if c["execution_status"] == "finished" || c["execution_status"] == "error" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the run did not end: {c}");
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    let events = api.events(&conv).await;
    assert_eq!(last_status(&events).as_deref(), Some("finished"), "{}", Value::Array(events.iter().rev().take(5).cloned().collect()));
    assert!(events.iter().all(|e| e["kind"] != "agent_error"));
    let log = std::fs::read_to_string(h.workspace(task["sandbox_id"].as_str().unwrap()).join("steps.log")).unwrap();
    assert_eq!(log.lines().count(), 300, "every step ran");

    // It condensed, each time from a prompt over the budget to one well under it. (It keeps
    // half of the room the system prompt and tools leave, plus the summary: about 4,500 tokens
    // of this 6,000, give or take what the random paths in the observations tokenize to.)
    let condensations: Vec<&Value> = events.iter().filter(|e| e["kind"] == "condensation").collect();
    assert!(condensations.len() >= 5, "{} condensations", condensations.len());
    let budget = (window - reserve) as u64;
    for c in &condensations {
        let (before, after) = (c["tokens_before"].as_u64().unwrap(), c["tokens_after"].as_u64().unwrap());
        assert!(before > budget && after < budget * 4 / 5, "{c}");
        assert!(c["from_seq"].as_u64().unwrap() <= c["upto_seq"].as_u64().unwrap());
    }
    // The log keeps everything: 300 actions and their observations.
    assert_eq!(events.iter().filter(|e| e["kind"] == "action").count(), 301);
    assert_eq!(events.iter().filter(|e| e["kind"] == "observation").count(), 301);

    // Every prompt the model got fit the budget, as its tokenizer counts it; the later ones
    // hold the first message and the latest summary.
    let requests = llm.requests();
    let agent_requests: Vec<&Value> = requests.iter().filter(|r| !is_summary_request(r)).collect();
    assert_eq!(agent_requests.len(), 301);
    for r in &requests {
        let tokens = prompt_tokens(r);
        assert!(tokens as u64 <= budget, "a prompt of {tokens} tokens passed the budget of {budget}");
    }
    let last = agent_requests.last().unwrap();
    let texts: Vec<&str> = last["messages"].as_array().unwrap().iter().filter_map(|m| m["content"].as_str()).collect();
    assert_eq!(texts[1], "Echo 300 numbered steps into steps.log, one command each.");
    assert!(texts[2].contains("Summary: the agent echoed"), "{}", texts[2]);
    // The summarizer saw the steps it replaced.
    let summary_request = requests.iter().find(|r| is_summary_request(r)).unwrap();
    assert!(summary_request["messages"][1]["content"].as_str().unwrap().contains("echo step 0"));
    // Metrics count the summarizer's calls too.
    let (_, c) = api.get(&format!("/api/v1/conversations/{conv}")).await;
    assert_eq!(c["metrics"]["llm_calls"].as_u64().unwrap() as usize, requests.len());
}

#[tokio::test]
async fn the_anthropic_wire_runs_tools_streams_and_marks_the_cacheable_prefix() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([
        Reply::Tools(
            Some("I'll write it.".into()),
            vec![("terminal".into(), json!({"command": "echo hi > hi.txt", "security_risk": "low"}))],
        ),
        Reply::tool("file_editor", json!({"command": "view", "path": "hi.txt", "security_risk": "low"})),
        Reply::finish("wrote hi.txt"),
    ]);
    let h = Halyard::start(
        HalyardOptions::new(&llm.base_url)
            .set("HALYARD_LLM_PROVIDER", "anthropic")
            .set("HALYARD_LLM_MODEL", "claude-sonnet-4-5")
            .set("HALYARD_LLM_PRICE", "3,15,0.3"),
    );
    let api = h.api(ALICE);
    let (conv, task) = api.start_ready(json!({"message": "write hi.txt", "title": "anthropic"})).await;
    let events = api.wait_events(&conv, "finish", |ev| last_status(ev).as_deref() == Some("finished")).await;
    assert_eq!(std::fs::read_to_string(h.workspace(task["sandbox_id"].as_str().unwrap()).join("hi.txt")).unwrap(), "hi\n");
    let view = events.iter().find(|e| e["kind"] == "observation" && e["tool"] == "file_editor").unwrap();
    assert!(view["content"].as_str().unwrap().contains("hi"), "{view}");
    let action = events.iter().find(|e| e["kind"] == "action").unwrap();
    assert_eq!(action["thought"], "I'll write it.");
    assert!(action["tool_call_id"].as_str().unwrap().starts_with("toolu_"));

    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    assert!(llm.headers("x-api-key").iter().all(|k| k.as_deref() == Some(halyard_tests::harness::LLM_KEY)));
    assert!(llm.headers("anthropic-version").iter().all(|v| v.as_deref() == Some("2023-06-01")));
    assert!(llm.auth_headers().iter().all(Option::is_none), "Anthropic gets the key as x-api-key only");
    let third = &requests[2];
    assert_eq!(third["stream"], true);
    assert_eq!(third["system"][0]["cache_control"]["type"], "ephemeral");
    assert_eq!(third["tools"].as_array().unwrap().last().unwrap()["cache_control"]["type"], "ephemeral");
    let messages = third["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant", "user"], "roles alternate");
    assert_eq!(messages[1]["content"][1]["type"], "tool_use");
    assert_eq!(messages[2]["content"][0]["type"], "tool_result");
    assert_eq!(messages[2]["content"][0]["tool_use_id"], messages[1]["content"][1]["id"]);
    assert_eq!(messages[4]["content"].as_array().unwrap().last().unwrap()["cache_control"]["type"], "ephemeral");

    // Usage as Anthropic reports it (input, cache reads) is summed into prompt tokens and priced.
    let calls: Vec<&Value> = events.iter().filter(|e| e["kind"] == "llm_call").collect();
    assert_eq!(calls.len(), 3);
    for (call, (prompt, completion, cached)) in calls.iter().zip(llm.usages()) {
        assert_eq!((call["prompt_tokens"].as_u64(), call["completion_tokens"].as_u64()), (Some(prompt), Some(completion)));
        assert_eq!(call["cached_tokens"].as_u64(), Some(cached));
        let cost = ((prompt - cached) as f64 * 3.0 + cached as f64 * 0.3 + completion as f64 * 15.0) / 1e6;
        assert!((call["cost_usd"].as_f64().unwrap() - cost).abs() < 1e-12, "{call}");
    }
}

#[tokio::test]
async fn a_context_length_error_condenses_and_retries_on_either_wire() {
    init();
    for provider in ["anthropic", "openai"] {
        let llm = ScriptedLlm::start().await;
        llm.push((0..6).map(|i| Reply::tool("terminal", json!({"command": format!("echo {i}"), "security_risk": "low"}))));
        llm.push([Reply::ContextTooLong, Reply::Text("Summary: echoed 0 to 5.".into()), Reply::finish("done after condensing")]);
        let mut opts = HalyardOptions::new(&llm.base_url).set("HALYARD_LLM_PROVIDER", provider);
        opts.llm_stream = false;
        let h = Halyard::start(opts);
        let api = h.api(ALICE);
        let (conv, _) = api.start_ready(json!({"message": "echo six numbers", "title": "ctx"})).await;
        let events = api.wait_events(&conv, "finish", |ev| matches!(last_status(ev).as_deref(), Some("finished" | "error"))).await;
        assert_eq!(last_status(&events).as_deref(), Some("finished"), "{provider}: {}", Value::Array(events.clone()));
        let c = events.iter().find(|e| e["kind"] == "condensation").expect("a condensation");
        assert!(c["tokens_after"].as_u64() < c["tokens_before"].as_u64(), "{c}");
        assert_eq!(c["summary"], "Summary: echoed 0 to 5.");
        let requests = llm.requests();
        assert_eq!(requests.len(), 9, "{provider}: six steps, the refused call, the summary, the retry");
        assert!(is_summary_request(&requests[7]));
        let retry = serde_json::to_string(&requests[8]).unwrap();
        assert!(retry.contains("Summary: echoed 0 to 5.") && !retry.contains("echo 0"), "{provider}: the retry is condensed");
    }
}

#[tokio::test]
async fn risky_actions_wait_for_confirmation_across_a_restart_and_rejections_reach_the_model() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([
        Reply::tool("terminal", json!({"command": "echo safe > a.txt", "security_risk": "low"})),
        // Understated by the model; the analyzer knows credentials when it sees them.
        Reply::tool("terminal", json!({"command": "cat ~/.netrc || echo no-netrc-here", "security_risk": "low"})),
    ]);
    let mut h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);
    let (conv, _) = api.start_ready(json!({"message": "look around", "title": "careful", "confirmation_policy": "risky"})).await;
    let events = api.wait_events(&conv, "a wait", |ev| last_status(ev).as_deref() == Some("waiting_for_confirmation")).await;
    let actions: Vec<&Value> = events.iter().filter(|e| e["kind"] == "action").collect();
    assert_eq!((actions[0]["security_risk"].as_str(), actions[1]["security_risk"].as_str()), (Some("low"), Some("high")));
    assert_eq!(events.iter().filter(|e| e["kind"] == "observation").count(), 1, "the low-risk action ran, the risky one waits");
    let (_, c) = api.get(&format!("/api/v1/conversations/{conv}")).await;
    assert_eq!((c["execution_status"].as_str(), c["confirmation_policy"].as_str()), (Some("waiting_for_confirmation"), Some("risky")));
    assert_eq!(llm.requests().len(), 2, "nothing more is asked while an action waits");

    // The wait survives a restart of the whole deployment; then the user confirms.
    h.stop();
    h.restart();
    let api = h.api(ALICE);
    llm.push([Reply::tool("terminal", json!({"command": "rm -rf ~/old-projects", "security_risk": "medium"}))]);
    let (s, _) = api.post(&format!("/api/v1/conversations/{conv}/confirm"), json!({})).await;
    assert_eq!(s, 202);
    let events = api
        .wait_events(&conv, "the second wait", |ev| {
            ev.iter().filter(|e| e["status"] == "waiting_for_confirmation").count() == 2
                && last_status(ev).as_deref() == Some("waiting_for_confirmation")
        })
        .await;
    let ran = events.iter().filter(|e| e["kind"] == "observation").nth(1).unwrap();
    assert!(ran["content"].as_str().unwrap().contains("no-netrc-here"), "the confirmed action ran: {ran}");

    // A rejection: the action never runs, and the model reads the reason as its result.
    llm.push([Reply::finish("left your home alone")]);
    let (s, _) = api.post(&format!("/api/v1/conversations/{conv}/reject"), json!({"reason": "keep my home directory"})).await;
    assert_eq!(s, 202);
    let events = api.wait_events(&conv, "finish", |ev| last_status(ev).as_deref() == Some("finished")).await;
    let rejected = events.iter().find(|e| e["kind"] == "action_rejected").unwrap();
    assert_eq!((rejected["tool"].as_str(), rejected["reason"].as_str()), (Some("terminal"), Some("keep my home directory")));
    let last = llm.requests().last().unwrap().clone();
    let result = last["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(result["role"], "tool");
    assert!(result["content"].as_str().unwrap().contains("keep my home directory"));

    // The policy changes; under `always` even a harmless action waits, and a message instead
    // of a confirmation refuses it.
    let (s, _) = api
        .call(reqwest::Method::PUT, &format!("/api/v1/conversations/{conv}/confirmation-policy"), Some(json!({"policy": "always"})))
        .await;
    assert_eq!(s, 202);
    api.wait_conversation(&conv, "the new policy", |c| c["confirmation_policy"] == "always").await;
    llm.push([Reply::tool("terminal", json!({"command": "ls", "security_risk": "low"}))]);
    api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "list the files"})).await;
    api.wait_conversation(&conv, "a wait for ls", |c| c["execution_status"] == "waiting_for_confirmation").await;
    llm.push([Reply::finish("ok, not listing")]);
    api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "never mind"})).await;
    let events = api.wait_finished(&conv, 2).await;
    let refused = events.iter().rev().find(|e| e["kind"] == "action_rejected").unwrap();
    assert!(refused["reason"].as_str().unwrap().contains("new message"), "{refused}");
    assert!(events.iter().any(|e| e["kind"] == "confirmation_policy" && e["policy"] == "always"));

    let (s, body) = api.post(&format!("/api/v1/conversations/{conv}/reject"), json!({})).await;
    assert_eq!((s, body["error"]["code"].as_str()), (400, Some("invalid_body")), "{body}");
}

#[tokio::test]
async fn skills_enter_by_trigger_and_folder_skills_load_on_demand() {
    init();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("docker.md"),
        "---\nname: docker\ntype: knowledge\ntriggers:\n- docker\n---\nUse `docker compose up -d`.\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("habits.md"), "Run the tests before you finish.\n").unwrap();
    std::fs::create_dir(dir.path().join("pdf")).unwrap();
    std::fs::write(
        dir.path().join("pdf/SKILL.md"),
        "---\nname: pdf\ndescription: Read and write PDF files.\nlicense: MIT\n---\n# PDF\nUse `pdftotext -layout in.pdf -`.\n",
    )
    .unwrap();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::tool("load_skill", json!({"name": "pdf"})), Reply::finish("read the pdf skill")]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_SKILLS_DIR", dir.path().to_str().unwrap()));
    let api = h.api(ALICE);

    let (s, skills) = api.get("/api/v1/skills").await;
    assert_eq!(s, 200);
    let kinds: Vec<(&str, &str)> =
        skills["items"].as_array().unwrap().iter().map(|s| (s["name"].as_str().unwrap(), s["kind"].as_str().unwrap())).collect();
    assert_eq!(kinds, [("docker", "knowledge"), ("habits", "always"), ("pdf", "agent_skill")]);

    let (conv, _) = api.start_ready(json!({"message": "Build the Docker image, then read the PDF.", "title": "skills"})).await;
    let events = api.wait_events(&conv, "finish", |ev| last_status(ev).as_deref() == Some("finished")).await;
    let activated: Vec<&Value> = events.iter().filter(|e| e["kind"] == "skill_activated").collect();
    assert_eq!(activated.len(), 1);
    assert_eq!((activated[0]["name"].as_str(), activated[0]["trigger"].as_str()), (Some("docker"), Some("docker")));
    let first = &llm.requests()[0];
    let system = first["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("Run the tests before you finish."), "always-on skills are in the system prompt");
    assert!(system.contains("Read and write PDF files.") && !system.contains("pdftotext"), "folder skills by description only");
    assert!(!system.contains("docker compose"), "knowledge skills only when triggered");
    let after_user: Vec<&str> = first["messages"].as_array().unwrap()[2..].iter().filter_map(|m| m["content"].as_str()).collect();
    assert!(after_user[0].contains("docker compose up -d"), "the triggered skill follows the message: {after_user:?}");
    assert!(first["tools"].as_array().unwrap().iter().any(|t| t["function"]["name"] == "load_skill"));
    let loaded = events.iter().find(|e| e["kind"] == "observation" && e["tool"] == "load_skill").unwrap();
    assert!(loaded["content"].as_str().unwrap().contains("pdftotext -layout"), "{loaded}");

    // Once per conversation.
    llm.push([Reply::Text("still docker".into())]);
    api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "more docker please"})).await;
    let events = api.wait_events(&conv, "the answer", |ev| ev.iter().any(|e| e["text"] == "still docker")).await;
    assert_eq!(events.iter().filter(|e| e["kind"] == "skill_activated").count(), 1);
}

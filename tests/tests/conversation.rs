#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! A conversation end to end: HTTP API, start task, process sandbox, agent loop against a
//! scripted OpenAI-compatible LLM, events over HTTP and WebSocket.

use std::time::Duration;

use halyard_tests::harness::{LLM_KEY, assert_log_is_contiguous};
use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";

fn kinds(events: &[Value]) -> Vec<String> {
    events.iter().map(|e| e["kind"].as_str().unwrap_or_default().to_owned()).collect()
}

async fn write_run_finish(stream: bool) {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([
        Reply::Tools(
            Some("I'll write the script first.".into()),
            vec![("file_editor".into(), json!({"command": "create", "path": "hello.py", "file_text": "print('hello from halyard')\n"}))],
        ),
        Reply::tool("terminal", json!({"command": "python3 hello.py && echo LLM_KEY=${HALYARD_LLM_API_KEY:-absent}"})),
        Reply::finish("hello.py prints the greeting"),
    ]);
    let mut opts = HalyardOptions::new(&llm.base_url);
    opts.llm_stream = stream;
    let h = Halyard::start(opts);
    let api = h.api(ALICE);

    let (status, task) = api.post("/api/v1/conversations", json!({"message": "Write hello.py and run it", "title": "Greeting"})).await;
    assert_eq!(status, 202, "{task}");
    assert_eq!(task["status"], "WORKING");
    let task = api.wait_task(task["id"].as_str().unwrap(), &["READY"]).await;
    let conv = task["conversation_id"].as_str().unwrap().to_owned();
    let sandbox = task["sandbox_id"].as_str().unwrap().to_owned();

    let events = api.wait_finished(&conv, 1).await;
    assert_log_is_contiguous(&events);
    let k = kinds(&events);
    assert_eq!(
        k,
        [
            "conversation_started",
            "user_message",
            "execution_status",
            "llm_call",
            "action",
            "observation",
            "llm_call",
            "action",
            "observation",
            "llm_call",
            "action",
            "observation",
            "agent_message",
            "execution_status"
        ],
        "{}",
        Value::Array(events.clone())
    );
    assert_eq!(events[1]["text"], "Write hello.py and run it");
    assert_eq!(events[1]["source"], "user");
    assert_eq!(events[2]["status"], "running");
    assert_eq!(events[4]["tool"], "file_editor");
    assert_eq!(events[4]["thought"], "I'll write the script first.");
    assert!(events[5]["content"].as_str().unwrap().contains("File created successfully"), "{}", events[5]);
    assert_eq!(events[7]["tool"], "terminal");
    let out = events[8]["content"].as_str().unwrap();
    assert!(out.contains("hello from halyard"), "{out}");
    // The LLM key is not in the sandbox's environment.
    assert!(out.contains("LLM_KEY=absent"), "{out}");
    assert_eq!(events[8]["exit_code"], 0);
    assert_eq!(events[12]["text"], "hello.py prints the greeting");
    // Each LLM call is recorded with what the provider reported (streamed or not).
    let calls: Vec<&Value> = events.iter().filter(|e| e["kind"] == "llm_call").collect();
    let usages = llm.usages();
    assert_eq!(calls.len(), usages.len());
    for (call, (prompt, completion, cached)) in calls.iter().zip(&usages) {
        assert_eq!((call["prompt_tokens"].as_u64(), call["completion_tokens"].as_u64()), (Some(*prompt), Some(*completion)), "{call}");
        assert_eq!(call["cached_tokens"].as_u64(), Some(*cached));
        assert_eq!(call["model"], "scripted-model");
        assert!(call["latency_ms"].is_u64() && call.get("cost_usd").is_none(), "no price, no cost: {call}");
    }
    for e in &events {
        assert!(e["timestamp"].as_str().unwrap().ends_with('Z'));
        assert_eq!(e["conversation_id"], conv.as_str());
    }

    // The file is really in the sandbox workspace.
    let file = h.workspace(&sandbox).join("hello.py");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "print('hello from halyard')\n");

    // The LLM saw the tools, the tool results, and our key (and only the LLM did).
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    let tools: Vec<&str> = requests[0]["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    let browser = halyard_protocol::executor::BROWSER_TOOLS.iter().copied();
    let expected: Vec<&str> = ["terminal", "file_editor", "glob", "grep", "execute_ipython_cell"]
        .into_iter()
        .chain(browser)
        .chain(["think", "task_tracker", "finish", "delegate"])
        .collect();
    assert_eq!(tools, expected);
    assert_eq!(requests[0]["stream"], stream);
    assert_eq!(requests[0]["model"], "scripted-model");
    let last = requests[2]["messages"].as_array().unwrap();
    let tool_msg = last.iter().rev().find(|m| m["role"] == "tool").unwrap();
    assert!(tool_msg["content"].as_str().unwrap().contains("hello from halyard"));
    assert!(llm.auth_headers().iter().all(|a| a.as_deref() == Some(&format!("Bearer {LLM_KEY}"))));
    for e in &events {
        assert!(!e.to_string().contains(LLM_KEY), "the LLM key leaked into an event");
    }

    // The conversation view says how it went.
    let (status, c) = api.get(&format!("/api/v1/conversations/{conv}")).await;
    assert_eq!(status, 200);
    assert_eq!(c["title"], "Greeting");
    assert_eq!(c["status"], "READY");
    assert_eq!(c["execution_status"], "finished");
    assert_eq!(c["sandbox_status"], "RUNNING");
    assert_eq!(c["last_event_seq"], events.len());
    let metrics = &c["metrics"];
    assert_eq!(metrics["llm_calls"], 3);
    assert_eq!(metrics["prompt_tokens"].as_u64(), Some(usages.iter().map(|u| u.0).sum()));
    assert_eq!(metrics["completion_tokens"].as_u64(), Some(usages.iter().map(|u| u.1).sum()));
    assert_eq!(metrics["cached_tokens"].as_u64(), Some(usages.iter().map(|u| u.2).sum()));

    // A follow-up message starts a new run in the same shell and workspace.
    llm.push([Reply::tool("terminal", json!({"command": "cat hello.py | wc -l"})), Reply::Text("One line.".into())]);
    let (status, _) = api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "How long is it?"})).await;
    assert_eq!(status, 202);
    // (Until the run's end: its answer is appended a moment before its status.)
    let events = api
        .wait_events(&conv, "the second run", |ev| {
            ev.iter().any(|e| e["kind"] == "agent_message" && e["text"] == "One line.")
                && ev.last().is_some_and(|e| e["kind"] == "execution_status")
        })
        .await;
    assert_log_is_contiguous(&events);
    let obs = events.iter().rev().find(|e| e["kind"] == "observation").unwrap();
    assert!(obs["content"].as_str().unwrap().starts_with('1'), "{obs}");
    let last = events.last().unwrap();
    assert_eq!((last["kind"].as_str(), last["status"].as_str()), (Some("execution_status"), Some("idle")));
}

#[tokio::test]
async fn agent_writes_runs_and_finishes_streaming() {
    write_run_finish(true).await;
}

#[tokio::test]
async fn agent_writes_runs_and_finishes_without_streaming() {
    write_run_finish(false).await;
}

#[tokio::test]
async fn websocket_resumes_without_gap_or_duplicate() {
    init();
    let llm = ScriptedLlm::start().await;
    let step = |i: usize| Reply::Delay(Duration::from_millis(60), Box::new(Reply::tool("think", json!({"thought": format!("step {i}")}))));
    llm.push((0..8).map(step));
    llm.push([Reply::finish("done thinking")]);
    // Nothing but `think` calls would be a monologue to the stuck detector; here they only make
    // events.
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_STUCK_MONOLOGUE", "0"));
    let api = h.api(ALICE);
    let (conv, _) = api.start_ready(json!({"message": "think a lot"})).await;

    let mut seen: Vec<Value> = Vec::new();
    // First connection: take a few events, then drop the connection mid-run.
    let mut ws = api.ws(&conv, 0).await;
    for _ in 0..5 {
        seen.push(ws.next(Duration::from_secs(20)).await.expect("event"));
    }
    ws.close().await;
    // Let events happen while disconnected.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let last = seen.last().unwrap()["seq"].as_u64().unwrap();
    let mut ws = api.ws(&conv, last).await;
    loop {
        let e = ws.next(Duration::from_secs(20)).await.expect("event after reconnect");
        let done = e["kind"] == "execution_status" && e["status"] == "finished";
        seen.push(e);
        if done {
            break;
        }
    }
    assert_log_is_contiguous(&seen);
    // Exactly what the HTTP API has.
    let stored = api.events(&conv).await;
    assert_eq!(seen, stored);
    // Nothing more arrives on a finished conversation, and a late reconnect replays exactly
    // the tail.
    assert!(ws.next(Duration::from_millis(300)).await.is_none());
    let mut ws = api.ws(&conv, stored.len() as u64 - 2).await;
    assert_eq!(ws.next(Duration::from_secs(5)).await.unwrap(), stored[stored.len() - 2]);
    assert_eq!(ws.next(Duration::from_secs(5)).await.unwrap(), stored[stored.len() - 1]);
}

/// Events are read from the conversation's log in JetStream, starting from a sparse index
/// (every 128th event): pages and WebSocket replays from anywhere in a long log, across the
/// index's boundaries, are exact.
#[tokio::test]
async fn a_long_log_reads_exactly_from_anywhere() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push((0..170).map(|i| Reply::tool("think", json!({"thought": format!("step {i}")}))));
    llm.push([Reply::finish("done")]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_MAX_ITERATIONS", "200").set("HALYARD_STUCK_MONOLOGUE", "0"));
    let api = h.api(ALICE);
    let (conv, _) = api.start_ready(json!({"message": "think for a long time"})).await;
    let all = api.wait_finished(&conv, 1).await;
    assert_log_is_contiguous(&all);
    let n = all.len() as u64;
    assert!(n > 300, "only {n} events");

    for after in [0, 1, 126, 127, 128, 129, 130, 255, 256, 257, 300, n - 3, n - 1, n, n + 5] {
        let (status, page) = api.get(&format!("/api/v1/conversations/{conv}/events?after_seq={after}&limit=7")).await;
        assert_eq!(status, 200, "{page}");
        let items = page["items"].as_array().unwrap();
        let want: Vec<&Value> = all.iter().skip(after as usize).take(7).collect();
        assert_eq!(items.iter().collect::<Vec<_>>(), want, "page after {after}");
        assert_eq!(page["has_more"], items.len() == 7, "after {after}: {page}");
    }
    // Paging through with a small limit gives the whole log, once.
    let mut paged = Vec::new();
    let mut after = 0;
    loop {
        let (_, page) = api.get(&format!("/api/v1/conversations/{conv}/events?after_seq={after}&limit=50")).await;
        paged.extend(page["items"].as_array().unwrap().iter().cloned());
        match page["next_after_seq"].as_u64() {
            Some(next) => after = next,
            None => break,
        }
    }
    assert_eq!(paged, all);
    // A WebSocket replay from the middle of the log gets exactly the tail.
    let mut ws = api.ws(&conv, 200).await;
    let mut tail = Vec::new();
    while let Some(e) = ws.next(Duration::from_millis(500)).await {
        tail.push(e);
    }
    assert_eq!(tail, all[200..].to_vec());
}

/// A message that arrives while a run makes what turns out to be its last LLM call was left to
/// that run, which never saw it: nobody answered. Each round here sends a message, waits until
/// its run is in a (slow) LLM call that will finish the run, and sends another: the second must
/// be answered by a run of its own, every time.
#[tokio::test]
async fn a_message_sent_as_a_run_ends_always_gets_a_run() {
    init();
    let llm = ScriptedLlm::start().await;
    // The answer names the latest user message; answering a first message takes a while.
    llm.fallback(|request| {
        let last_user = request["messages"].as_array().into_iter().flatten().rfind(|m| m["role"] == "user");
        let text = last_user.and_then(|m| m["content"].as_str()).unwrap_or_default().to_owned();
        let reply = Reply::finish(&format!("answered {text}"));
        if text.starts_with("first") { Reply::Delay(Duration::from_millis(80), Box::new(reply)) } else { reply }
    });
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_RATE_LIMIT_PER_MINUTE", "0"));
    let api = h.api(ALICE);
    let (conv, _) = api.start_ready(json!({})).await;
    let mut ws = api.ws(&conv, 0).await;
    let rounds = 40;
    for i in 0..rounds {
        let asked = llm.requests().len();
        let (s, answer) = api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": format!("first {i}")})).await;
        assert_eq!(s, 202, "{answer}");
        // Its run is now in its LLM call, whose answer finishes the run.
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while llm.requests().len() == asked {
            assert!(std::time::Instant::now() < deadline, "round {i}: the first message got no run");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let (s, answer) = api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": format!("second {i}")})).await;
        assert_eq!(s, 202, "{answer}");
        loop {
            let Some(e) = ws.next(Duration::from_secs(15)).await else {
                panic!("round {i}: the message sent during the run's last LLM call was never answered");
            };
            if e["kind"] == "agent_message" && e["text"] == format!("answered second {i}").as_str() {
                break;
            }
        }
        // Its run finishes, and nothing else is owed.
        loop {
            let e = ws.next(Duration::from_secs(15)).await.expect("the answering run finishes");
            if e["kind"] == "execution_status" && e["status"] == "finished" {
                break;
            }
        }
    }
    let events = api.events(&conv).await;
    assert_log_is_contiguous(&events);
}

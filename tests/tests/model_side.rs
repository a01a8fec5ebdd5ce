#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! The model side as a user checks it: several tool calls of one answer that only read run at
//! once (timed by an MCP server of the Python SDK that says when each call started and ended),
//! one that changes something runs alone; a profile whose provider fails hands the call to its
//! fallbacks; and a profile lists the models its provider offers.

use std::time::Duration;

use halyard_tests::events::ended;
use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use reqwest::Method;
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";

#[tokio::test]
async fn calls_that_only_read_overlap_and_one_that_changes_runs_alone() {
    init();
    let clock = halyard_tests::python::PythonServer::start("mcp_clock.py", &[]).await;
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_MCP_ALLOW", "loopback"));
    let alice = h.api(ALICE);
    let (s, v) = alice.call(Method::PUT, "/api/v1/mcp-servers/clock", Some(json!({"transport": "http", "url": clock.mcp_url()}))).await;
    assert_eq!(s, 201, "{v}");
    let look = |name: &str, seconds: f64| ("clock__look".to_owned(), json!({"name": name, "seconds": seconds}));
    llm.push([
        Reply::Tools(
            Some("Three looks, a mark, a look, and a search.".into()),
            vec![
                look("a", 1.0),
                look("b", 1.0),
                look("c", 1.0),
                ("clock__mark".into(), json!({"name": "d", "seconds": 0.5, "security_risk": "low"})),
                look("e", 0.3),
                ("grep".into(), json!({"pattern": "needle"})),
            ],
        ),
        Reply::finish("looked"),
    ]);
    let (conv, _) = alice.start_ready(json!({"message": "look around"})).await;
    let events = alice.wait_events(&conv, "the run", ended).await;
    let all = Value::Array(events.clone()).to_string();
    assert!(all.contains("\"finished\""), "{all}");

    // Observations come in the calls' order, whatever order the calls ended in.
    let observed: Vec<&Value> = events.iter().filter(|e| e["kind"] == "observation" && e["tool"] != "finish").collect();
    let tools: Vec<&str> = observed.iter().map(|e| e["tool"].as_str().unwrap()).collect();
    assert_eq!(tools, ["clock__look", "clock__look", "clock__look", "clock__mark", "clock__look", "grep"], "{all}");
    // Each clock answer: `<tool> <name> <start> <end>`.
    let times: Vec<(String, f64, f64)> = observed[..5]
        .iter()
        .map(|e| {
            let words: Vec<&str> = e["content"].as_str().unwrap().split_whitespace().collect();
            assert_eq!(words.len(), 4, "{e}");
            (words[1].to_owned(), words[2].parse().unwrap(), words[3].parse().unwrap())
        })
        .collect();
    let names: Vec<&str> = times.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names, ["a", "b", "c", "d", "e"]);
    let (reads, mark, after) = (&times[..3], &times[3], &times[4]);
    // The three looks overlapped: each began before any of them ended.
    let last_start = reads.iter().map(|t| t.1).fold(f64::MIN, f64::max);
    let first_end = reads.iter().map(|t| t.2).fold(f64::MAX, f64::min);
    assert!(last_start < first_end, "the three reading calls ran one after another: {times:?}");
    // The mark ran alone: after the looks before it, before the look after it.
    let reads_end = reads.iter().map(|t| t.2).fold(f64::MIN, f64::max);
    assert!(mark.1 >= reads_end, "the changing call overlapped the reads before it: {times:?}");
    assert!(after.1 >= mark.2, "the read after the changing call began before it ended: {times:?}");
}

#[tokio::test]
async fn a_failing_provider_hands_the_call_to_its_fallbacks_and_each_answer_is_counted_by_model() {
    init();
    let (main, backup, big) = (ScriptedLlm::start().await, ScriptedLlm::start().await, ScriptedLlm::start().await);
    let h = Halyard::start(
        HalyardOptions::new(&main.base_url).set("HALYARD_LLM_PROFILE_ALLOW", "loopback").set("HALYARD_LLM_MAX_RETRIES", "1"),
    );
    let alice = h.api(ALICE);
    let put = |name: &str, body: Value| {
        let alice = &alice;
        let path = format!("/api/v1/llm-profiles/{name}");
        async move { alice.call(Method::PUT, &path, Some(body)).await }
    };
    // A fallback is another profile, named once, never the profile itself.
    let (s, e) = put("main", json!({"base_url": main.base_url, "model": "model-a", "fallbacks": ["main"]})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_field")), "{e}");
    let (s, e) = put("main", json!({"base_url": main.base_url, "model": "model-a", "fallbacks": ["x", "x"]})).await;
    assert_eq!(s, 400, "{e}");
    let (s, p) =
        put("main", json!({"base_url": main.base_url, "model": "model-a", "context_window": 8192, "fallbacks": ["backup", "gone", "big"]}))
            .await;
    assert_eq!((s, &p["fallbacks"]), (201, &json!(["backup", "gone", "big"])), "{p}");
    let (s, p) = put(
        "backup",
        json!({"provider": "anthropic", "base_url": backup.base_url, "model": "claude-b", "api_key": "sk-ant-b", "context_window": 8192}),
    )
    .await;
    assert_eq!(s, 201, "{p}");
    let (s, p) = put("big", json!({"base_url": big.base_url, "model": "model-c", "context_window": 200000})).await;
    assert_eq!(s, 201, "{p}");

    // First call: the primary answers 503 through its retry, and the Anthropic fallback answers
    // (the profile `gone` does not exist and is passed over). Second call: the primary says the
    // prompt is too long, and the first fallback with a larger window takes it.
    main.push([Reply::Status(503), Reply::Status(503), Reply::ContextTooLong]);
    backup.push([Reply::tool("terminal", json!({"command": "echo from-backup", "security_risk": "low"}))]);
    big.push([Reply::finish("finished by the big one")]);
    let (conv, _) = alice.start_ready(json!({"message": "do it", "llm_profile": "main"})).await;
    let events = alice.wait_events(&conv, "the run", ended).await;
    let all = Value::Array(events.clone()).to_string();
    assert!(all.contains("\"finished\"") && all.contains("finished by the big one"), "the run did not finish: {all}");
    assert_eq!(main.requests().len(), 3, "two tries of the first call, one of the second");
    assert_eq!((backup.requests().len(), big.requests().len()), (1, 1));
    assert_eq!(backup.headers("x-api-key"), [Some("sk-ant-b".to_owned())], "the fallback's own key went to its own server");
    // The fallback got the same call: the user's message, in its own wire's shape.
    assert!(backup.requests()[0]["messages"].to_string().contains("do it"), "{}", backup.requests()[0]);
    let calls: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e["kind"] == "llm_call")
        .map(|e| (e["profile"].as_str().unwrap_or("-"), e["model"].as_str().unwrap_or("-")))
        .collect();
    assert_eq!(calls, [("backup", "claude-b"), ("big", "model-c")], "{all}");
    // The output of the fallback's command is there: the run went on as usual.
    assert!(events.iter().any(|e| e["kind"] == "observation" && e["content"].as_str().unwrap_or_default().contains("from-backup")));

    let (_, c) = alice.get(&format!("/api/v1/conversations/{conv}")).await;
    let by_model = &c["metrics"]["by_model"];
    assert_eq!(by_model["claude-b"]["llm_calls"], 1, "{c}");
    assert_eq!(by_model["model-c"]["llm_calls"], 1, "{c}");
    assert!(by_model.get("model-a").is_none(), "the primary answered nothing: {c}");
    assert_eq!(c["metrics"]["llm_calls"], 2);

    // When every profile fails, the run fails with each one's trouble named.
    main.push([Reply::Status(503), Reply::Status(503)]);
    backup.push([Reply::Status(429), Reply::Status(429)]);
    big.push([Reply::Status(502), Reply::Status(502)]);
    alice.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "again"})).await;
    let events = alice
        .wait_events(&conv, "the failure", |ev| ev.iter().any(|e| e["kind"] == "agent_error" && e["code"] == "llm_server_error"))
        .await;
    let error = events.iter().rev().find(|e| e["kind"] == "agent_error").unwrap();
    let message = error["message"].as_str().unwrap();
    for named in ["profile `main` (model-a)", "profile `backup` (claude-b)", "profile `big` (model-c)", "HTTP 429", "HTTP 502"] {
        assert!(message.contains(named), "{named} is not named: {message}");
    }
}

#[tokio::test]
async fn a_profile_lists_the_models_its_provider_offers() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_LLM_PROFILE_ALLOW", "loopback"));
    let alice = h.api(ALICE);
    let bob = h.api("bob-secret-key");
    let body = |provider: &str| json!({"provider": provider, "base_url": llm.base_url, "model": "m", "api_key": "sk-test"});
    assert_eq!(alice.call(Method::PUT, "/api/v1/llm-profiles/oa", Some(body("openai"))).await.0, 201);
    assert_eq!(alice.call(Method::PUT, "/api/v1/llm-profiles/an", Some(body("anthropic"))).await.0, 201);

    let (s, v) = alice.get("/api/v1/llm-profiles/oa/models").await;
    assert_eq!(s, 200, "{v}");
    let ids: Vec<&str> = v["items"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, halyard_tests::llm::OPENAI_MODELS);

    // Anthropic's list comes two a page: all of its pages, with names for people.
    let (s, v) = alice.get("/api/v1/llm-profiles/an/models").await;
    assert_eq!(s, 200, "{v}");
    let got: Vec<(&str, &str)> =
        v["items"].as_array().unwrap().iter().map(|m| (m["id"].as_str().unwrap(), m["display_name"].as_str().unwrap())).collect();
    assert_eq!(got, halyard_tests::llm::ANTHROPIC_MODELS);

    // Someone else's profile is not found; a server that cannot say is a 502 in words.
    assert_eq!(bob.get("/api/v1/llm-profiles/oa/models").await.0, 404);
    let dead = json!({"base_url": "http://127.0.0.1:9/v1", "model": "m"});
    assert_eq!(alice.call(Method::PUT, "/api/v1/llm-profiles/dead", Some(dead)).await.0, 201);
    let (s, e) = alice.get("/api/v1/llm-profiles/dead/models").await;
    assert_eq!((s, e["error"]["code"].as_str()), (502, Some("llm_models_unavailable")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("dead"), "{e}");
}

#[tokio::test]
async fn thinking_is_asked_for_recorded_and_given_back_and_effort_is_sent() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_LLM_PROFILE_ALLOW", "loopback"));
    let alice = h.api(ALICE);
    let put = |name: &str, body: Value| {
        let alice = &alice;
        let path = format!("/api/v1/llm-profiles/{name}");
        async move { alice.call(Method::PUT, &path, Some(body)).await }
    };
    let deep = |budget: u64| {
        json!({"provider": "anthropic", "base_url": llm.base_url, "model": "claude-deep", "api_key": "sk-ant", "temperature": 0.2,
               "max_output_tokens": 1024, "thinking_budget_tokens": budget})
    };
    let (s, e) = put("deep", deep(100)).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_field")), "{e}");
    let (s, e) = put("effort", json!({"base_url": llm.base_url, "model": "o-scripted", "reasoning_effort": "extreme"})).await;
    assert_eq!(s, 400, "{e}");
    let (s, p) = put("deep", deep(2048)).await;
    assert_eq!((s, p["thinking_budget_tokens"].as_u64()), (201, Some(2048)), "{p}");
    let (s, p) = put("effort", json!({"base_url": llm.base_url, "model": "o-scripted", "reasoning_effort": "high"})).await;
    assert_eq!((s, p["reasoning_effort"].as_str()), (201, Some("high")), "{p}");

    // Anthropic: the scripted server refuses, as the API does, a next turn whose assistant
    // message with tool use does not start with its thinking exactly as it was signed.
    let first = "The user wants a listing: I should run ls first.";
    llm.push([
        Reply::Thinking(first.into(), Box::new(Reply::tool("terminal", json!({"command": "ls", "security_risk": "low"})))),
        Reply::Thinking("The listing is there; I can finish.".into(), Box::new(Reply::finish("done thinking"))),
    ]);
    let (conv, _) = alice.start_ready(json!({"message": "list the files", "llm_profile": "deep"})).await;
    let events = alice.wait_events(&conv, "the run", ended).await;
    let all = Value::Array(events.clone()).to_string();
    assert!(all.contains("done thinking") && all.contains("\"finished\""), "the run did not finish: {all}");
    let requests = llm.requests();
    assert_eq!(requests[0]["thinking"], json!({"type": "enabled", "budget_tokens": 2048}));
    assert!(requests[0].get("temperature").is_none(), "no temperature with thinking: {}", requests[0]);
    assert!(requests[0]["max_tokens"].as_u64().unwrap() > 2048, "{}", requests[0]);
    let given_back = requests[1]["messages"].as_array().unwrap().iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(
        given_back["content"][0],
        json!({"type": "thinking", "thinking": first, "signature": halyard_tests::llm::signature(first)}),
        "{given_back}"
    );
    assert_eq!(given_back["content"][1]["type"], "redacted_thinking", "{given_back}");
    assert!(given_back["content"][1]["data"].as_str().is_some_and(|d| d.starts_with("Emw")), "{given_back}");
    // Each answer's thinking is an event of its own, right before the answer it led to.
    let at = events.iter().position(|e| e["kind"] == "thinking").expect("a thinking event");
    assert_eq!(events[at]["blocks"][0]["text"], first);
    assert!(events[at]["blocks"][1]["redacted"].is_string(), "{}", events[at]);
    // (The title setter's event is its own service's and may land anywhere: it is not the run's.)
    let next = events[at + 1..].iter().find(|e| e["kind"] != "title").expect("an event after the thinking");
    assert_eq!(next["kind"], "action", "{all}");
    assert_eq!(events.iter().filter(|e| e["kind"] == "thinking").count(), 2);

    // OpenAI-compatible: the effort is sent, and the reasoning the server streams is kept.
    llm.push([Reply::Thinking("Short and sweet.".into(), Box::new(Reply::finish("effortless")))]);
    let (conv, _) = alice.start_ready(json!({"message": "think hard", "llm_profile": "effort"})).await;
    let events = alice.wait_events(&conv, "the run", ended).await;
    let asked = llm.requests().last().cloned().unwrap();
    assert_eq!(asked["reasoning_effort"], "high", "{asked}");
    let thought = events.iter().find(|e| e["kind"] == "thinking").expect("a thinking event");
    assert_eq!(thought["blocks"][0]["text"], "Short and sweet.");
}

/// Folds `answer_delta` frames as `AnswerDelta`'s documentation says a reader does.
#[derive(Default)]
struct Folded {
    text: String,
    have: u64,
    frames: usize,
}

impl Folded {
    fn fold(&mut self, d: &Value) {
        let (from, to, text) = (d["from"].as_u64().unwrap(), d["to"].as_u64().unwrap(), d["text"].as_str().unwrap());
        self.frames += 1;
        if from == self.have {
            self.text.push_str(text);
            self.have = to;
        } else if from == 0 && to > self.have {
            self.text = text.to_owned();
            self.have = to;
        }
    }
}

/// Reads a socket until the agent's message: the folded deltas, the first delta frame, and
/// whether every delta came before that message.
async fn watch(mut socket: halyard_tests::harness::EventSocket) -> (Folded, Option<Value>, Vec<Value>) {
    let mut folded = Folded::default();
    let (mut first, mut events) = (None, Vec::new());
    while let Some(frame) = socket.next_frame(Duration::from_secs(20)).await {
        if frame["kind"] == "answer_delta" {
            assert!(frame.get("seq").is_none(), "a delta is no event: {frame}");
            assert!(!events.iter().any(|e: &Value| e["kind"] == "agent_message"), "a delta after the message: {frame}");
            first.get_or_insert(frame.clone());
            folded.fold(&frame);
            continue;
        }
        let done = frame["kind"] == "agent_message";
        events.push(frame);
        if done {
            break;
        }
    }
    (folded, first, events)
}

#[tokio::test]
async fn the_answer_streams_to_watchers_as_it_is_written_and_only_the_whole_reaches_the_log() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let alice = h.api(ALICE);
    let answer: String = (1..=40).map(|i| format!("word{i} ")).collect::<String>().trim_end().to_owned();
    llm.push([Reply::Paced(Duration::from_millis(40), Box::new(Reply::Text(answer.clone())))]);
    let (conv, _) = alice.start_ready(json!({})).await;
    let early = alice.ws(&conv, 0).await;
    let watching = tokio::spawn(watch(early));
    let (s, _) = alice.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "say many words"})).await;
    assert_eq!(s, 202);
    // A second reader comes in the middle of the answer.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while llm.pieces().len() < 10 {
        assert!(std::time::Instant::now() < deadline, "the answer did not start streaming");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let late = tokio::spawn(watch(alice.ws(&conv, 0).await));

    let (folded, _, events) = watching.await.unwrap();
    assert_eq!(folded.text, answer, "the deltas make up the answer");
    assert!(folded.frames >= 10, "the answer came in pieces: {} frames", folded.frames);
    assert_eq!(events.last().unwrap()["text"], answer.as_str());
    // The late reader got the text so far first, then the rest.
    let (folded, first, _) = late.await.unwrap();
    let first = first.expect("the late reader got deltas");
    assert_eq!(first["from"], 0, "the first frame is the text so far: {first}");
    assert!(first["to"].as_u64().unwrap() >= 10 && answer.starts_with(first["text"].as_str().unwrap()), "{first}");
    assert!(!first["text"].as_str().unwrap().is_empty(), "{first}");
    assert_eq!(folded.text, answer);

    // The log has the one whole message, and no delta.
    let logged = alice.events(&conv).await;
    assert!(!logged.iter().any(|e| e["kind"] == "answer_delta"), "a delta reached the log");
    let messages: Vec<&Value> = logged.iter().filter(|e| e["kind"] == "agent_message").collect();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["text"], answer.as_str());
}

#[tokio::test]
async fn a_model_that_speaks_only_the_responses_api_runs_a_task() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_LLM_PROFILE_ALLOW", "loopback"));
    let alice = h.api(ALICE);
    let profile = json!({"provider": "openai-responses", "base_url": llm.base_url, "model": "gpt-5.1-codex", "api_key": "sk-resp",
                         "reasoning_effort": "medium", "tools": "gpt5"});
    let (s, p) = alice.call(Method::PUT, "/api/v1/llm-profiles/codex", Some(profile)).await;
    assert_eq!((s, p["provider"].as_str()), (201, Some("openai-responses")), "{p}");
    let (s, e) = alice
        .call(Method::PUT, "/api/v1/llm-profiles/bad", Some(json!({"provider": "responses", "base_url": llm.base_url, "model": "m"})))
        .await;
    assert!(s == 400 && e["error"]["message"].as_str().unwrap().contains("openai-responses"), "{e}");

    // The scripted server refuses, as the API does, a history whose function call has no output.
    llm.push([
        Reply::Thinking(
            "Check the directory first.".into(),
            Box::new(Reply::Tools(
                Some("Looking.".into()),
                vec![("terminal".into(), json!({"command": "echo from-responses", "security_risk": "low"}))],
            )),
        ),
        Reply::finish("responded"),
    ]);
    let (conv, _) = alice.start_ready(json!({"message": "use the responses api", "llm_profile": "codex"})).await;
    let events = alice.wait_events(&conv, "the run", ended).await;
    let all = Value::Array(events.clone()).to_string();
    assert!(all.contains("responded") && all.contains("\"finished\""), "the run did not finish: {all}");
    let requests = llm.requests();
    let first = &requests[0];
    assert_eq!(llm.auth_headers()[0].as_deref(), Some("Bearer sk-resp"));
    assert!(first["instructions"].as_str().is_some_and(|i| !i.is_empty()), "the system prompt is the instructions: {first}");
    assert_eq!(first["input"][0]["role"], "user", "{first}");
    assert_eq!(first["input"][0]["content"][0]["type"], "input_text");
    assert!(first["tools"].as_array().unwrap().iter().any(|t| t["type"] == "function" && t["name"] == "apply_patch"), "{first}");
    assert_eq!(first["reasoning"]["effort"], "medium");
    assert_eq!(first["store"], false);
    // The next turn carries the call and its output, paired by call_id.
    let items = requests[1]["input"].as_array().unwrap();
    let call = items.iter().find(|i| i["type"] == "function_call").expect("the function call went back");
    let output = items.iter().find(|i| i["type"] == "function_call_output").expect("its output went back");
    assert_eq!(call["call_id"], output["call_id"]);
    assert!(output["output"].as_str().unwrap().contains("from-responses"), "{output}");
    // The reasoning summary is a thinking event; the call is counted with its usage.
    let thought = events.iter().find(|e| e["kind"] == "thinking").expect("a thinking event");
    assert_eq!(thought["blocks"][0]["text"], "Check the directory first.");
    let call = events.iter().find(|e| e["kind"] == "llm_call").unwrap();
    assert_eq!((call["model"].as_str(), call["profile"].as_str()), (Some("gpt-5.1-codex"), Some("codex")));
    assert!(call["prompt_tokens"].as_u64().unwrap() > 10, "{call}");
}

#[tokio::test]
async fn a_gemini_profile_is_tested_lists_its_models_and_runs_a_task_with_its_thinking_signed() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_LLM_PROFILE_ALLOW", "loopback"));
    let alice = h.api(ALICE);
    let profile = json!({"provider": "gemini", "base_url": llm.gemini_base(), "model": "gemini-2.5-pro", "api_key": "AIza-gemini",
                         "thinking_budget_tokens": 2048});
    let (s, p) = alice.call(Method::PUT, "/api/v1/llm-profiles/gem", Some(profile)).await;
    assert_eq!((s, p["provider"].as_str()), (201, Some("gemini")), "{p}");
    // Its server's models, every page, without the ones that do not generate content.
    let (s, models) = alice.get("/api/v1/llm-profiles/gem/models").await;
    let ids: Vec<&str> = models["items"].as_array().map(|m| m.iter().filter_map(|m| m["id"].as_str()).collect()).unwrap_or_default();
    assert_eq!((s, ids), (200, vec!["gemini-scripted-flash", "gemini-scripted-pro"]), "{models}");
    llm.push([Reply::Text("OK".into())]);
    let (s, tested) = alice.post("/api/v1/llm-profiles/gem/test", json!({})).await;
    assert_eq!((s, tested["ok"].as_bool()), (200, Some(true)), "{tested}");

    llm.push([
        Reply::Thinking(
            "List it first.".into(),
            Box::new(Reply::Tools(
                Some("Looking.".into()),
                vec![("terminal".into(), json!({"command": "echo from-gemini", "security_risk": "low"}))],
            )),
        ),
        Reply::finish("gemini done"),
    ]);
    let (conv, _) = alice.start_ready(json!({"message": "use gemini", "llm_profile": "gem"})).await;
    let events = alice.wait_events(&conv, "the run", ended).await;
    let all = Value::Array(events.clone()).to_string();
    assert!(all.contains("gemini done") && all.contains("\"finished\""), "the run did not finish: {all}");
    // Gemini's wire: the model in the path, the key in x-goog-api-key, the system prompt apart.
    let paths = llm.paths();
    assert!(paths.iter().all(|p| p.starts_with("/v1beta/models/gemini-2.5-pro:")), "{paths:?}");
    assert!(llm.headers("x-goog-api-key").iter().all(|k| k.as_deref() == Some("AIza-gemini")));
    let requests = llm.requests();
    let first = &requests[1];
    assert!(first["systemInstruction"]["parts"][0]["text"].as_str().is_some_and(|t| !t.is_empty()), "{first}");
    assert_eq!(first["contents"][0]["role"], "user", "{first}");
    let declared = first["tools"][0]["functionDeclarations"].as_array().unwrap();
    assert!(declared.iter().any(|d| d["name"] == "terminal" && d["parametersJsonSchema"]["type"] == "object"), "{first}");
    assert_eq!(first["generationConfig"]["thinkingConfig"]["thinkingBudget"], 2048);
    // The next turn: the call, signed as it came, and its result naming its function.
    let contents = requests[2]["contents"].as_array().unwrap();
    let model = contents.iter().find(|c| c["role"] == "model").expect("the model's turn went back");
    let call = model["parts"].as_array().unwrap().iter().find(|p| p.get("functionCall").is_some()).unwrap();
    assert_eq!(call["thoughtSignature"].as_str(), Some(halyard_tests::llm::signature("List it first.").as_str()), "{model}");
    let result = contents.last().unwrap()["parts"][0]["functionResponse"].clone();
    assert_eq!(result["name"], "terminal", "{result}");
    assert!(result["response"]["output"].as_str().unwrap().contains("from-gemini"), "{result}");
    let thought = events.iter().find(|e| e["kind"] == "thinking").expect("a thinking event");
    assert_eq!(thought["blocks"][0]["text"], "List it first.");
    let call = events.iter().find(|e| e["kind"] == "llm_call").unwrap();
    assert_eq!((call["model"].as_str(), call["profile"].as_str()), (Some("gemini-2.5-pro"), Some("gem")));
    assert!(call["prompt_tokens"].as_u64().unwrap() > 10, "{call}");
}

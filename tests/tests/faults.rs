#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! A command survives its handler's crash and is applied once. For every command kind of the
//! conversation manager and the agent runner, the service is made to abort (`HALYARD_FAULT`)
//! when the command has just been received, when it has been applied and is about to be
//! acknowledged, and just after the acknowledgement, and the test checks what a user would: the
//! command took effect exactly once and every run finished. Command consumers hand an
//! unsettled command out again after two seconds here (`HALYARD_COMMAND_ACK_WAIT_MS`), instead
//! of the default thirty.
//!
//! Each case runs twice: with one replica (`halyard up`, started again on the same data after
//! the crash) and with two (every service its own `halyard serve` process on one nats-server,
//! two replicas of the faulted service, both given the fault with a shared once-file: whichever
//! gets there first dies, and its peer must finish the job while it stays down).
//!
//! Beside them, runs cut off at the worst moment: a message while the lease bucket is gone, and
//! a parent whose runner dies while it waits for its helpers.

use std::time::Duration;

use halyard_tests::{Api, Halyard, HalyardOptions, NatsServer, Reply, ScriptedLlm, init};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";
const POINTS: [&str; 3] = ["received", "before_ack", "after_ack"];

/// The agent's steps, by what the user asked: a finish, a long command, or one that needs a
/// confirmation.
fn script(llm: &ScriptedLlm) {
    llm.fallback(|req: &Value| {
        let messages = req["messages"].as_array().cloned().unwrap_or_default();
        let last_user = messages.iter().rposition(|m| m["role"] == "user").unwrap_or(0);
        let asked = messages.get(last_user).map(|m| m["content"].to_string()).unwrap_or_default();
        let step = messages[last_user..].iter().filter(|m| m["role"] == "tool").count();
        let command = if asked.contains("long") {
            "sleep 4; echo slept"
        } else if asked.contains("endless") {
            "sleep 60; echo never-printed"
        } else if asked.contains("careful") {
            "echo carefully-done"
        } else {
            return Reply::finish("done");
        };
        match step {
            0 => Reply::tool("terminal", json!({"command": command, "security_risk": "low"})),
            _ => Reply::finish("done"),
        }
    });
}

fn count(events: &[Value], pred: impl Fn(&Value) -> bool) -> usize {
    events.iter().filter(|e| pred(e)).count()
}

fn status_is(status: &'static str) -> impl Fn(&Value) -> bool {
    move |e| e["kind"] == "execution_status" && e["status"] == status
}

/// Where the case runs.
enum Deployment {
    /// `halyard up`: the crash takes everything down, and it is started again without the fault.
    One(Halyard),
    /// Each service its own process; `faulted` are the two replicas of the service under test.
    /// (Fields drop in this order: the processes first, then their NATS server. The other way
    /// round, each process's shutdown waited for a bus that was gone, until it was killed 30 s
    /// later.)
    Two { gateway: Halyard, others: Vec<Halyard>, faulted: Vec<Halyard>, _nats: NatsServer, _once: tempfile::TempDir },
}

impl Deployment {
    fn start(base: HalyardOptions, service: &str, fault: &str, replicas: usize) -> Self {
        if replicas == 1 {
            return Self::One(Halyard::start(base.set("HALYARD_FAULT", fault)));
        }
        let nats = NatsServer::start();
        let once = tempfile::tempdir().unwrap();
        let spec = format!("{fault}:{}", once.path().join("fired").display());
        let serve = |name: &str| {
            base.clone().serve(&nats.url, &[name]).set("HALYARD_SECRET", "a-shared-deployment-secret").set("HALYARD_LEASE_TTL_MS", "2000")
        };
        let others =
            ["sandbox", "conversations", "agent"].into_iter().filter(|s| *s != service).map(|s| Halyard::start(serve(s))).collect();
        let faulted = (0..2).map(|_| Halyard::start(serve(service).set("HALYARD_FAULT", &spec))).collect();
        let gateway = Halyard::start(serve("gateway"));
        Self::Two { gateway, others, faulted, _nats: nats, _once: once }
    }

    fn api(&self) -> Api {
        match self {
            Self::One(h) => h.api(ALICE),
            Self::Two { gateway, .. } => gateway.api(ALICE),
        }
    }

    /// Waits for a process to abort at the injected fault. With one replica it is started again
    /// without the fault; with two, it stays down and its peer carries on.
    fn crash(&mut self, fault: &str) {
        match self {
            Self::One(h) => {
                let died = tokio::task::block_in_place(|| h.wait_exit(Duration::from_secs(40)));
                assert!(died, "{fault}: the process did not abort at the fault; log:\n{}", h.log());
                assert!(h.log().contains("injected fault"), "{fault}: it died of something else; log:\n{}", h.log());
                h.unset("HALYARD_FAULT");
                tokio::task::block_in_place(|| h.restart());
            }
            Self::Two { faulted, .. } => {
                let deadline = std::time::Instant::now() + Duration::from_secs(40);
                let dead = tokio::task::block_in_place(|| {
                    loop {
                        if let Some(i) = (0..faulted.len()).find(|&i| faulted[i].wait_exit(Duration::from_millis(50))) {
                            break i;
                        }
                        let logs: Vec<String> = faulted.iter().map(Halyard::log).collect();
                        assert!(
                            std::time::Instant::now() < deadline,
                            "{fault}: no replica aborted at the fault; logs:\n{}",
                            logs.join("\n---\n")
                        );
                    }
                });
                let log = faulted[dead].log();
                assert!(log.contains("injected fault"), "{fault}: a replica died of something else; log:\n{log}");
            }
        }
    }

    /// Every process's log, for a failure's message.
    fn logs(&self) -> String {
        match self {
            Self::One(h) => h.log(),
            Self::Two { gateway, others, faulted, .. } => {
                std::iter::once(gateway).chain(others).chain(faulted).map(Halyard::log).collect::<Vec<_>>().join("\n---\n")
            }
        }
    }
}

/// Sends a request the process may not live to answer: the command is on the bus either way
/// (or the test says so when it is not).
async fn fire(api: &Api, method: reqwest::Method, path: &str, body: Value) {
    let request = api.http.request(method, format!("{}{path}", api.base)).bearer_auth(&api.key).json(&body);
    if let Ok(response) = request.send().await {
        let status = response.status().as_u16();
        assert!((200..300).contains(&status), "{path}: {status} {}", response.text().await.unwrap_or_default());
    }
}

/// The one conversation of the user (started before the crash, perhaps unanswered).
async fn only_conversation(api: &Api) -> String {
    let listed = api.wait_for("/api/v1/conversations", "the conversation", |l| l["count"] == 1).await;
    listed["items"][0]["id"].as_str().unwrap().to_owned()
}

/// One run of `kind` crashed at `point`, with `replicas` of its service, checked.
async fn case(service: &str, kind: &str, point: &str, replicas: usize) {
    let fault = format!("{service}:{kind}:{point}");
    let llm = ScriptedLlm::start().await;
    script(&llm);
    let base = HalyardOptions::new(&llm.base_url).set("HALYARD_COMMAND_ACK_WAIT_MS", "2000").set("HALYARD_LLM_PROFILE_ALLOW", "loopback");
    let policy = if matches!(kind, "cmd.agent.confirm" | "cmd.agent.reject") { "always" } else { "never" };
    let first = match kind {
        "cmd.agent.pause" | "cmd.agent.resume" => "a long one",
        "cmd.agent.interrupt" => "an endless one",
        "cmd.agent.confirm" | "cmd.agent.reject" => "a careful one",
        _ => "hello",
    };
    let starts = matches!(kind, "cmd.conversation.start" | "cmd.agent.start");
    // Only the command of `kind` trips it: the others before it go through.
    let mut d = Deployment::start(base, service, &fault, replicas);
    let api = d.api();
    let mut start = json!({"message": first, "confirmation_policy": policy});
    // A repository whose hooks wait for the answer the command carries.
    let hooked = (kind == "cmd.agent.answer_hooks").then(repository_with_a_hook);
    if let Some(repo) = &hooked {
        start["repository"] = json!({"url": repo.path().to_string_lossy()});
    }

    if starts {
        fire(&api, reqwest::Method::POST, "/api/v1/conversations", start).await;
        d.crash(&fault);
        let api = d.api();
        let conv = only_conversation(&api).await;
        let events = api.wait_events(&conv, &format!("{fault}: the run"), |ev| count(ev, status_is("finished")) >= 1).await;
        assert_eq!(count(&events, |e| e["kind"] == "conversation_started"), 1, "{fault}: {}", Value::Array(events.clone()));
        assert_eq!(count(&events, |e| e["kind"] == "user_message" && e["text"] == first), 1, "{fault}");
        return;
    }

    // The conversation, up to where the command comes in.
    let (conv, _) = api.start_ready(start).await;
    match kind {
        "cmd.agent.pause" | "cmd.agent.resume" => {
            api.wait_events(&conv, "the long command", |ev| ev.iter().any(|e| e["kind"] == "action")).await;
            if kind == "cmd.agent.resume" {
                api.post(&format!("/api/v1/conversations/{conv}/pause"), json!({})).await;
                api.wait_events(&conv, "paused", |ev| count(ev, status_is("paused")) == 1).await;
            }
        }
        "cmd.agent.interrupt" => {
            api.wait_events(&conv, "the endless command", |ev| ev.iter().any(|e| e["kind"] == "action")).await;
        }
        "cmd.agent.confirm" | "cmd.agent.reject" => {
            api.wait_events(&conv, "the wait", |ev| count(ev, status_is("waiting_for_confirmation")) == 1).await;
        }
        "cmd.agent.answer_hooks" => {
            let asked = |ev: &[Value]| {
                ev.iter().rposition(|e| e["kind"] == "hooks_consent_required").is_some_and(|at| ev[at..].iter().any(status_is("idle")))
            };
            api.wait_events(&conv, "the hooks question", asked).await;
        }
        _ => {
            api.wait_events(&conv, "the first run", |ev| count(ev, status_is("finished")) == 1).await;
        }
    }
    let path = format!("/api/v1/conversations/{conv}");
    match kind {
        "cmd.agent.user_message" => fire(&api, reqwest::Method::POST, &format!("{path}/messages"), json!({"text": "again"})).await,
        "cmd.agent.pause" => fire(&api, reqwest::Method::POST, &format!("{path}/pause"), json!({})).await,
        "cmd.agent.resume" => fire(&api, reqwest::Method::POST, &format!("{path}/resume"), json!({})).await,
        "cmd.agent.interrupt" => fire(&api, reqwest::Method::POST, &format!("{path}/interrupt"), json!({})).await,
        "cmd.agent.confirm" => fire(&api, reqwest::Method::POST, &format!("{path}/confirm"), json!({})).await,
        "cmd.agent.reject" => fire(&api, reqwest::Method::POST, &format!("{path}/reject"), json!({"reason": "not now"})).await,
        "cmd.agent.set_confirmation_policy" => {
            fire(&api, reqwest::Method::PUT, &format!("{path}/confirmation-policy"), json!({"policy": "risky"})).await
        }
        "cmd.agent.set_llm_profile" => {
            let profile = json!({"base_url": llm.base_url, "model": "other-model", "api_key": "sk-other"});
            assert_eq!(api.call(reqwest::Method::PUT, "/api/v1/llm-profiles/other", Some(profile)).await.0, 201);
            fire(&api, reqwest::Method::PUT, &format!("{path}/llm-profile"), json!({"profile": "other"})).await
        }
        "cmd.conversation.delete" | "cmd.agent.delete" => fire(&api, reqwest::Method::DELETE, &path, json!({})).await,
        "cmd.agent.record_terminal_opened" => {
            // The process may die before or after the socket opens: the record is on the bus.
            use tokio_tungstenite::tungstenite::client::IntoClientRequest;
            let url = format!("{}{path}/terminal/ws", api.base.replacen("http", "ws", 1));
            let mut request = url.into_client_request().unwrap();
            request.headers_mut().insert("authorization", format!("Bearer {}", api.key).parse().unwrap());
            if let Ok((mut socket, _)) = tokio_tungstenite::connect_async(request).await {
                let _ = socket.close(None).await;
            }
        }
        "cmd.agent.restore" => fire(&api, reqwest::Method::POST, &format!("{path}/restore"), json!({"at_seq": 1})).await,
        "cmd.agent.answer_hooks" => {
            let events = api.events(&conv).await;
            let sha = events.iter().find(|e| e["kind"] == "hooks_consent_required").unwrap()["sha256"].clone();
            fire(&api, reqwest::Method::POST, &format!("{path}/hooks-consent"), json!({"sha256": sha, "allow": true})).await
        }
        other => panic!("no case for {other}"),
    }
    d.crash(&fault);
    let api = d.api();
    let all = |events: &[Value]| Value::Array(events.to_vec()).to_string();
    match kind {
        "cmd.agent.user_message" => {
            let events = api.wait_events(&conv, &format!("{fault}: the second run"), |ev| count(ev, status_is("finished")) >= 2).await;
            assert_eq!(count(&events, |e| e["kind"] == "user_message" && e["text"] == "again"), 1, "{fault}: {}", all(&events));
        }
        "cmd.agent.pause" => {
            // Paused once, then resumed by the user; the command's result arrives once.
            api.wait_events(&conv, &format!("{fault}: paused"), |ev| count(ev, status_is("paused")) >= 1).await;
            api.post(&format!("{path}/resume"), json!({})).await;
            let t = std::time::Instant::now();
            let events = loop {
                let events = api.events(&conv).await;
                if count(&events, status_is("finished")) >= 1 {
                    break events;
                }
                if t.elapsed() > Duration::from_secs(40) {
                    eprintln!("{}", d.logs());
                    panic!("{fault}: the resumed run did not finish in 40 s (its log is above): {}", all(&events));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            };
            assert_eq!(count(&events, status_is("paused")), 1, "{fault}: {}", all(&events));
            assert_eq!(count(&events, |e| e["kind"] == "observation" && e["tool"] == "terminal"), 1, "{fault}: {}", all(&events));
        }
        "cmd.agent.resume" => {
            let events = api.wait_events(&conv, &format!("{fault}: the run"), |ev| count(ev, status_is("finished")) >= 1).await;
            assert_eq!(count(&events, |e| e["kind"] == "observation" && e["tool"] == "terminal"), 1, "{fault}: {}", all(&events));
        }
        "cmd.agent.interrupt" => {
            let interrupted =
                |e: &Value| e["kind"] == "execution_status" && e["reason"].as_str().is_some_and(|r| r.contains("interrupted"));
            api.wait_events(&conv, &format!("{fault}: interrupted"), |ev| count(ev, interrupted) >= 1).await;
            // A second application would come with the redelivery, within the ack wait.
            tokio::time::sleep(Duration::from_secs(3)).await;
            let events = api.events(&conv).await;
            assert_eq!(count(&events, interrupted), 1, "{fault}: {}", all(&events));
            let printed = |e: &Value| e["kind"] == "observation" && e["content"].as_str().is_some_and(|c| c.contains("never-printed"));
            assert_eq!(count(&events, printed), 0, "{fault}: the command ran to its end");
        }
        "cmd.agent.confirm" => {
            let events = api.wait_events(&conv, &format!("{fault}: the run"), |ev| count(ev, status_is("finished")) >= 1).await;
            let done = |e: &Value| e["kind"] == "observation" && e["content"].as_str().is_some_and(|c| c.contains("carefully-done"));
            assert_eq!(count(&events, done), 1, "{fault}: {}", all(&events));
        }
        "cmd.agent.reject" => {
            let events = api.wait_events(&conv, &format!("{fault}: the run"), |ev| count(ev, status_is("finished")) >= 1).await;
            assert_eq!(count(&events, |e| e["kind"] == "action_rejected"), 1, "{fault}: {}", all(&events));
            let ran = |e: &Value| e["kind"] == "observation" && e["content"].as_str().is_some_and(|c| c.contains("carefully-done"));
            assert_eq!(count(&events, ran), 0, "{fault}: the refused command ran");
        }
        "cmd.agent.set_confirmation_policy" => {
            api.wait_events(&conv, &format!("{fault}: the policy"), |ev| ev.iter().any(|e| e["kind"] == "confirmation_policy")).await;
            tokio::time::sleep(Duration::from_secs(3)).await;
            let events = api.events(&conv).await;
            assert_eq!(count(&events, |e| e["kind"] == "confirmation_policy"), 1, "{fault}: {}", all(&events));
        }
        "cmd.agent.record_terminal_opened" => {
            let opened = |e: &Value| e["kind"] == "terminal_opened";
            api.wait_events(&conv, &format!("{fault}: the record"), |ev| count(ev, opened) >= 1).await;
            tokio::time::sleep(Duration::from_secs(3)).await;
            let events = api.events(&conv).await;
            assert_eq!(count(&events, opened), 1, "{fault}: {}", all(&events));
        }
        "cmd.agent.restore" => {
            let restored = |e: &Value| e["kind"] == "workspace_restored";
            api.wait_events(&conv, &format!("{fault}: the restore"), |ev| count(ev, restored) >= 1).await;
            tokio::time::sleep(Duration::from_secs(3)).await;
            let events = api.events(&conv).await;
            assert_eq!(count(&events, restored), 1, "{fault}: {}", all(&events));
            assert_eq!(count(&events, |e| e["kind"] == "agent_error"), 0, "{fault}: {}", all(&events));
        }
        "cmd.agent.answer_hooks" => {
            // Answered once, and the run that waited for it ran the hook once.
            let events = api.wait_events(&conv, &format!("{fault}: the run"), |ev| count(ev, status_is("finished")) >= 1).await;
            assert_eq!(count(&events, |e| e["kind"] == "hooks_consent"), 1, "{fault}: {}", all(&events));
            assert_eq!(count(&events, |e| e["kind"] == "hook" && e["event"] == "session_start"), 1, "{fault}: {}", all(&events));
        }
        "cmd.agent.set_llm_profile" => {
            api.wait_events(&conv, &format!("{fault}: the profile"), |ev| ev.iter().any(|e| e["kind"] == "llm_profile")).await;
            tokio::time::sleep(Duration::from_secs(3)).await;
            let events = api.events(&conv).await;
            assert_eq!(count(&events, |e| e["kind"] == "llm_profile"), 1, "{fault}: {}", all(&events));
        }
        _ => {
            // Deleted: gone from the API, its sandbox with it.
            let deadline = std::time::Instant::now() + Duration::from_secs(40);
            while api.get(&path).await.0 != 404 {
                assert!(std::time::Instant::now() < deadline, "{fault}: the conversation was not deleted");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let (_, sandboxes) = api.get("/api/v1/sandboxes").await;
            let deadline = std::time::Instant::now() + Duration::from_secs(40);
            let mut left = sandboxes["items"].as_array().map(Vec::len).unwrap_or(0);
            while left > 0 {
                assert!(std::time::Instant::now() < deadline, "{fault}: its sandbox was not deleted");
                tokio::time::sleep(Duration::from_millis(200)).await;
                left = api.get("/api/v1/sandboxes").await.1["items"].as_array().map(Vec::len).unwrap_or(0);
            }
        }
    }
}

/// A repository with a hooks file (one `session_start` command), which its owner must allow.
fn repository_with_a_hook() -> tempfile::TempDir {
    let repo = tempfile::tempdir().unwrap();
    let p = repo.path();
    std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(p.join(".openhands")).unwrap();
    let hooks = json!({"session_start": [{"hooks": [{"command": "echo started >> started.log"}]}]});
    std::fs::write(p.join(".openhands/hooks.json"), hooks.to_string()).unwrap();
    halyard_tests::git(p, &["init", "-q", "-b", "main"]);
    halyard_tests::git(p, &["add", "."]);
    halyard_tests::git(p, &["commit", "-qm", "a hook"]);
    repo
}

macro_rules! cases {
    ($replicas:literal; $($name:ident: $service:literal, $kind:literal;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            init();
            for point in POINTS {
                let began = std::time::Instant::now();
                case($service, $kind, point, $replicas).await;
                eprintln!("{}:{}:{point} with {} replica(s) took {:?}", $service, $kind, $replicas, began.elapsed());
            }
        }
    )*};
}

macro_rules! every_kind {
    ($replicas:literal) => {
        cases! { $replicas;
            conversation_start: "conversations", "cmd.conversation.start";
            conversation_delete: "conversations", "cmd.conversation.delete";
            agent_start: "agent", "cmd.agent.start";
            agent_user_message: "agent", "cmd.agent.user_message";
            agent_pause: "agent", "cmd.agent.pause";
            agent_resume: "agent", "cmd.agent.resume";
            agent_interrupt: "agent", "cmd.agent.interrupt";
            agent_confirm: "agent", "cmd.agent.confirm";
            agent_reject: "agent", "cmd.agent.reject";
            agent_set_confirmation_policy: "agent", "cmd.agent.set_confirmation_policy";
            agent_set_llm_profile: "agent", "cmd.agent.set_llm_profile";
            agent_delete: "agent", "cmd.agent.delete";
            agent_record_terminal_opened: "agent", "cmd.agent.record_terminal_opened";
            agent_restore: "agent", "cmd.agent.restore";
            agent_answer_hooks: "agent", "cmd.agent.answer_hooks";
        }
    };
}

mod one_replica {
    use super::*;
    every_kind!(1);
}

mod two_replicas {
    use super::*;
    every_kind!(2);
}

/// A run never starts without its lease. While the lease bucket cannot be reached (here: it is
/// gone, as a bucket's stream is to a node while its leader is elected), a message is appended
/// and its command is tried again rather than answered by a run no other runner would know of;
/// when the runner holding the command dies meanwhile, the other one answers it once the
/// bucket is back. (A chaos run wedged so before: the run started leaseless, its runner died.)
#[tokio::test(flavor = "multi_thread")]
async fn a_message_waits_for_the_lease_bucket_and_outlives_its_runner() {
    init();
    let llm = ScriptedLlm::start().await;
    script(&llm);
    let nats = NatsServer::start();
    let serve = |name: &str| {
        HalyardOptions::new(&llm.base_url)
            .serve(&nats.url, &[name])
            .set("HALYARD_SECRET", "a-shared-deployment-secret")
            .set("HALYARD_LEASE_TTL_MS", "2000")
            .set("HALYARD_COMMAND_ACK_WAIT_MS", "2000")
    };
    let _others: Vec<Halyard> = ["sandbox", "conversations"].into_iter().map(|s| Halyard::start(serve(s))).collect();
    let mut agents: Vec<Halyard> = (0..2).map(|_| Halyard::start(serve("agent"))).collect();
    let gateway = Halyard::start(serve("gateway"));
    let api = gateway.api(ALICE);
    let (conv, _) = api.start_ready(json!({})).await;
    api.wait_events(&conv, "the start", |ev| ev.iter().any(status_is("idle"))).await;

    let js = async_nats::jetstream::new(async_nats::connect(&nats.url).await.unwrap());
    let bucket = halyard_protocol::subjects::AGENT_LEASE_BUCKET;
    js.delete_key_value(bucket).await.unwrap();
    let (s, _) = api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "hello"})).await;
    assert_eq!(s, 202);
    api.wait_events(&conv, "the message", |ev| ev.iter().any(|e| e["text"] == "hello")).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let events = api.events(&conv).await;
    assert_eq!(count(&events, status_is("running")), 0, "a run started without its lease: {events:?}");

    // The runner that tried dies; the bucket comes back; the other runner answers.
    let tried = agents.iter().position(|a| a.log().contains("cannot take the run lease")).expect("a runner tried to take the lease");
    tokio::task::block_in_place(|| agents[tried].kill9());
    js.create_key_value(async_nats::jetstream::kv::Config { bucket: bucket.into(), history: 1, ..Default::default() }).await.unwrap();
    let events = api.wait_events(&conv, "the answer", |ev| ev.iter().any(status_is("finished"))).await;
    assert_eq!(count(&events, |e| e["text"] == "hello"), 1, "the message is in the log once");
    assert_eq!(count(&events, status_is("running")), 1, "one run answered it: {events:?}");
    let survivor = &agents[1 - tried];
    assert!(!survivor.log().contains("panicked"), "{}", survivor.log());
}

/// A parent waiting for its helpers loses its runner: the runner that takes it over watches the
/// same helpers (none started twice, each end recorded once) and the parent finishes with what
/// they said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_waiting_for_its_helpers_outlives_its_runner() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.fallback(|req: &Value| {
        let messages = req["messages"].as_array().cloned().unwrap_or_default();
        let first = messages.iter().find(|m| m["role"] == "user").and_then(|m| m["content"].as_str()).unwrap_or_default().to_owned();
        let results: Vec<&Value> = messages.iter().filter(|m| m["role"] == "tool").collect();
        let last = results.last().and_then(|m| m["content"].as_str()).unwrap_or_default().to_owned();
        let task = |who: &str| json!({"title": format!("Helper {who}"), "prompt": format!("helper {who}: wait, then answer")});
        match (first.as_str(), results.len()) {
            ("hand it out", 0) => Reply::tool("delegate", json!({"tasks": [task("a"), task("b")]})),
            ("hand it out", _) => Reply::finish(&format!("they said: {last}")),
            (helper, 0) if helper.starts_with("helper") => {
                Reply::tool("terminal", json!({"command": "sleep 4; echo waited", "security_risk": "low"}))
            }
            (helper, _) => Reply::finish(&format!("{} is done", &helper[..8])),
        }
    });
    let nats = NatsServer::start();
    let serve = |name: &str| {
        HalyardOptions::new(&llm.base_url)
            .serve(&nats.url, &[name])
            .set("HALYARD_SECRET", "a-shared-deployment-secret")
            .set("HALYARD_LEASE_TTL_MS", "2000")
            .set("HALYARD_COMMAND_ACK_WAIT_MS", "2000")
    };
    let _others: Vec<Halyard> = ["sandbox", "conversations"].into_iter().map(|s| Halyard::start(serve(s))).collect();
    let mut agents: Vec<Halyard> = (0..2).map(|_| Halyard::start(serve("agent"))).collect();
    let gateway = Halyard::start(serve("gateway"));
    let api = gateway.api(ALICE);
    let (parent, _) = api.start_ready(json!({"message": "hand it out"})).await;
    api.wait_events(&parent, "the helpers' start", |ev| ev.iter().any(|e| e["kind"] == "sub_conversations_started")).await;

    // The runner watching the helpers dies while they work.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let watching = loop {
        if let Some(i) = agents.iter().position(|a| a.log().contains("helpers started")) {
            break i;
        }
        assert!(std::time::Instant::now() < deadline, "no runner said it started the helpers");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    tokio::task::block_in_place(|| agents[watching].kill9());

    let events = api.wait_events(&parent, "the parent's end", |ev| ev.iter().any(status_is("finished"))).await;
    assert!(events.iter().any(|e| e["kind"] == "agent_error" && e["code"] == "run_interrupted"), "it was taken over: {events:?}");
    assert_eq!(count(&events, |e| e["kind"] == "sub_conversations_started"), 1);
    let ended: Vec<&Value> = events.iter().filter(|e| e["kind"] == "sub_conversation_ended").collect();
    assert_eq!(ended.len(), 2, "each helper's end recorded once: {ended:?}");
    let result = events.iter().find(|e| e["kind"] == "observation" && e["tool"] == "delegate").expect("the delegate result");
    let content = result["content"].as_str().unwrap();
    assert!(content.contains("helper a is done") && content.contains("helper b is done"), "{content}");
    let (_, list) = api.get("/api/v1/conversations").await;
    assert_eq!(list["count"], 3, "no helper started twice: {list}");
    let survivor = &agents[1 - watching];
    assert!(!survivor.log().contains("panicked"), "{}", survivor.log());
}

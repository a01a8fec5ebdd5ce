#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! The bus side: services as separate processes, and poison messages.

use std::time::{Duration, Instant};

use futures::StreamExt;
use halyard_tests::{Halyard, HalyardOptions, NatsServer, Receiver, Reply, ScriptedLlm, init};
use serde_json::json;

const ALICE: &str = "alice-secret-key";

#[tokio::test]
async fn each_service_can_run_as_its_own_process() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::tool("terminal", json!({"command": "echo split"})), Reply::finish("done")]);
    let nats = NatsServer::start();
    let shared = |services: &[&str]| {
        HalyardOptions::new(&llm.base_url).serve(&nats.url, services).set("HALYARD_SECRET", "a-shared-deployment-secret")
    };
    // Four processes, one per service, that only share the bus.
    let sandbox = Halyard::start(shared(&["sandbox"]));
    let agent = Halyard::start(shared(&["agent"]));
    let conversations = Halyard::start(shared(&["conversations"]));
    // The gateway logs JSON lines, as a log collector wants them.
    let gateway = Halyard::start(shared(&["gateway"]).set("HALYARD_LOG_FORMAT", "json"));
    let api = gateway.api(ALICE);
    let (conv, task) = api.start_ready(json!({"message": "go"})).await;
    let events = api.wait_finished(&conv, 1).await;
    let obs = events.iter().find(|e| e["tool"] == "terminal" && e["kind"] == "observation").unwrap();
    assert!(obs["content"].as_str().unwrap().starts_with("split"));
    // The workspace lives with the sandbox service.
    assert!(sandbox.workspace(task["sandbox_id"].as_str().unwrap()).exists());
    assert!(!gateway.workspace(task["sandbox_id"].as_str().unwrap()).exists());

    let log = gateway.log();
    let lines: Vec<serde_json::Value> =
        log.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}"))).collect();
    assert!(lines.iter().any(|l| l["level"] == "INFO" && l["message"] == "halyard is up" && l["target"] == "halyard"), "{log}");

    // Each process's /metrics says what it did, and only that.
    for h in [&sandbox, &agent, &conversations, &gateway] {
        let health = reqwest::get(format!("{}/readyz", h.metrics)).await.unwrap();
        assert_eq!(health.status(), 200);
    }
    let m = agent.scrape().await;
    assert_eq!(m.sum("halyard_events_appended_total", &[]), events.len() as f64, "{m:?}");
    let llm_calls = events.iter().filter(|e| e["kind"] == "llm_call").count() as f64;
    assert_eq!(m.sum("halyard_llm_calls_total", &[]), llm_calls);
    assert_eq!(m.sum("halyard_agent_runs_ended_total", &[("outcome", "finished")]), 1.0);
    assert_eq!(m.sum("halyard_agent_runs_live", &[]), 0.0);
    let m = sandbox.scrape().await;
    assert_eq!(m.sum("halyard_sandbox_starts_total", &[("kind", "process"), ("outcome", "running")]), 1.0, "{m:?}");
    assert_eq!(m.sum("halyard_sandbox_start_seconds_count", &[("kind", "process")]), 1.0);
    assert_eq!(m.sum("halyard_events_appended_total", &[]), 0.0, "the sandbox appended events");
    let m = gateway.scrape().await;
    assert_eq!(m.sum("halyard_http_requests_total", &[("route", "/api/v1/conversations"), ("method", "POST"), ("status", "202")]), 1.0);
    let reads = m.sum("halyard_http_requests_total", &[("route", "/api/v1/conversations/{id}/events"), ("status", "200")]);
    assert!(reads >= 1.0, "{m:?}");
    assert_eq!(m.sum("halyard_http_request_seconds_count", &[("route", "/api/v1/conversations/{id}/events")]), reads);
}

/// CI once had about 5 GB free: the screenshots' bucket then reserved 4 GiB of a store that
/// JetStream sizes at 75% of the free disk, and no Halyard started. Nothing is reserved now.
#[tokio::test]
async fn halyard_starts_and_runs_on_a_small_jetstream_store() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::tool("terminal", json!({"command": "echo small"})), Reply::finish("done")]);
    let nats = NatsServer::start_with_store_limit("256MB");
    let all = ["sandbox", "agent", "conversations", "gateway", "callbacks"];
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).serve(&nats.url, &all).set("HALYARD_SECRET", "a-shared-deployment-secret"));
    let api = h.api(ALICE);
    let (conv, _) = api.start_ready(json!({"message": "go"})).await;
    let events = api.wait_finished(&conv, 1).await;
    let obs = events.iter().find(|e| e["tool"] == "terminal" && e["kind"] == "observation").unwrap();
    assert!(obs["content"].as_str().unwrap().starts_with("small"), "{obs}");
}

#[tokio::test]
async fn poison_messages_are_parked_and_the_service_carries_on() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_WEBHOOK_ALLOW", "loopback"));
    // Only an admin may write garbage anywhere on the bus.
    let client = h.nats_client("admin").await;
    let js = async_nats::jetstream::new(client);
    // The webhook fan-out only reads events while some webhook is enabled: enable one, and
    // wait until it has delivered an event (so the fan-out knows of it).
    let receiver = Receiver::start().await;
    let api = h.api(ALICE);
    let (s, w) = api.post("/api/v1/webhooks", json!({"url": receiver.url})).await;
    assert_eq!(s, 201, "{w}");
    llm.push([Reply::finish("warm-up")]);
    let (warm, _) = api.start_ready(json!({"message": "warm up"})).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !receiver.received().iter().any(|r| r.json()["conversation_id"] == warm.as_str()) {
        assert!(Instant::now() < deadline, "the webhook got nothing");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    api.wait_finished(&warm, 1).await;
    for subject in [
        "halyard.cmd.agent.01900000-0000-7000-8000-000000000001",
        "halyard.cmd.sandbox.01900000-0000-7000-8000-000000000002",
        "halyard.cmd.conversation.01900000-0000-7000-8000-000000000003",
        "halyard.cmd.automation.01900000-0000-7000-8000-000000000005",
    ] {
        js.publish(subject, "this is not msgpack".into()).await.unwrap().await.unwrap();
    }
    // Garbage on the event log is skipped by readers too.
    js.publish("halyard.events.01900000-0000-7000-8000-000000000004.user_message", vec![0xc1, 0xc1].into()).await.unwrap().await.unwrap();

    let dlq = js.get_stream("HALYARD_DEAD_LETTERS").await.unwrap();
    let consumer = dlq.create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig::default()).await.unwrap();
    let mut messages = consumer.messages().await.unwrap();
    // Every consumer parks what it cannot read: the four command handlers, and the title
    // setter and webhook fan-out for the garbage event.
    let mut parked: Vec<(String, String)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while parked.len() < 6 {
        assert!(Instant::now() < deadline, "only parked {parked:?}");
        if let Ok(Some(Ok(m))) = tokio::time::timeout(Duration::from_secs(5), messages.next()).await {
            let header = |name: &str| m.headers.as_ref().and_then(|h| h.get(name)).map(|v| v.to_string()).unwrap_or_default();
            assert!(header("Halyard-Reason").contains("undecodable"), "{}", header("Halyard-Reason"));
            let subject = header("Halyard-Subject");
            if subject.starts_with("halyard.events.") {
                assert_eq!(&m.payload[..], &[0xc1, 0xc1]);
            } else {
                assert_eq!(&m.payload[..], b"this is not msgpack");
            }
            parked.push((subject, header("Halyard-Service")));
        }
    }
    parked.sort();
    let services: Vec<&str> = parked.iter().map(|(_, s)| s.as_str()).collect();
    for svc in ["agent", "sandbox", "conversations", "callbacks", "titles", "automations"] {
        assert!(services.contains(&svc), "{svc} parked nothing: {parked:?}");
    }
    // Nothing is left to be retried forever: the command queue drains (the warm-up
    // conversation's own commands may still be settling for a moment).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let commands = js.get_stream("HALYARD_COMMANDS").await.unwrap().get_info().await.unwrap();
        if commands.state.messages == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{} commands left in the queue", commands.state.messages);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Every service still works.
    llm.push([Reply::finish("still alive")]);
    let (conv, _) = api.start_ready(json!({"message": "are you ok?"})).await;
    api.wait_finished(&conv, 1).await;
}

/// A bus holding conversation logs in the layout before the event kind went into the subject
/// (`halyard.events.<id>`) is refused with a clear error, instead of starting those logs again
/// at seq 1.
#[tokio::test]
async fn logs_in_the_old_subject_layout_are_refused() {
    init();
    let nats = NatsServer::start();
    let client = async_nats::connect(&nats.url).await.unwrap();
    let js = async_nats::jetstream::new(client);
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "HALYARD_EVENTS".into(),
        subjects: vec!["halyard.events.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    js.publish("halyard.events.01900000-0000-7000-8000-000000000009", "an old event".into()).await.unwrap().await.unwrap();
    // Bound, not a temporary: tokio's `output()` spawns at once, and a temporary TempDir would be
    // removed while the child writes in it.
    let data_dir = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(halyard_tests::harness::halyard_bin())
        .args(["serve", "titles"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HALYARD_NATS_URL", &nats.url)
        .env("HALYARD_DATA_DIR", data_dir.path())
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out).await.expect("halyard did not exit").unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("layout of an earlier Halyard") && stderr.contains("halyard.events.<id>.<kind>"), "{stderr}");
}

/// The accounts configuration `nats/` documents for an operator's own NATS, made by
/// `nats/accounts-from-roles.py`: `halyard setup-bus` declares the topology as admin, then each
/// service runs as its own process with its own role's user, and a conversation goes through.
#[tokio::test]
async fn services_run_against_an_operators_nats_with_one_user_per_role() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::tool("terminal", json!({"command": "echo secured"})), Reply::finish("done")]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../nats/accounts-from-roles.py");
    let out = std::process::Command::new("python3").arg(script).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let roles = ["admin", "gateway", "conversations", "sandbox", "agent", "callbacks", "titles", "automations", "reader"];
    let passwords: Vec<(String, String)> =
        roles.iter().map(|r| (format!("HALYARD_{}_PASSWORD", r.to_uppercase()), format!("pw-{r}-{}", std::process::id()))).collect();
    let nats = NatsServer::start_with_accounts(&String::from_utf8_lossy(&out.stdout), &passwords);
    let password =
        |role: &str| passwords.iter().find(|(k, _)| k == &format!("HALYARD_{}_PASSWORD", role.to_uppercase())).unwrap().1.clone();

    // Restricted users cannot declare the topology; setup-bus does, as admin.
    let data_dir = tempfile::tempdir().unwrap();
    let setup = tokio::process::Command::new(halyard_tests::harness::halyard_bin())
        .arg("setup-bus")
        .env_clear()
        .env("HALYARD_NATS_URL", &nats.url)
        .env("HALYARD_NATS_USER", "admin")
        .env("HALYARD_NATS_PASSWORD", password("admin"))
        .env("HALYARD_DATA_DIR", data_dir.path())
        .output()
        .await
        .unwrap();
    assert!(setup.status.success(), "setup-bus: {}", String::from_utf8_lossy(&setup.stderr));
    let service = |name: &str| {
        HalyardOptions::new(&llm.base_url)
            .serve(&nats.url, &[name])
            .set("HALYARD_SECRET", "a-shared-deployment-secret")
            .set("HALYARD_NATS_USER", name)
            .set("HALYARD_NATS_PASSWORD", &password(name))
    };
    let _sandbox = Halyard::start(service("sandbox"));
    let _agent = Halyard::start(service("agent"));
    let _conversations = Halyard::start(service("conversations"));
    let _titles = Halyard::start(service("titles"));
    let _callbacks = Halyard::start(service("callbacks"));
    let _automations = Halyard::start(service("automations"));
    let gateway = Halyard::start(service("gateway"));
    let api = gateway.api(ALICE);
    let (conv, _) = api.start_ready(json!({"message": "go"})).await;
    let events = api.wait_finished(&conv, 1).await;
    assert!(events.iter().any(|e| e["kind"] == "observation" && e["content"].as_str().unwrap_or_default().starts_with("secured")));

    // A service with the wrong password is told so, at once.
    let data_dir = tempfile::tempdir().unwrap();
    let wrong = tokio::process::Command::new(halyard_tests::harness::halyard_bin())
        .args(["serve", "titles"])
        .env_clear()
        .env("HALYARD_NATS_URL", &nats.url)
        .env("HALYARD_NATS_USER", "titles")
        .env("HALYARD_NATS_PASSWORD", "not-the-password")
        .env("HALYARD_DATA_DIR", data_dir.path())
        .output();
    let wrong = tokio::time::timeout(Duration::from_secs(20), wrong).await.expect("a refused service did not exit").unwrap();
    assert!(!wrong.status.success());
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert!(stderr.contains("refused the credentials of `titles`"), "{stderr}");
}

/// What a connection attempt or operation on the bus was told by the server.
async fn connect_as(h: &Halyard, role: &str) -> (async_nats::Client, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let (user, password) = h.nats_credentials(role);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let client = async_nats::ConnectOptions::with_user_and_password(user, password)
        .name(format!("test-as-{role}"))
        .custom_inbox_prefix(format!("_INBOX_{role}"))
        .event_callback(move |event| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(event.to_string());
            }
        })
        .connect(&h.nats)
        .await
        .unwrap();
    (client, rx)
}

/// Waits for the server to refuse something about `subject`.
async fn refused(errors: &mut tokio::sync::mpsc::UnboundedReceiver<String>, subject: &str) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while let Ok(Some(e)) = tokio::time::timeout_at(deadline, errors.recv()).await {
        if e.contains("Permissions Violation") && e.contains(subject) {
            return true;
        }
    }
    false
}

/// Every NATS connection authenticates, and each service role is refused outside what
/// `nats/roles.json` allows it.
#[tokio::test]
async fn the_bus_asks_who_you_are_and_each_role_keeps_to_its_subjects() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    assert!(async_nats::connect(&h.nats).await.is_err(), "an anonymous client was let in");
    for (user, password) in [("admin", "admin"), ("agent", "password"), ("gateway", ""), ("reader", "reader")] {
        let attempt = async_nats::ConnectOptions::with_user_and_password(user.into(), password.into()).connect(&h.nats).await;
        assert!(attempt.is_err(), "guessed credentials {user}:{password} were accepted");
    }
    let conv = "01900000-0000-7000-8000-0000000000aa";
    let sandbox = "01900000-0000-7000-8000-0000000000bb";
    let publish = [
        ("gateway", format!("halyard.events.{conv}.user_message")),
        ("gateway", format!("halyard.sys.sandbox.{sandbox}")),
        ("agent", format!("halyard.sys.sandbox.{sandbox}")),
        // (The agent runner starts helpers through conversation commands, but never writes the
        // conversations' records.)
        ("agent", format!("halyard.sys.conversation.{conv}")),
        // (Of audit records, it writes only what a conversation reached through its proxy.)
        ("agent", "halyard.sys.audit.user".to_owned()),
        ("titles", format!("halyard.events.{conv}.user_message")),
        ("sandbox", format!("halyard.events.{conv}.action")),
        ("sandbox", format!("halyard.cmd.agent.{conv}")),
        // (Of audit records, it writes only its Runtime API's.)
        ("sandbox", "halyard.sys.audit.user".to_owned()),
        // (It may send a refused connection, on a subject of its own.)
        ("callbacks", format!("halyard.cmd.agent.{conv}.network")),
        ("conversations", format!("halyard.events.{conv}.agent_message")),
        ("callbacks", format!("halyard.cmd.agent.{conv}")),
        ("reader", format!("halyard.cmd.agent.{conv}")),
        ("reader", format!("halyard.events.{conv}.user_message")),
        ("reader", "$JS.API.STREAM.DELETE.HALYARD_EVENTS".to_owned()),
        // Nobody but the dispatcher reads delivery jobs.
        ("gateway", "$JS.API.CONSUMER.MSG.NEXT.HALYARD_DELIVERIES.webhook-x".to_owned()),
        ("agent", "$JS.API.CONSUMER.MSG.NEXT.HALYARD_DELIVERIES.webhook-x".to_owned()),
        ("reader", "$JS.API.CONSUMER.MSG.NEXT.HALYARD_DELIVERIES.webhook-x".to_owned()),
    ];
    for (role, subject) in &publish {
        let (client, mut errors) = connect_as(&h, role).await;
        client.publish(subject.clone(), "forged".into()).await.unwrap();
        client.flush().await.unwrap();
        assert!(refused(&mut errors, subject).await, "{role} may publish to {subject}");
    }
    let subscribe = [
        ("gateway", "halyard.dlv.>"),
        ("agent", "halyard.cmd.>"),
        ("reader", "halyard.sys.>"),
        ("reader", "_INBOX_gateway.>"),
        ("agent", "_INBOX_gateway.>"),
        ("titles", ">"),
    ];
    for (role, subject) in subscribe {
        let (client, mut errors) = connect_as(&h, role).await;
        let _sub = client.subscribe(subject).await.unwrap();
        client.flush().await.unwrap();
        assert!(refused(&mut errors, subject).await, "{role} may subscribe to {subject}");
    }
    // Nothing forged reached the log; what a role may do, it can.
    let admin = async_nats::jetstream::new(h.nats_client("admin").await);
    let mut events = admin.get_stream("HALYARD_EVENTS").await.unwrap();
    assert_eq!(events.info().await.unwrap().state.messages, 0, "a forged event was stored");
    let (reader, mut errors) = connect_as(&h, "reader").await;
    let _sub = reader.subscribe("halyard.events.>").await.unwrap();
    reader.flush().await.unwrap();
    assert!(!refused(&mut errors, "halyard.events").await, "the reader may not follow events");
    // And the services themselves never stepped outside their roles (checked again on drop).
    assert!(h.service_permission_violations().is_empty(), "{:?}", h.service_permission_violations());
}

/// An MCP sign-in's refresh is one agent runner's at a time: the lease beside the sign-in's key
/// is taken by one holder, waited for by the next, and passed over once a holder that died
/// without letting go has let it lapse. Taken as the agent runner's role, which must be allowed
/// to hold it.
#[tokio::test]
async fn a_sign_ins_refresh_lease_has_one_holder_and_a_dead_holders_lapses() {
    use halyard_platform::kv_lease::KvLease;
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let js = async_nats::jetstream::new(h.nats_client("agent").await);
    let kv = js.get_key_value("halyard_user").await.unwrap();
    let key = halyard_protocol::subjects::mcp_sign_in_lease_key(&halyard_protocol::subjects::org_mcp_sign_in_key("acme", "notes"));
    let hold = Duration::from_secs(30);

    let first = KvLease::take(&kv, &key, hold, Duration::from_secs(1)).await.unwrap();
    // A second taker waits, and gives up after its patience while the first holds it.
    let refused = KvLease::take(&kv, &key, hold, Duration::from_millis(500)).await;
    assert!(refused.is_err(), "two holders of one lease");
    // It gets the lease once the first lets go.
    let waiter = tokio::spawn({
        let (kv, key) = (kv.clone(), key.clone());
        async move { KvLease::take(&kv, &key, hold, Duration::from_secs(10)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "the lease was taken while held");
    drop(first);
    let second = tokio::time::timeout(Duration::from_secs(5), waiter).await.expect("the waiter got the lease").unwrap().unwrap();
    drop(second);

    // A holder that died (its lease never let go) is passed over once its lease lapses, not
    // before.
    let dead = KvLease::take(&kv, &key, Duration::from_secs(2), Duration::from_secs(5)).await.unwrap();
    std::mem::forget(dead);
    assert!(KvLease::take(&kv, &key, hold, Duration::from_millis(200)).await.is_err(), "a live lease was taken over");
    let after = KvLease::take(&kv, &key, hold, Duration::from_secs(10)).await.expect("a lapsed lease is taken over");
    drop(after);
    assert!(h.service_permission_violations().is_empty(), "{:?}", h.service_permission_violations());
}

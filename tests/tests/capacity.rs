#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Capacity across hosts: a start that no sandbox host has room for waits its turn in the start
//! queue (`QUEUED`, with its place in line) instead of being refused, users take turns, a
//! queued start can be cancelled or run out of time, and the running limits count across hosts.
//! A message to a hibernated conversation whose wake has to wait is queued the same way and
//! answered once there is room; administrators give organizations shares, priorities and
//! running limits.

use std::time::{Duration, Instant};

use halyard_tests::{Api, Halyard, HalyardOptions, NatsCluster, Reply, ScriptedLlm, init};
use serde_json::{Value, json};

const ROOT: &str = "root-admin-key";

fn keys() -> String {
    "root:root-admin-key,alice:alice-secret-key,bob:bob-secret-key,carol:carol-secret-key,dave:dave-secret-key".into()
}

/// One service of a deployment on `nats_url` whose process hosts have `slots` slots each, with
/// its own uid range and publish address (as hosts whose agent runners are elsewhere).
fn service_opts(llm: &ScriptedLlm, nats_url: &str, name: &str, uid_base: &str, publish: &str, slots: &str) -> HalyardOptions {
    let mut opts = HalyardOptions::new(&llm.base_url)
        .serve(nats_url, &[name])
        .set("HALYARD_SECRET", "a-shared-deployment-secret")
        .set("HALYARD_ADMINS", "root")
        .set("HALYARD_PROCESS_UID_BASE", uid_base)
        .set("HALYARD_SANDBOX_PUBLISH_HOST", publish)
        .set("HALYARD_SANDBOX_HOST_SLOTS", slots);
    opts.api_keys = keys();
    opts
}

/// A deployment in one process (one sandbox host) with `settings`, the users of [`keys`] and
/// root as its administrator.
fn one_process(llm: &ScriptedLlm, settings: &[(&str, &str)]) -> Halyard {
    let opts = settings.iter().fold(HalyardOptions::new(&llm.base_url).set("HALYARD_ADMINS", "root"), |o, (k, v)| o.set(k, v));
    Halyard::start(HalyardOptions { api_keys: keys(), ..opts })
}

/// Waits until the start task's status is one of `want`; panics on another final status.
async fn settle(api: &Api, task: &str, want: &[&str]) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (s, t) = api.get(&format!("/api/v1/start-tasks/{task}")).await;
        assert_eq!(s, 200, "{t}");
        let status = t["status"].as_str().unwrap_or_default();
        if want.contains(&status) {
            return t;
        }
        assert!(!["READY", "ERROR", "CANCELLED"].contains(&status), "start {task} ended {status}, not {want:?}: {t}");
        assert!(Instant::now() < deadline, "start {task} still {status}: {t}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Sandboxes running or starting on every host, from the administrators' view of the queue.
async fn busy(root: &Api) -> u64 {
    let (s, q) = root.get("/api/v1/admin/queue").await;
    assert_eq!(s, 200, "{q}");
    q["hosts"].as_array().unwrap().iter().filter(|h| h["alive"] == true).map(|h| h["busy"].as_u64().unwrap()).sum()
}

async fn delete_sandbox(api: &Api, sandbox: &str) {
    assert_eq!(api.call(reqwest::Method::DELETE, &format!("/api/v1/sandboxes/{sandbox}"), None).await.0, 202);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_wait_their_turn_across_three_full_hosts_and_users_take_turns() {
    init();
    let llm = ScriptedLlm::start().await;
    let nats = NatsCluster::start(3).await;
    let service = |name: &str, uid_base: &str, publish: &str| Halyard::start(service_opts(&llm, &nats.url, name, uid_base, publish, "2"));
    // Three process hosts of two slots each.
    let hosts =
        [service("sandbox", "210000", "127.0.0.3"), service("sandbox", "240000", "127.0.0.4"), service("sandbox", "270000", "127.0.0.5")];
    let _agent = service("agent", "0", "127.0.0.1");
    let _conversations = service("conversations", "0", "127.0.0.1");
    let gateway = service("gateway", "0", "127.0.0.1");
    let root = gateway.api(ROOT);
    let users = [gateway.api("alice-secret-key"), gateway.api("bob-secret-key"), gateway.api("carol-secret-key")];
    let dave = gateway.api("dave-secret-key");

    // Dave fills every slot: six sandboxes, two on each host.
    let mut running: Vec<(Api, String)> = Vec::new();
    for _ in 0..6 {
        let (_, task) = dave.start_ready(json!({})).await;
        running.push((dave.clone(), task["sandbox_id"].as_str().unwrap().to_owned()));
    }
    for h in &hosts {
        let held = running.iter().filter(|(_, s)| h.workspace(s).exists()).count();
        assert_eq!(held, 2, "a host runs {held} sandboxes, not its two");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while busy(&root).await != 6 {
        assert!(Instant::now() < deadline, "the hosts do not say they are full");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Ten starts from three users, each user's in a burst: none is refused, all wait.
    let plan = [0, 0, 0, 0, 1, 1, 1, 2, 2, 2];
    let mut waiting: Vec<(usize, String)> = Vec::new();
    for &u in &plan {
        let (s, t) = users[u].post("/api/v1/conversations", json!({})).await;
        assert_eq!(s, 202, "a start at capacity was refused: {t}");
        waiting.push((u, t["id"].as_str().unwrap().to_owned()));
    }
    for (u, task) in &waiting {
        settle(&users[*u], task, &["QUEUED"]).await;
    }
    // Places in line, once all ten are in it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while root.get("/api/v1/admin/queue").await.1["waiting"].as_array().map_or(0, Vec::len) < 10 {
        assert!(Instant::now() < deadline, "the queue never held all ten");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut positions = Vec::new();
    for (u, task) in &waiting {
        let t = settle(&users[*u], task, &["QUEUED"]).await;
        positions.push(t["position"].as_u64().unwrap_or_else(|| panic!("a queued start without its place in line: {t}")));
    }
    // In line, users take turns: alice, bob, carol, alice, bob, carol, ...
    assert_eq!(positions, [1, 4, 7, 10, 2, 5, 8, 3, 6, 9], "places in line");
    let (_, queue) = root.get("/api/v1/admin/queue").await;
    let owners: Vec<&str> = queue["waiting"].as_array().unwrap().iter().map(|w| w["owner"].as_str().unwrap()).collect();
    assert_eq!(owners, ["alice", "bob", "carol", "alice", "bob", "carol", "alice", "bob", "carol", "alice"], "{queue}");
    // An operator sees the same from a terminal: the three full hosts, then the line.
    let out = std::process::Command::new(halyard_tests::harness::halyard_bin())
        .args(["admin", "queue"])
        .env("HALYARD_URL", &root.base)
        .env("HALYARD_API_KEY", &root.key)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(text.lines().filter(|l| l.contains("busy 2 of 2")).count(), 3, "{text}");
    let in_line: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("waiting: 10"))
        .skip(1)
        .map(|l| l.split_whitespace().nth(1).unwrap_or_default())
        .collect();
    assert_eq!(in_line, owners, "{text}");

    // Carol cancels her last start while it waits: it never starts.
    let (carol_last_user, carol_last) = waiting.remove(9);
    let (s, t) = users[carol_last_user].call(reqwest::Method::DELETE, &format!("/api/v1/start-tasks/{carol_last}"), None).await;
    assert_eq!(s, 202, "{t}");
    settle(&users[carol_last_user], &carol_last, &["CANCELLED"]).await;
    let (s, again) = users[carol_last_user].call(reqwest::Method::DELETE, &format!("/api/v1/start-tasks/{carol_last}"), None).await;
    assert_eq!((s, again["error"]["code"].as_str()), (409, Some("start_not_queued")), "{again}");

    // Slots free one at a time; each is taken by the next in line, never more than six at once.
    let names = ["alice", "bob", "carol"];
    let mut served: Vec<&str> = Vec::new();
    while !waiting.is_empty() {
        let (api, sandbox) = running.remove(0);
        delete_sandbox(&api, &sandbox).await;
        let deadline = Instant::now() + Duration::from_secs(60);
        let (i, task) = loop {
            assert!(busy(&root).await <= 6, "more than six sandboxes at once");
            let mut ready = None;
            for (i, (u, task)) in waiting.iter().enumerate() {
                let (_, t) = users[*u].get(&format!("/api/v1/start-tasks/{task}")).await;
                assert_ne!(t["status"], "ERROR", "{t}");
                if t["status"] == "READY" {
                    ready = Some((i, t));
                    break;
                }
            }
            if let Some(found) = ready {
                break found;
            }
            assert!(Instant::now() < deadline, "no waiting start took the freed slot");
            tokio::time::sleep(Duration::from_millis(25)).await;
        };
        let (u, _) = waiting.remove(i);
        served.push(names[u]);
        running.push((users[u].clone(), task["sandbox_id"].as_str().unwrap().to_owned()));
    }
    assert_eq!(served, ["alice", "bob", "carol", "alice", "bob", "carol", "alice", "bob", "alice"], "the order starts were served in");
    // Each of those still running runs on one host, once.
    for (_, sandbox) in &running {
        assert_eq!(hosts.iter().filter(|h| h.workspace(sandbox).exists()).count(), 1, "sandbox {sandbox} is on one host");
    }
    let (_, queue) = root.get("/api/v1/admin/queue").await;
    assert_eq!(queue["waiting"], json!([]), "{queue}");
}

#[tokio::test]
async fn a_users_limit_counts_its_sandboxes_and_a_start_past_it_waits_or_runs_out_of_time() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = one_process(&llm, &[("HALYARD_MAX_RUNNING_PER_USER", "1")]);
    let (alice, bob) = (h.api("alice-secret-key"), h.api("bob-secret-key"));

    let (first, task) = alice.start_ready(json!({})).await;
    let first_sandbox = task["sandbox_id"].as_str().unwrap().to_owned();
    // Past her limit, alice's next start waits; bob's runs meanwhile.
    let (s, second) = alice.post("/api/v1/conversations", json!({"queue_deadline_secs": 2})).await;
    assert_eq!(s, 202, "{second}");
    let second = second["id"].as_str().unwrap().to_owned();
    settle(&alice, &second, &["QUEUED"]).await;
    // (Its place shows once the gateway's copy of the queue has it.)
    let t = alice.wait_for(&format!("/api/v1/start-tasks/{second}"), "its place in line", |t| !t["position"].is_null()).await;
    assert_eq!(t["position"], 1, "{t}");
    bob.start_ready(json!({})).await;
    // Its own deadline passes: it ends, saying why.
    let t = settle(&alice, &second, &["ERROR"]).await;
    let detail = t["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("queue deadline passed") && detail.contains("queue_deadline_secs"), "{t}");
    let conv = alice.get(&format!("/api/v1/conversations/{}", t["conversation_id"].as_str().unwrap())).await.1;
    assert_eq!(conv["state"], "start_failed", "{conv}");

    // A start that waits goes on by itself once her running sandbox goes.
    let (s, third) = alice.post("/api/v1/conversations", json!({})).await;
    assert_eq!(s, 202, "{third}");
    let third = third["id"].as_str().unwrap().to_owned();
    settle(&alice, &third, &["QUEUED"]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    settle(&alice, &third, &["QUEUED"]).await;
    assert_eq!(alice.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{first}"), None).await.0, 202);
    let t = settle(&alice, &third, &["READY"]).await;
    assert_ne!(t["sandbox_id"].as_str().unwrap(), first_sandbox);
    // From a terminal, a start that waits says its place in line, and goes on by itself.
    let home = tempfile::tempdir().unwrap();
    let mut cli = std::process::Command::new(halyard_tests::harness::halyard_bin())
        .args(["run", "say hello"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("HALYARD_URL", &alice.base)
        .env("HALYARD_API_KEY", &alice.key)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = cli.stderr.take().unwrap();
    let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut said = Vec::new();
    while !said.iter().any(|l: &String| l.contains("QUEUED: 1st in line")) {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.recv()).await;
        said.push(line.ok().flatten().unwrap_or_else(|| panic!("the CLI never said its place in line: {said:?}")));
    }
    let third_conv = t["conversation_id"].as_str().unwrap();
    assert_eq!(alice.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{third_conv}"), None).await.0, 202);
    let out = tokio::task::spawn_blocking(move || cli.wait_with_output()).await.unwrap().unwrap();
    while let Some(line) = lines.recv().await {
        said.push(line);
    }
    assert_eq!(out.status.code(), Some(0), "{said:?}\n{}", String::from_utf8_lossy(&out.stdout));
    assert!(said.iter().any(|l| l.trim() == "READY"), "{said:?}");
    // Bad input is refused at once.
    let (s, e) = alice.post("/api/v1/conversations", json!({"queue_deadline_secs": 0})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_field")), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_taken_by_a_host_that_dies_is_made_once_on_another() {
    init();
    let llm = ScriptedLlm::start().await;
    let nats = NatsCluster::start(3).await;
    // Host A's sandboxes take four seconds to come up (its executor is slow to start), long
    // enough to kill A while it makes one.
    let slow = tempfile::tempdir().unwrap();
    let wrapper = slow.path().join("slow-executor");
    // (The binary the harness runs, of this build's profile.)
    let halyard = halyard_tests::harness::halyard_bin();
    std::fs::write(&wrapper, format!("#!/bin/sh\n/bin/sleep 4\nexec {} executor \"$@\"\n", halyard.display())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(slow.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let service = |name: &str, uid_base: &str, publish: &str, executor: Option<&str>| {
        let opts = service_opts(&llm, &nats.url, name, uid_base, publish, "1");
        Halyard::start(match executor {
            Some(executor) => opts.set("HALYARD_EXECUTOR_COMMAND", executor),
            None => opts,
        })
    };
    let mut hosts =
        [service("sandbox", "210000", "127.0.0.3", Some(&wrapper.display().to_string())), service("sandbox", "240000", "127.0.0.4", None)];
    let _agent = service("agent", "0", "127.0.0.1", None);
    let _conversations = service("conversations", "0", "127.0.0.1", None);
    let gateway = service("gateway", "0", "127.0.0.1", None);
    let (alice, dave) = (gateway.api("alice-secret-key"), gateway.api("dave-secret-key"));

    // Dave fills both hosts.
    let mut fillers = Vec::new();
    for _ in 0..2 {
        let (_, task) = dave.start_ready(json!({})).await;
        fillers.push(task["sandbox_id"].as_str().unwrap().to_owned());
    }
    let on = |host: usize| fillers.iter().find(|s| hosts[host].workspace(s).exists()).cloned().expect("a filler on each host");
    let (on_a, on_b) = (on(0), on(1));

    // Alice's start waits; host A gets room and takes it; A dies while it makes the sandbox.
    let (s, task) = alice.post("/api/v1/conversations", json!({})).await;
    assert_eq!(s, 202, "{task}");
    let task = task["id"].as_str().unwrap().to_owned();
    let queued = settle(&alice, &task, &["QUEUED"]).await;
    let sandbox = queued["sandbox_id"].as_str().unwrap().to_owned();
    delete_sandbox(&dave, &on_a).await;
    alice.wait_sandbox(&sandbox, "host A making it", |v| v["status"] == "STARTING").await;
    assert!(hosts[0].workspace(&sandbox).exists(), "host A did not take the start");
    hosts[0].kill9();

    // Host B gets room: once A is known dead, B makes the sandbox, once.
    delete_sandbox(&dave, &on_b).await;
    let ready = settle(&alice, &task, &["READY"]).await;
    assert_eq!(ready["sandbox_id"].as_str().unwrap(), sandbox);
    assert!(hosts[1].workspace(&sandbox).exists(), "the start was not made on host B");
    let view = alice.get(&format!("/api/v1/sandboxes/{sandbox}")).await.1;
    assert_eq!(view["status"], "RUNNING", "{view}");
    for url in view["exposed_urls"].as_array().unwrap() {
        assert!(url["url"].as_str().unwrap().starts_with("http://127.0.0.4:"), "{view}");
    }
    let mine = alice.get("/api/v1/sandboxes").await.1;
    assert_eq!(mine["items"].as_array().unwrap().len(), 1, "{mine}");
}

#[tokio::test]
async fn a_message_to_a_hibernated_conversation_waits_for_room_and_is_answered() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = one_process(&llm, &[("HALYARD_SANDBOX_HOST_SLOTS", "1"), ("HALYARD_SANDBOX_IDLE_STOP_SECS", "2")]);
    let (alice, bob, root) = (h.api("alice-secret-key"), h.api("bob-secret-key"), h.api(ROOT));
    // Every run the script says nothing more of finishes at once.
    llm.fallback(|_| Reply::finish("done"));

    // Alice's conversation answers, goes idle and hibernates: the host's one slot is free.
    let (conv, task) = alice.start_ready(json!({"message": "hello"})).await;
    let sandbox = task["sandbox_id"].as_str().unwrap().to_owned();
    alice.wait_finished(&conv, 1).await;
    alice.wait_sandbox(&sandbox, "alice's sandbox to hibernate", |s| s["status"] == "HIBERNATED").await;
    // Bob takes it, with a command that keeps his sandbox busy.
    llm.push([Reply::tool("terminal", json!({"command": "sleep 60", "timeout": 90, "security_risk": "low"})), Reply::finish("slept")]);
    let (bobs, bobs_task) = bob.start_ready(json!({"message": "take your time"})).await;
    bob.wait_events(&bobs, "bob's command", |ev| ev.iter().any(|e| e["kind"] == "action")).await;

    // Alice writes again: her sandbox cannot wake now, so the wake waits in line; nothing is
    // refused or lost, and her socket says where she stands.
    let mut socket = alice.ws(&conv, u64::MAX >> 1).await;
    let (s, v) = alice.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "still there?"})).await;
    assert_eq!(s, 202, "{v}");
    let waiting = alice
        .wait_sandbox(&sandbox, "the wake to wait in line", |s| s["detail"].as_str().is_some_and(|d| d.starts_with("wake queued")))
        .await;
    assert_eq!(waiting["status"], "HIBERNATED", "{waiting}");
    let frame = loop {
        let f = socket.next_frame(Duration::from_secs(30)).await.expect("a frame with the wake's place in line");
        if f["kind"] == "queue_position" {
            break f;
        }
    };
    assert_eq!(frame["position"], 1, "{frame}");
    let (_, queue) = root.get("/api/v1/admin/queue").await;
    assert_eq!(queue["waiting"][0]["sandbox_id"], sandbox.as_str(), "{queue}");
    assert!(queue["waiting"][0]["wake_on"].is_string(), "a wake names the host holding its workspace: {queue}");
    // A look at her files meanwhile is not held for the queue: 429, in words.
    let (s, e) = alice.get(&format!("/api/v1/conversations/{conv}/files")).await;
    assert_eq!((s, e["error"]["code"].as_str()), (429, Some("sandbox_wake_queued")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("1st in line"), "{e}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(alice.get(&format!("/api/v1/sandboxes/{sandbox}")).await.1["status"], "HIBERNATED");

    // Bob's sandbox goes: alice's wakes, and her message is answered.
    delete_sandbox(&bob, bobs_task["sandbox_id"].as_str().unwrap()).await;
    alice.wait_finished(&conv, 2).await;
    let frame = loop {
        let f = socket.next_frame(Duration::from_secs(30)).await.expect("a frame saying the wake left the line");
        if f["kind"] == "queue_position" {
            break f;
        }
    };
    assert_eq!(frame["position"], Value::Null, "{frame}");
    let view = alice.get(&format!("/api/v1/sandboxes/{sandbox}")).await.1;
    assert!(view["status"] == "RUNNING" || view["status"] == "HIBERNATED", "{view}");
    let (_, queue) = root.get("/api/v1/admin/queue").await;
    assert_eq!(queue["waiting"], json!([]), "{queue}");
}

#[tokio::test]
async fn an_administrator_gives_an_organization_a_share_and_a_priority() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = one_process(&llm, &[("HALYARD_SANDBOX_HOST_SLOTS", "1")]);
    let (alice, bob, dave, root) = (h.api("alice-secret-key"), h.api("bob-secret-key"), h.api("dave-secret-key"), h.api(ROOT));
    assert_eq!(alice.post("/api/v1/orgs", json!({"name": "acme"})).await.0, 201);

    // Dave holds the one slot; bob (on his own) and acme (alice) each start two, bob first.
    let (_, filler) = dave.start_ready(json!({})).await;
    for (api, body) in [(&bob, json!({})), (&bob, json!({})), (&alice, json!({"org": "acme"})), (&alice, json!({"org": "acme"}))] {
        let (s, t) = api.post("/api/v1/conversations", body).await;
        assert_eq!(s, 202, "{t}");
        settle(api, t["id"].as_str().unwrap(), &["QUEUED"]).await;
    }
    let line = || async {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (_, q) = root.get("/api/v1/admin/queue").await;
            let owners: Vec<String> = q["waiting"].as_array().unwrap().iter().map(|w| w["owner"].as_str().unwrap().to_owned()).collect();
            if owners.len() == 4 {
                return (owners.join(" "), q);
            }
            assert!(Instant::now() < deadline, "the queue never held all four: {q}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    assert_eq!(line().await.0, "bob alice bob alice", "equal shares take turns");

    // Weight 2: acme takes two turns to bob's one.
    let (s, share) = root.call(reqwest::Method::PUT, "/api/v1/admin/queue/shares/acme", Some(json!({"weight": 2}))).await;
    assert_eq!(s, 200, "{share}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (order, q) = line().await;
        if order == "bob alice alice bob" {
            assert_eq!(q["shares"], json!([{"org": "acme", "weight": 2, "priority": 0, "max_running": null}]), "{q}");
            break;
        }
        assert!(Instant::now() < deadline, "weight 2 never took effect: {order}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A higher priority: all of acme's first.
    let (s, share) = root.call(reqwest::Method::PUT, "/api/v1/admin/queue/shares/acme", Some(json!({"priority": 1}))).await;
    assert_eq!(s, 200, "{share}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while line().await.0 != "alice alice bob bob" {
        assert!(Instant::now() < deadline, "priority 1 never took effect");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The slot frees: acme's first start is the one made.
    delete_sandbox(&dave, filler["sandbox_id"].as_str().unwrap()).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, q) = root.get("/api/v1/admin/queue").await;
        let owners: Vec<&str> = q["waiting"].as_array().unwrap().iter().map(|w| w["owner"].as_str().unwrap()).collect();
        if owners == ["alice", "bob", "bob"] {
            break;
        }
        assert!(Instant::now() < deadline, "acme's start was not the one placed: {q}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Bad input and the wrong caller are refused, in words; a reset gives the default back.
    let put = |api: &Api, org: &str, body: Value| {
        let (api, path) = (api.clone(), format!("/api/v1/admin/queue/shares/{org}"));
        async move { api.call(reqwest::Method::PUT, &path, Some(body)).await }
    };
    let (s, e) = put(&root, "acme", json!({"weight": 0})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_field")), "{e}");
    let (s, e) = put(&root, "acme", json!({"priority": 11})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_field")), "{e}");
    let (s, e) = put(&root, "acme", json!({"max_running": 0})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_field")), "{e}");
    assert_eq!(put(&root, "nobody-here", json!({"weight": 2})).await.0, 404);
    assert_eq!(put(&alice, "acme", json!({"priority": 10})).await.0, 403);
    assert_eq!(root.call(reqwest::Method::DELETE, "/api/v1/admin/queue/shares/acme", None).await.0, 204);
    let (_, q) = root.get("/api/v1/admin/queue").await;
    assert_eq!(q["shares"], json!([]), "{q}");
}

#[tokio::test]
async fn an_organizations_limit_counts_its_running_sandboxes_and_a_start_past_it_waits() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = one_process(&llm, &[]);
    let (alice, bob, root) = (h.api("alice-secret-key"), h.api("bob-secret-key"), h.api(ROOT));
    assert_eq!(alice.post("/api/v1/orgs", json!({"name": "acme"})).await.0, 201);
    let (s, share) = root.call(reqwest::Method::PUT, "/api/v1/admin/queue/shares/acme", Some(json!({"max_running": 1}))).await;
    assert_eq!((s, share["max_running"].as_u64()), (200, Some(1)), "{share}");
    // (The hosts read shares from the queue's bucket: the limit holds once they have it.)
    root.wait_for("/api/v1/admin/queue", "the share in the queue's copy", |q| q["shares"][0]["max_running"] == 1).await;

    // Acme runs one sandbox; its next start waits although the host has room, while a start
    // outside acme (alice's own, and bob's) runs at once.
    let (first, _) = alice.start_ready(json!({"org": "acme"})).await;
    let (s, second) = alice.post("/api/v1/conversations", json!({"org": "acme"})).await;
    assert_eq!(s, 202, "{second}");
    let second = second["id"].as_str().unwrap().to_owned();
    settle(&alice, &second, &["QUEUED"]).await;
    alice.start_ready(json!({})).await;
    bob.start_ready(json!({})).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    settle(&alice, &second, &["QUEUED"]).await;

    // Its running one goes: the waiting one is made.
    assert_eq!(alice.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{first}"), None).await.0, 202);
    settle(&alice, &second, &["READY"]).await;
}

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Docker sandboxes against the real engine: an agent working inside a container; pause and
//! resume; a container killed or removed behind Halyard's back, detected and re-provisioned on
//! the same workspace volume; reconciliation after a supervisor restart; quotas; the warm pool;
//! runtime-image reuse.

use std::time::{Duration, Instant};

use halyard_tests::docker::{containers, docker, inspect, require_engine, volumes};
use halyard_tests::harness::{LLM_KEY, assert_log_is_contiguous};
use halyard_tests::{Api, Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";
const BOB: &str = "bob-secret-key";
const CAROL: &str = "carol-secret-key";

fn docker_opts(llm: &str) -> HalyardOptions {
    HalyardOptions::new(llm).set("HALYARD_SANDBOX", "docker").set("HALYARD_SANDBOX_POOL_SIZE", "0")
}

/// The one container of sandbox `id`.
fn container_of(h: &Halyard, id: &str) -> String {
    let found = containers(&h.deployment(), Some(&format!("dev.halyard.sandbox={id}")));
    assert_eq!(found.len(), 1, "containers of sandbox {id}: {found:?}");
    found[0].clone()
}

async fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn last_terminal_output(events: &[Value]) -> String {
    let obs = events.iter().rev().find(|e| e["kind"] == "observation" && e["tool"] == "terminal").expect("a terminal observation");
    obs["content"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn agent_works_in_a_container_that_survives_pause_kill_and_removal() {
    init();
    require_engine();
    let llm = ScriptedLlm::start().await;
    // A private repository on the host, behind git's own http-backend: the container's git
    // reaches it through the executor's git proxy and the agent runner, which adds the token.
    let repos = tempfile::tempdir().unwrap();
    halyard_tests::bare_repository(repos.path(), "app.git", ("README.md", "the docker app\n"));
    const TOKEN: &str = "ghp_docker-proxy-token-2b8d";
    let server = halyard_tests::GitServer::start(repos.path().to_path_buf(), "x-access-token", TOKEN).await;
    let host = server.base.trim_start_matches("http://").to_owned();
    llm.push([
        Reply::tool(
            "terminal",
            json!({"command": format!("id -u; pwd; echo kept > notes.txt; env | grep -c -e sk-halyard -e HALYARD_ || true; ls /var/run/docker.sock 2>&1; \
                cat README.md; git fetch -q origin && echo FETCHED; \
                printf 'protocol=http\\nhost={host}\\n\\n' | git credential fill >/dev/null 2>&1; echo FILL=$?")}),
        ),
        Reply::finish("done"),
    ]);
    let h = Halyard::start(docker_opts(&llm.base_url).set("HALYARD_GIT_API_ALLOW", "loopback"));
    let api = h.api(ALICE);
    let provider = json!({"kind": "generic", "host": host, "token": TOKEN});
    assert_eq!(api.call(reqwest::Method::PUT, "/api/v1/git-providers/local", Some(provider)).await.0, 201);
    let (conv, task) = api.start_ready(json!({"message": "look around", "repository": {"url": format!("{}/app.git", server.base)}})).await;
    assert_eq!(task["from_pool"], false);
    let events = api.wait_finished(&conv, 1).await;
    let out = last_terminal_output(&events);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "1000", "the agent runs as the spec's user: {out}");
    assert_eq!(lines[1], "/workspace", "{out}");
    assert_eq!(lines[2], "0", "no secret and no Halyard variable in the sandbox: {out}");
    assert!(lines[3].contains("No such file"), "no Docker socket in the sandbox: {out}");
    assert_eq!(lines[4..7], ["the docker app", "FETCHED", "FILL=128"], "clone and fetch through the git proxy, no credential: {out}");
    assert!(server.authorizations().iter().flatten().any(|a| a.starts_with("Basic ")), "the proxy sent no token upstream");
    // A path on the host is not the container's to see: refused, saying what works.
    let (_, local) =
        api.post("/api/v1/conversations", json!({"repository": {"url": repos.path().join("app.git").to_string_lossy()}})).await;
    let local = api.wait_task(local["id"].as_str().unwrap(), &["READY", "ERROR"]).await;
    let detail = local["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("PREPARING_REPOSITORY") && detail.contains("HALYARD_SANDBOX=process"), "{local}");
    let failed = local["conversation_id"].as_str().unwrap();
    assert_eq!(api.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{failed}"), None).await.0, 202);
    let all = serde_json::to_string(&events).unwrap();
    assert!(!all.contains(LLM_KEY) && !all.contains(TOKEN));

    // The sandbox as the API and the engine show it.
    let sandbox = task["sandbox_id"].as_str().unwrap().to_owned();
    let s = api.wait_sandbox(&sandbox, "running", |s| s["status"] == "RUNNING").await;
    assert_eq!(s["kind"], "docker");
    assert_eq!(s["conversation_id"], conv.as_str());
    let names: Vec<&str> = s["exposed_urls"].as_array().unwrap().iter().map(|u| u["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["AGENT_SERVER", "WORKER_1", "WORKER_2"]);
    let agent_url = s["exposed_urls"][0]["url"].as_str().unwrap();
    // Published on a loopback address of its own, never the one the web workspace is served on.
    assert!(agent_url.starts_with("http://127.0.0.2:"), "{agent_url}");
    let health: Value = reqwest::get(format!("{agent_url}/health")).await.unwrap().json().await.unwrap();
    assert_eq!(health["ok"], true, "the executor is reachable from the host: {health}");
    let unauthenticated =
        reqwest::Client::new().post(format!("{agent_url}/shell/exec")).json(&json!({"command": "id"})).send().await.unwrap();
    assert_eq!(unauthenticated.status(), 401);
    let (_, other) = h.api(BOB).get(&format!("/api/v1/sandboxes/{sandbox}")).await;
    assert_eq!(other["error"]["code"], "not_found");

    let c1 = container_of(&h, &sandbox);
    assert_eq!(
        inspect(&c1, "{{index .Config.Labels \"dev.halyard.owner\"}} {{index .Config.Labels \"dev.halyard.conversation\"}}"),
        format!("alice {conv}")
    );
    assert_eq!(inspect(&c1, "{{.HostConfig.CapDrop}} {{.HostConfig.SecurityOpt}}"), "[ALL] [no-new-privileges]");
    assert_eq!(inspect(&c1, "{{.HostConfig.Memory}} {{.HostConfig.NanoCpus}} {{.HostConfig.PidsLimit}}"), "2147483648 1000000000 512");
    assert_eq!(inspect(&c1, "{{range .HostConfig.Ulimits}}{{.Name}}={{.Hard}}{{end}}"), "fsize=4294967296", "the largest file");
    assert!(inspect(&c1, "{{json .Args}}").contains("\"--disk-limit-mb\",\"10240\""), "the executor watches the disk");
    assert_eq!(inspect(&c1, "{{range .Mounts}}{{.Type}}:{{.Destination}} {{end}}").trim(), "volume:/workspace");

    // Pause and resume: docker pause, files intact.
    assert_eq!(api.post(&format!("/api/v1/sandboxes/{sandbox}/pause"), json!({})).await.0, 202);
    api.wait_sandbox(&sandbox, "paused", |s| s["status"] == "PAUSED").await;
    assert_eq!(inspect(&c1, "{{.State.Paused}}"), "true");
    assert_eq!(api.post(&format!("/api/v1/sandboxes/{sandbox}/resume"), json!({})).await.0, 202);
    api.wait_sandbox(&sandbox, "running again", |s| s["status"] == "RUNNING").await;
    assert_eq!(inspect(&c1, "{{.State.Paused}}"), "false");

    // Killed behind Halyard's back: noticed, reported, and the next message restarts it.
    docker(&["kill", &c1]);
    let s = api.wait_sandbox(&sandbox, "the kill to be noticed", |s| s["status"] == "ERROR").await;
    assert!(s["detail"].as_str().unwrap().contains("exited"), "{s}");
    api.wait_conversation(&conv, "the conversation to show it", |c| c["sandbox_status"] == "ERROR").await;
    llm.push([Reply::tool("terminal", json!({"command": "cat notes.txt"})), Reply::finish("read it")]);
    assert_eq!(api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "read your notes"})).await.0, 202);
    let events = api.wait_finished(&conv, 2).await;
    // A new container process: the agent is told its shell is new.
    let output = last_terminal_output(&events);
    assert!(output.starts_with("[This is a new shell"), "{output}");
    assert_eq!(output.lines().nth(1), Some("kept"));

    // Removed behind Halyard's back: MISSING, then re-provisioned on the same volume.
    docker(&["rm", "-f", &c1]);
    let s = api.wait_sandbox(&sandbox, "the removal to be noticed", |s| s["status"] == "MISSING").await;
    assert!(s["detail"].as_str().unwrap().contains("removed"), "{s}");
    llm.push([Reply::tool("terminal", json!({"command": "cat notes.txt"})), Reply::finish("still there")]);
    assert_eq!(api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "again"})).await.0, 202);
    let events = api.wait_finished(&conv, 3).await;
    let output = last_terminal_output(&events);
    assert!(output.starts_with("[This is a new shell"), "{output}");
    assert_eq!(output.lines().nth(1), Some("kept"));
    assert_log_is_contiguous(&events);
    let c2 = container_of(&h, &sandbox);
    assert_ne!(c1, c2, "a new container");

    // Checkpoints live in the workspace's volume: they outlast the container. Back to how the
    // conversation started (the clone, before any action): the agent's notes are gone.
    let before_restore = events.last().unwrap()["seq"].as_u64().unwrap();
    let (s, _) = api.post(&format!("/api/v1/conversations/{conv}/restore"), json!({"at_seq": 1})).await;
    assert_eq!(s, 202);
    let events = api.wait_events(&conv, "the restore", |ev| ev.iter().any(|e| e["kind"] == "workspace_restored")).await;
    assert!(!events.iter().any(|e| e["kind"] == "agent_error" && e["code"].as_str().is_some_and(|c| c.starts_with("restore"))));
    assert_eq!(api.get(&format!("/api/v1/conversations/{conv}/files?path=notes.txt")).await.0, 404);
    let (_, readme) = api.get(&format!("/api/v1/conversations/{conv}/files?path=README.md")).await;
    assert_eq!(readme["content"], "the docker app\n");

    // A fork from before that restore: a container of its own, cloned through the git proxy,
    // with the notes as they were then (carried from the first container's checkpoints).
    let (s, task) = api.post(&format!("/api/v1/conversations/{conv}/fork"), json!({"at_seq": before_restore})).await;
    assert_eq!(s, 202, "{task}");
    let task = api.wait_task(task["id"].as_str().unwrap(), &["READY"]).await;
    let fork = task["conversation_id"].as_str().unwrap().to_owned();
    let (_, notes) = api.get(&format!("/api/v1/conversations/{fork}/files?path=notes.txt")).await;
    assert_eq!(notes["content"], "kept\n", "{notes}");
    assert_eq!(api.get(&format!("/api/v1/conversations/{conv}/files?path=notes.txt")).await.0, 404, "the source is as it was");
    let fork_sandbox = task["sandbox_id"].as_str().unwrap();
    assert_ne!(container_of(&h, fork_sandbox), c2);
    let (s, _) = api.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{fork}"), None).await;
    assert_eq!(s, 202);

    // Deleting the conversation deletes its container and its volume.
    let (s, _) = api.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{conv}"), None).await;
    assert_eq!(s, 202);
    let dep = h.deployment();
    wait_until("the container and volume to go", || containers(&dep, None).is_empty() && volumes(&dep).is_empty()).await;
    let (s, _) = api.get(&format!("/api/v1/sandboxes/{sandbox}")).await;
    assert_eq!(s, 404);
}

#[tokio::test]
async fn a_restarted_supervisor_adopts_reports_and_cleans_up() {
    init();
    require_engine();
    let llm = ScriptedLlm::start().await;
    let mut h = Halyard::start(docker_opts(&llm.base_url));
    let api = h.api(ALICE);
    let mut sandboxes = Vec::new();
    for _ in 0..3 {
        let (_, task) = api.start_ready(json!({})).await;
        sandboxes.push(task["sandbox_id"].as_str().unwrap().to_owned());
    }
    let (running, paused, vanished) = (&sandboxes[0], &sandboxes[1], &sandboxes[2]);
    assert_eq!(api.post(&format!("/api/v1/sandboxes/{paused}/pause"), json!({})).await.0, 202);
    api.wait_sandbox(paused, "paused", |s| s["status"] == "PAUSED").await;
    let c_running = container_of(&h, running);
    let started_at = inspect(&c_running, "{{.State.StartedAt}}");
    let c_vanished = container_of(&h, vanished);

    // Halyard dies; meanwhile a container vanishes and orphans appear.
    h.kill9();
    let dep = h.deployment();
    docker(&["rm", "-f", &c_vanished]);
    let label = format!("dev.halyard.deployment={dep}");
    let orphan = docker(&["create", "--label", &label, "halyard-base:bookworm", "sleep", "300"]);
    let orphan_volume = docker(&["volume", "create", "--label", &label, &format!("orphan-{dep}")]);
    h.restart();
    let api = h.api(ALICE);

    api.wait_sandbox(vanished, "the vanished one to be MISSING", |s| s["status"] == "MISSING").await;
    let s = api.wait_sandbox(running, "the running one adopted", |s| s["status"] == "RUNNING").await;
    assert_eq!(container_of(&h, running), c_running, "adopted, not replaced");
    assert_eq!(inspect(&c_running, "{{.State.StartedAt}}"), started_at, "not restarted");
    let health: Value =
        reqwest::get(format!("{}/health", s["exposed_urls"][0]["url"].as_str().unwrap())).await.unwrap().json().await.unwrap();
    assert_eq!(health["ok"], true);
    api.wait_sandbox(paused, "still paused", |s| s["status"] == "PAUSED").await;
    wait_until("orphans to be removed", || {
        let cs = containers(&dep, None);
        let vs = volumes(&dep);
        !cs.iter().any(|c| c.starts_with(&orphan)) && !vs.contains(&orphan_volume)
    })
    .await;
    // The vanished sandbox's volume is still referenced, so kept: resume re-provisions on it.
    assert_eq!(api.post(&format!("/api/v1/sandboxes/{vanished}/resume"), json!({})).await.0, 202);
    api.wait_sandbox(vanished, "re-provisioned", |s| s["status"] == "RUNNING").await;
    assert_eq!(api.post(&format!("/api/v1/sandboxes/{paused}/resume"), json!({})).await.0, 202);
    api.wait_sandbox(paused, "unpaused", |s| s["status"] == "RUNNING").await;

    // The second start built nothing: the runtime image's source tag was reused.
    let (_, specs) = api.get("/api/v1/sandbox-specs").await;
    let image = &specs["items"][0]["runtime_image"];
    assert_eq!(image["outcome"], "reused", "{specs}");
    assert!(image["image"].as_str().unwrap().starts_with("halyard-runtime:src-"), "{specs}");
    assert!(!docker(&["images", "-q", image["image"].as_str().unwrap()]).is_empty());
    let page = api.get("/api/v1/sandboxes?limit=2").await.1;
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    let rest = api.get(&format!("/api/v1/sandboxes?limit=2&cursor={}", page["next_cursor"].as_str().unwrap())).await.1;
    assert_eq!(rest["items"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn starts_past_the_limits_wait_and_the_warm_pool_serves_starts() {
    init();
    require_engine();
    let llm = ScriptedLlm::start().await;
    let mut opts = docker_opts(&llm.base_url)
        .set("HALYARD_SANDBOX_POOL_SIZE", "1")
        .set("HALYARD_MAX_RUNNING_PER_USER", "1")
        .set("HALYARD_MAX_RUNNING_TOTAL", "2");
    opts.api_keys = "alice:alice-secret-key,bob:bob-secret-key,carol:carol-secret-key".into();
    let h = Halyard::start(opts);
    let dep = h.deployment();
    let pool_label = "dev.halyard.pool=default";
    let (alice, bob, carol) = (h.api(ALICE), h.api(BOB), h.api(CAROL));
    let pool_ready = |api: Api| async move { api.get("/api/v1/sandbox-specs").await.1["items"][0]["pool"]["ready"].as_u64() };
    let deadline = Instant::now() + Duration::from_secs(60);
    while pool_ready(alice.clone()).await != Some(1) {
        assert!(Instant::now() < deadline, "the warm pool did not fill");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pooled = containers(&dep, Some(pool_label));
    assert_eq!(pooled.len(), 1);
    let pooled = pooled[0].clone();

    // A start takes the pooled sandbox, and the pool refills in the background.
    let (_, task) = alice.start_ready(json!({})).await;
    assert_eq!(task["from_pool"], true, "{task}");
    let a1 = task["sandbox_id"].as_str().unwrap().to_owned();
    let s = alice.get(&format!("/api/v1/sandboxes/{a1}")).await.1;
    assert_eq!(s["from_pool"], true);
    let taken = containers(&dep, Some(pool_label));
    assert!(taken.contains(&pooled), "the conversation runs in the former pool container");
    let deadline = Instant::now() + Duration::from_secs(60);
    while pool_ready(alice.clone()).await != Some(1) || containers(&dep, Some(pool_label)).len() != 2 {
        assert!(Instant::now() < deadline, "the warm pool did not refill");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // An unknown spec is bad input, whatever the quotas.
    let (s, e) = alice.post("/api/v1/conversations", json!({"sandbox_spec": "gpu"})).await;
    assert_eq!(s, 400, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("default"), "{e}");
    // Past the per-user limit, a start waits its turn instead of being refused.
    let (s, queued) = alice.post("/api/v1/conversations", json!({"sandbox_spec": "default"})).await;
    assert_eq!(s, 202, "{queued}");
    let queued = alice.wait_task(queued["id"].as_str().unwrap(), &["QUEUED"]).await;
    assert_eq!(queued["position"], 1, "{queued}");
    // A second user fits in the total meanwhile.
    let (_, b1) = bob.start_ready(json!({})).await;
    // A paused sandbox does not count: alice pauses hers, and her waiting start goes on.
    assert_eq!(alice.post(&format!("/api/v1/sandboxes/{a1}/pause"), json!({})).await.0, 202);
    alice.wait_sandbox(&a1, "paused", |s| s["status"] == "PAUSED").await;
    let a2 = alice.wait_task(queued["id"].as_str().unwrap(), &["READY"]).await;
    // At the total limit, carol's start waits too; cancelled, it never starts.
    let (s, c1) = carol.post("/api/v1/conversations", json!({})).await;
    assert_eq!(s, 202, "{c1}");
    let c1 = carol.wait_task(c1["id"].as_str().unwrap(), &["QUEUED"]).await;
    let (s, _) = carol.call(reqwest::Method::DELETE, &format!("/api/v1/start-tasks/{}", c1["id"].as_str().unwrap()), None).await;
    assert_eq!(s, 202);
    carol.wait_task(c1["id"].as_str().unwrap(), &["CANCELLED"]).await;
    assert_eq!(carol.get("/api/v1/sandboxes").await.1["items"], json!([]), "a cancelled start left a sandbox");
    // Resuming the paused one would exceed alice's limit: refused, and nobody is paused for it.
    let (s, e) = alice.post(&format!("/api/v1/sandboxes/{a1}/resume"), json!({})).await;
    assert_eq!(s, 429, "{e}");
    assert_eq!(e["error"]["code"], "sandbox_quota_user");
    for (api, task) in [(&bob, &b1), (&alice, &a2)] {
        let id = task["sandbox_id"].as_str().unwrap();
        assert_eq!(api.get(&format!("/api/v1/sandboxes/{id}")).await.1["status"], "RUNNING");
    }
    assert_eq!(alice.get(&format!("/api/v1/sandboxes/{a1}")).await.1["status"], "PAUSED");
    assert_eq!(alice.get("/api/v1/sandboxes").await.1["items"].as_array().unwrap().len(), 2);
}

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! OpenHands' Runtime API served by Halyard, driven by OpenHands' own client: the
//! `RemoteSandboxService` of the `openhands-ai` package, unchanged
//! (`tests/servers/openhands/remote_sandbox_client.py`, in the Python 3.13 tree that
//! `infra/install-openhands-client.sh` makes). A runtime of OpenHands' real agent server (an image
//! made from the same tree: `install-openhands-client.sh --image`) starts, is reached at the URLs
//! the client derives (its HTTP routes and its bash-events WebSocket, with the session API key),
//! runs a command inside, pauses, resumes and stops; keys are per OpenHands deployment, and one
//! deployment's key sees nothing of another's. The warm pool uses a smaller agent server (a
//! Python HTTP server answering the health route), which starts in a moment.

use std::path::Path;
use std::process::Command;

use halyard_tests::docker::{docker, require_engine};
use halyard_tests::harness::halyard_bin;
use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use serde_json::{Value, json};

const ROOT: &str = "/opt/halyard-openhands";
const IMAGE: &str = "halyard-base:bookworm";

/// The pool's runtimes' command: an agent server as far as its routes go. `/alive` answers anyone; the
/// rest only the runtime's session API key, and says what the container was given.
const AGENT_SERVER: &str = r#"
import http.server, json, os
KEY = os.environ["OH_SESSION_API_KEYS_0"]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path in ("/alive", "/health"):
            code, body = 200, {"status": "ok"}
        elif self.headers.get("X-Session-API-Key") != KEY:
            code, body = 401, {"detail": "no session key"}
        else:
            code, body = 200, {"path": self.path, "test": os.environ.get("HALYARD_TEST"), "cwd": os.getcwd(), "uid": os.getuid()}
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", 60000), H).serve_forever()
"#;

/// A deployment's key and its `HALYARD_RUNTIME_API_KEYS` entry, as an administrator makes them.
fn new_key(name: &str) -> (String, String) {
    let out = Command::new(halyard_bin()).args(["runtime-api-key", name]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let after = |prefix: &str| text.lines().find_map(|l| l.split_once(prefix).map(|(_, v)| v.trim().to_owned())).unwrap();
    (after("it is not kept): "), after("HALYARD_RUNTIME_API_KEYS: "))
}

/// Waits until the Runtime API listens on `port` (the supervisor binds it once its engine is
/// set up, which may be after the gateway answers).
async fn listening(port: u16, h: &Halyard) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < deadline, "the Runtime API did not listen: {}", h.log());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// What the client's sandbox spec starts: a command and its environment.
struct Spec {
    command: Value,
    env: &'static [&'static str],
}

/// OpenHands' real agent server, as OpenHands' own default spec starts it (its state under the
/// workspace, which its user owns).
fn real_agent_server() -> Spec {
    Spec {
        command: json!(["/venv/bin/agent-server", "--port", "60000"]),
        env: &["HOME=/workspace", "OH_CONVERSATIONS_PATH=/workspace/conversations", "OH_BASH_EVENTS_DIR=/workspace/bash_events"],
    }
}

fn small_agent_server() -> Spec {
    Spec { command: json!(["python3", "-c", AGENT_SERVER]), env: &[] }
}

/// The image of OpenHands' agent server that `install-openhands-client.sh --image` made.
fn agent_server_image() -> String {
    let tags = docker(&["images", "halyard-openhands-agent-server", "--format", "{{.Repository}}:{{.Tag}}"]);
    tags.lines()
        .next()
        .map(str::to_owned)
        .expect("no agent server image: run infra/install-openhands-client.sh --image (tests/run.sh does)")
}

/// Halyard with container sandboxes serving the Runtime API with `settings`, once it listens;
/// its port.
async fn serving(settings: &[(&str, &str)]) -> (ScriptedLlm, Halyard, u16) {
    serving_on(halyard_tests::oidc::free_port(), settings).await
}

async fn serving_on(port: u16, settings: &[(&str, &str)]) -> (ScriptedLlm, Halyard, u16) {
    require_engine();
    assert!(
        Path::new(ROOT).join("client/remote_sandbox_client.py").exists(),
        "OpenHands' client is not installed: run infra/install-openhands-client.sh (tests/run.sh does)"
    );
    let llm = ScriptedLlm::start().await;
    let opts = HalyardOptions::new(&llm.base_url)
        .set("HALYARD_SANDBOX", "docker")
        .set("HALYARD_SANDBOX_POOL_SIZE", "0")
        .set("HALYARD_RUNTIME_API_ADDR", &format!("127.0.0.1:{port}"));
    let h = Halyard::start(settings.iter().fold(opts, |o, (k, v)| o.set(k, v)));
    listening(port, &h).await;
    (llm, h, port)
}

/// OpenHands' client, run with `key` through `steps`: what each step returned.
fn openhands(api: &str, key: &str, db: &str, spec: &Spec, steps: &[&str]) -> Vec<Value> {
    let out = Command::new("chroot")
        .args([ROOT, "/venv/bin/python", "/client/remote_sandbox_client.py", "--api-url", api, "--api-key", key, "--db", db])
        .args(["--command", &spec.command.to_string()])
        .args(spec.env.iter().flat_map(|e| ["--env", e]))
        .args(steps)
        .env("OPENHANDS_SUPPRESS_BANNER", "1")
        .output()
        .expect("chroot into the OpenHands client's tree");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the client failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Value> = stdout.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(
        lines.len(),
        steps.iter().filter(|s| ["start", "get", "wait", "pause", "resume", "delete", "running", "search"].contains(s)).count(),
        "{stdout}"
    );
    lines
}

fn ok(step: &Value) -> &Value {
    assert!(step.get("error").is_none(), "the client's step failed: {step}");
    &step["ok"]
}

async fn call(http: &reqwest::Client, method: reqwest::Method, url: &str, key: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = http.request(method, url).header("X-API-Key", key);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

fn runtime_containers(deployment: &str) -> Vec<String> {
    let out =
        docker(&["ps", "-aq", "--filter", &format!("label=dev.halyard.deployment={deployment}"), "--filter", "label=dev.halyard.runtime"]);
    out.lines().map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openhands_own_client_runs_its_sandboxes_on_halyard_through_the_runtime_api() {
    init();
    let ((key_a, entry_a), (key_b, entry_b)) = (new_key("openhands-a"), new_key("openhands-b"));
    let keys = format!("{entry_a},{entry_b}");
    let (_llm, h, port) =
        serving(&[("HALYARD_RUNTIME_API_KEYS", &keys), ("HALYARD_RUNTIME_API_MAX", "1"), ("HALYARD_ADMINS", "alice")]).await;
    let api = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let db = format!("/tmp/halyard-openhands-{port}.db");

    // Started, and running once its agent server listens, at the URLs the client derives.
    let image = agent_server_image();
    let real = real_agent_server();
    let run = openhands(&api, &key_a, &db, &real, &["start", &image, "wait", "last", "RUNNING"]);
    let started = ok(&run[0]).clone();
    let sandbox = ok(&run[1]).clone();
    assert_eq!(sandbox["status"], "RUNNING", "{sandbox}");
    let id = sandbox["id"].as_str().unwrap().to_owned();
    let session_key = sandbox["session_api_key"].as_str().unwrap().to_owned();
    assert_eq!(started["session_api_key"], session_key.as_str());
    let urls: Vec<(String, String)> = sandbox["exposed_urls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| (u["name"].as_str().unwrap().into(), u["url"].as_str().unwrap().into()))
        .collect();
    let url = |name: &str| urls.iter().find(|(n, _)| n == name).map(|(_, u)| u.clone()).unwrap();
    let agent = url("AGENT_SERVER");
    assert!(agent.starts_with(&format!("{api}/")), "path mode, under the Runtime API's URL: {agent}");
    let runtime_id = agent.trim_start_matches(&format!("{api}/")).to_owned();
    assert_eq!(url("VSCODE"), format!("{api}/{runtime_id}/vscode?tkn={session_key}&folder=%2Fworkspace%2Fproject"));
    assert_eq!(url("WORKER_1"), format!("{api}/{runtime_id}/work-1"));

    // OpenHands' agent server, through the Runtime API's proxy: its health route and server
    // info to anyone, the rest with the runtime's session key only.
    let alive = http.get(format!("{agent}/alive")).send().await.unwrap();
    assert_eq!(alive.status(), 200);
    let info: Value = http.get(format!("{agent}/server_info")).send().await.unwrap().json().await.unwrap();
    assert_eq!(info["title"], "OpenHands Agent Server", "{info}");
    let search = format!("{agent}/api/bash/bash_events/search");
    assert_eq!(http.get(&search).send().await.unwrap().status(), 401, "no session key, no API");
    assert_eq!(http.get(&search).header("X-Session-API-Key", &session_key).send().await.unwrap().status(), 200);

    // Its bash-events WebSocket, through the proxy, sees a command run in the runtime: as the
    // user OpenHands asked for, in its directory, with the spec's environment.
    let ws_url = format!("{}/{runtime_id}/sockets/bash-events?session_api_key={session_key}", api.replace("http://", "ws://"));
    let (mut socket, _) = tokio_tungstenite::connect_async(ws_url.as_str()).await.expect("the agent server's WebSocket through the proxy");
    let ran: Value = http
        .post(format!("{agent}/api/bash/execute_bash_command"))
        .header("X-Session-API-Key", &session_key)
        .json(&json!({"command": "echo ran-as-$(id -u)-in-$(pwd)-test-$HALYARD_TEST"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ran["stdout"].as_str().map(str::trim), Some("ran-as-10001-in-/workspace-test-1"), "{ran}");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut heard = Vec::new();
    while !heard.iter().any(|t: &String| t.contains("ran-as-10001")) {
        let next = tokio::time::timeout_at(deadline, futures::StreamExt::next(&mut socket)).await;
        match next {
            Ok(Some(Ok(msg))) => heard.push(msg.to_text().unwrap_or_default().to_owned()),
            other => panic!("the WebSocket ended before the command's output: {other:?}; heard {heard:?}"),
        }
    }
    drop(socket);
    // Nothing listens on the VS Code port of this image: said, not hung.
    let vscode = http.get(format!("{api}/{runtime_id}/vscode/")).send().await.unwrap();
    assert_eq!(vscode.status(), 502);

    // Paused and resumed as OpenHands does it, and listed while running only.
    let steps = ["pause", &id, "get", &id, "running", "resume", &id, "wait", &id, "RUNNING", "running"];
    let run = openhands(&api, &key_a, &db, &real, &steps);
    assert_eq!(ok(&run[0]), &json!(true));
    assert_eq!(ok(&run[1])["status"], "PAUSED");
    assert_eq!(ok(&run[2]), &json!([]));
    assert_eq!(ok(&run[3]), &json!(true));
    assert_eq!(ok(&run[4])["status"], "RUNNING");
    assert_eq!(ok(&run[5]), &json!([id]));
    assert_eq!(http.get(format!("{agent}/alive")).send().await.unwrap().status(), 200, "it answers again after the resume");

    // Another deployment's key sees none of it; a wrong key is refused.
    let (s, body) = call(&http, reqwest::Method::GET, &format!("{api}/sessions/{id}"), &key_b, None).await;
    assert_eq!((s, body["code"].as_str()), (404, Some("session_not_found")));
    let (s, body) = call(&http, reqwest::Method::GET, &format!("{api}/list"), &key_b, None).await;
    assert_eq!((s, body), (200, json!({"runtimes": []})));
    let (s, _) = call(&http, reqwest::Method::POST, &format!("{api}/stop"), &key_b, Some(json!({"runtime_id": runtime_id}))).await;
    assert_eq!(s, 404, "another deployment cannot stop it");
    let (s, body) = call(&http, reqwest::Method::GET, &format!("{api}/list"), "hrk_not-a-key", None).await;
    assert_eq!((s, body["code"].as_str()), (401, Some("unauthorized")));
    let run = openhands(&api, &key_b, &db, &real, &["get", &id]);
    assert_eq!(ok(&run[0])["status"], "MISSING", "OpenHands with the other key finds no runtime");

    // Refused in words: an image the engine does not have, a runtime class Halyard does not run,
    // a start past the deployment's limit.
    let start = |image: &str, class: Option<&str>| json!({"image": image, "session_id": "another", "runtime_class": class});
    let (s, body) = call(&http, reqwest::Method::POST, &format!("{api}/start"), &key_a, Some(start("halyard-no-such-image:1", None))).await;
    assert_eq!((s, body["code"].as_str()), (400, Some("image_not_present")), "{body}");
    let (s, body) = call(&http, reqwest::Method::POST, &format!("{api}/start"), &key_a, Some(start(IMAGE, Some("sysbox-runc")))).await;
    assert_eq!((s, body["code"].as_str()), (400, Some("runtime_class_unknown")), "{body}");
    let (s, body) = call(&http, reqwest::Method::POST, &format!("{api}/start"), &key_a, Some(start(IMAGE, None))).await;
    assert_eq!((s, body["code"].as_str()), (429, Some("quota_exceeded")), "{body}");
    assert_eq!(runtime_containers(&h.deployment()).len(), 1);

    // Stopped: its container is gone, and OpenHands' record with it.
    let run = openhands(&api, &key_a, &db, &real, &["delete", &id, "get", &id]);
    assert_eq!(ok(&run[0]), &json!(true));
    assert_eq!(ok(&run[1]), &Value::Null);
    assert!(runtime_containers(&h.deployment()).is_empty(), "the runtime's container was removed");
    let (s, _) = call(&http, reqwest::Method::POST, &format!("{api}/stop"), &key_a, Some(json!({"runtime_id": runtime_id}))).await;
    assert_eq!(s, 404, "a stopped runtime is unknown");

    // Two starts of one session at once make one runtime.
    let twin = json!({"image": IMAGE, "session_id": "twin", "command": ["python3", "-c", AGENT_SERVER]});
    let start = format!("{api}/start");
    let ((s1, r1), (s2, r2)) = tokio::join!(
        call(&http, reqwest::Method::POST, &start, &key_a, Some(twin.clone())),
        call(&http, reqwest::Method::POST, &start, &key_a, Some(twin))
    );
    assert_eq!((s1, s2), (200, 200), "{r1} {r2}");
    assert_eq!(r1["runtime_id"], r2["runtime_id"]);
    assert_eq!(runtime_containers(&h.deployment()).len(), 1);
    let (s, _) = call(&http, reqwest::Method::POST, &format!("{api}/stop"), &key_a, Some(json!({"runtime_id": r1["runtime_id"]}))).await;
    assert_eq!(s, 200);

    // The administrator reads what each deployment did, and what was refused, in the audit
    // trail; never a key.
    let admin = h.api("alice-secret-key");
    let trail = |actor: &'static str| {
        let admin = admin.clone();
        async move {
            let (s, page) = admin.get(&format!("/api/v1/admin/audit?actor=runtime-api:{actor}&action=runtime.")).await;
            assert_eq!(s, 200, "{page}");
            page["items"].as_array().unwrap().iter().rev().map(|r| r["action"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
        }
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while trail("openhands-a").await.iter().filter(|a| *a == "runtime.stop").count() < 2 {
        assert!(std::time::Instant::now() < deadline, "the audit trail did not record the stop");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let a = trail("openhands-a").await;
    // (The twin start answered with the runtime its session had: a start on the record each.)
    for (action, times) in [("runtime.start", 3), ("runtime.pause", 1), ("runtime.resume", 1), ("runtime.stop", 2), ("runtime.refused", 3)]
    {
        assert_eq!(a.iter().filter(|x| *x == action).count(), times, "{action} in {a:?}");
    }
    assert_eq!(trail("-").await, vec!["runtime.unauthorized".to_owned()], "the wrong key's attempt");
    assert!(trail("openhands-b").await.is_empty(), "deployment b changed nothing: {:?}", trail("openhands-b").await);
    let (_, page) = admin.get("/api/v1/admin/audit?action=runtime.").await;
    for secret in [&key_a, &key_b, &session_key] {
        assert!(!page.to_string().contains(secret.as_str()), "a key reached the audit trail");
    }
    let _ = std::fs::remove_file(Path::new(ROOT).join(db.trim_start_matches('/')));
}

/// The runtime ids of the deployment's runtime containers.
fn runtime_ids(deployment: &str) -> Vec<String> {
    let out = docker(&[
        "ps",
        "-a",
        "--filter",
        &format!("label=dev.halyard.deployment={deployment}"),
        "--filter",
        "label=dev.halyard.runtime",
        "--format",
        "{{.Label \"dev.halyard.runtime\"}}",
    ]);
    out.lines().map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_image_starts_from_a_runtime_made_before_it_was_asked_for() {
    init();
    let (key, entry) = new_key("openhands-pool");
    let pool = format!("{IMAGE}=1");
    let port = halyard_tests::oidc::free_port();
    // Runtimes' URLs as subdomains of the Runtime API's public host.
    let public = format!("http://runtimes.localhost:{port}");
    let settings = [
        ("HALYARD_RUNTIME_API_KEYS", entry.as_str()),
        ("HALYARD_RUNTIME_API_POOL", &pool),
        ("HALYARD_RUNTIME_API_URL", &public),
        ("HALYARD_RUNTIME_API_URL_MODE", "subdomain"),
    ];
    let (_llm, h, port) = serving_on(port, &settings).await;
    let api = format!("http://127.0.0.1:{port}");
    let db = format!("/tmp/halyard-openhands-{port}.db");
    let deployment = h.deployment();

    // Nothing is known of what the image's starts ask for: the first start is cold, and teaches
    // the pool its shape.
    assert!(runtime_containers(&deployment).is_empty());
    let small = small_agent_server();
    let run = openhands(&api, &key, &db, &small, &["start", IMAGE, "wait", "last", "RUNNING"]);
    let first = ok(&run[1])["id"].as_str().unwrap().to_owned();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while runtime_containers(&deployment).len() < 2 {
        assert!(std::time::Instant::now() < deadline, "no warm runtime was started: {}", h.log());
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    // Given a moment to listen, as a pool has between starts.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;

    // The next start of the same spec is given the warm one: running at once, made before.
    let before = runtime_ids(&deployment);
    let run = openhands(&api, &key, &db, &small, &["start", IMAGE]);
    let second = ok(&run[0]).clone();
    assert_eq!(second["status"], "RUNNING", "a warm runtime is running when it is given: {second}");
    let agent = second["exposed_urls"][0]["url"].as_str().unwrap().to_owned();
    let host = agent.trim_start_matches("http://").trim_end_matches('/').to_owned();
    let runtime_id = host.split('.').next().unwrap().to_owned();
    assert_eq!(host, format!("{runtime_id}.runtimes.localhost:{port}"), "subdomain mode: {agent}");
    let vscode = second["exposed_urls"][1]["url"].as_str().unwrap();
    assert!(vscode.starts_with(&format!("http://vscode-{runtime_id}.runtimes.localhost:{port}/?tkn=")), "{vscode}");
    assert!(before.contains(&runtime_id), "the runtime given ({runtime_id}) was made before the start asked for it: {before:?}");
    // Reached by its host name (asked of the Runtime API's address, as a resolver of
    // `*.localhost` would send it).
    let key2 = second["session_api_key"].as_str().unwrap();
    let http = reqwest::Client::new();
    let at = |host: String| http.get(format!("{api}/api/x")).header("host", host).header("X-Session-API-Key", key2);
    assert_eq!(at(host.clone()).send().await.unwrap().status(), 200, "its agent server, by its subdomain, with its session key");
    assert_eq!(at(format!("vscode-{host}")).send().await.unwrap().status(), 502, "its VS Code port, by its own subdomain: nothing there");

    // The pool fills again behind it; both sessions are the client's own, and stop.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while runtime_containers(&deployment).len() < 3 {
        assert!(std::time::Instant::now() < deadline, "the pool was not refilled: {}", h.log());
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let second_id = second["id"].as_str().unwrap().to_owned();
    let run = openhands(&api, &key, &db, &small, &["running", "delete", &first, "delete", &second_id]);
    let mut running: Vec<String> = serde_json::from_value(ok(&run[0]).clone()).unwrap();
    running.sort();
    let mut expected = vec![first.clone(), second_id.clone()];
    expected.sort();
    assert_eq!(running, expected, "the warm one is nobody's until it is given");
    assert_eq!(ok(&run[1]), &json!(true));
    assert_eq!(ok(&run[2]), &json!(true));
    assert_eq!(runtime_containers(&deployment).len(), 1, "only the warm one is left");
    let _ = std::fs::remove_file(Path::new(ROOT).join(db.trim_start_matches('/')));
}

/// OpenHands' app server, run from its tree with its sandboxes on the Runtime API at `api_port`
/// (`RUNTIME=remote`), on `port`, its state in `dir`; its process group ends with the value.
struct AppServer {
    child: std::process::Child,
    url: String,
}

impl AppServer {
    fn start(api_port: u16, key: &str, dir: &str) -> Self {
        let port = halyard_tests::oidc::free_port();
        std::fs::create_dir_all(Path::new(ROOT).join(dir.trim_start_matches('/'))).unwrap();
        let log = std::fs::File::create(Path::new(ROOT).join(dir.trim_start_matches('/')).join("app-server.log")).unwrap();
        let child = std::os::unix::process::CommandExt::process_group(
            Command::new("chroot")
                .args([ROOT, "/venv/bin/python", "-m", "uvicorn", "openhands.app_server.app:app", "--host", "127.0.0.1"])
                .args(["--port", &port.to_string()])
                .env("RUNTIME", "remote")
                .env("SANDBOX_API_KEY", key)
                .env("SANDBOX_REMOTE_RUNTIME_API_URL", format!("http://127.0.0.1:{api_port}"))
                .env("OH_PERSISTENCE_DIR", dir)
                .env("OPENHANDS_SUPPRESS_BANNER", "1")
                .stdout(log.try_clone().unwrap())
                .stderr(log),
            0,
        )
        .spawn()
        .expect("start OpenHands' app server");
        Self { child, url: format!("http://127.0.0.1:{port}/api/v1") }
    }

    fn log(&self, dir: &str) -> String {
        std::fs::read_to_string(Path::new(ROOT).join(dir.trim_start_matches('/')).join("app-server.log")).unwrap_or_default()
    }
}

impl Drop for AppServer {
    fn drop(&mut self) {
        // (uvicorn waits for open connections on SIGTERM: the agent server's event socket.)
        let _ = Command::new("kill").args(["-s", "KILL", "--", &format!("-{}", self.child.id())]).status();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openhands_own_app_server_runs_a_conversation_to_the_end_on_a_runtime_halyard_serves() {
    init();
    let (key, entry) = new_key("openhands-app");
    let (_unused, h, api_port) = serving(&[("HALYARD_RUNTIME_API_KEYS", &entry), ("HALYARD_ADMINS", "alice")]).await;
    // OpenHands' agent server calls the LLM itself, from the runtime: a scripted one, at the
    // host's address on the runtime's network (the default spec's, `open`).
    let llm = ScriptedLlm::start_for_containers().await;
    llm.fallback(|req| {
        if req["tools"].as_array().is_none_or(Vec::is_empty) {
            return Reply::Text("A title".into());
        }
        Reply::tool("finish", json!({"message": "Finished on Halyard."}))
    });
    let network = format!("halyard-{}-net-open", &h.deployment()[..h.deployment().len().min(12)]);
    let gateway = docker(&["network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}", &network]);
    let dir = format!("/tmp/halyard-openhands-app-{api_port}");
    let app = AppServer::start(api_port, &key, &dir);
    let http = reqwest::Client::builder().timeout(std::time::Duration::from_secs(30)).build().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while !http.get(format!("{}/sandbox-specs/search", app.url)).send().await.is_ok_and(|r| r.status() == 200) {
        assert!(std::time::Instant::now() < deadline, "OpenHands' app server did not start: {}", app.log(&dir));
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }

    // As a person would in OpenHands: an LLM in the settings, then a conversation.
    let llm_settings =
        json!({"model": "openai/scripted-model", "base_url": format!("http://{gateway}:{}/v1", llm.port()), "api_key": "sk-scripted"});
    let stored =
        http.post(format!("{}/settings", app.url)).json(&json!({"agent_settings_diff": {"llm": llm_settings}})).send().await.unwrap();
    assert_eq!(stored.status(), 200, "{}", stored.text().await.unwrap());
    let start = json!({"initial_message": {"role": "user", "content": [{"type": "text", "text": "Say you are done."}]}});
    let task: Value = http.post(format!("{}/app-conversations", app.url)).json(&start).send().await.unwrap().json().await.unwrap();
    let task_id = task["id"].as_str().unwrap().to_owned();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    let conversation = loop {
        let tasks: Value =
            http.get(format!("{}/app-conversations/start-tasks?ids={task_id}", app.url)).send().await.unwrap().json().await.unwrap();
        let t = &tasks[0];
        match t["status"].as_str() {
            Some("READY") => break t.clone(),
            Some("ERROR") => panic!("OpenHands could not start the conversation: {t}\n{}", app.log(&dir)),
            _ => assert!(std::time::Instant::now() < deadline, "the start did not end: {t}\n{}", app.log(&dir)),
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    let agent_url = conversation["agent_server_url"].as_str().unwrap();
    assert!(
        agent_url.starts_with(&format!("http://127.0.0.1:{api_port}/")),
        "its agent server is a runtime Halyard serves: {conversation}"
    );
    assert_eq!(runtime_containers(&h.deployment()).len(), 1, "one runtime, Halyard's container");

    // It runs to the end on the scripted LLM, which the agent server called from the runtime.
    let id = conversation["app_conversation_id"].as_str().unwrap().to_owned();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let convs: Value = http.get(format!("{}/app-conversations?ids={id}", app.url)).send().await.unwrap().json().await.unwrap();
        if convs[0]["execution_status"] == "finished" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the conversation did not finish: {}\n{}", convs[0], app.log(&dir));
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    // (The app server copies the agent server's events as it polls it.)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let (finished, events) = loop {
        let url = format!("{}/conversation/{id}/events/search?limit=100", app.url);
        let events: Value = http.get(url).send().await.unwrap().json().await.unwrap();
        let items = events["items"].as_array().cloned().unwrap_or_default();
        let finished = items.iter().any(|e| e["kind"] == "ActionEvent" && e["action"]["message"] == "Finished on Halyard.");
        if finished || std::time::Instant::now() > deadline {
            break (finished, events);
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    assert!(finished, "the agent's finish is in OpenHands' events: {events}");
    assert!(llm.requests().iter().any(|r| r["tools"].as_array().is_some_and(|t| t.iter().any(|t| t["function"]["name"] == "finish"))));

    // On Halyard's record: OpenHands' deployment started it.
    let (_, page) = h.api("alice-secret-key").get("/api/v1/admin/audit?actor=runtime-api:openhands-app&action=runtime.start").await;
    assert_eq!(page["items"].as_array().map(Vec::len), Some(1), "{page}");
    drop(app);
    let _ = std::fs::remove_dir_all(Path::new(ROOT).join(dir.trim_start_matches('/')));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unused_runtime_hibernates_keeps_its_files_and_resumes() {
    init();
    let (key, entry) = new_key("openhands-idle");
    // Idle long enough for the file below to be written first on a loaded machine (at 3 s, the
    // container had stopped before it once).
    let (_llm, h, port) = serving(&[("HALYARD_RUNTIME_API_KEYS", &entry), ("HALYARD_SANDBOX_IDLE_STOP_SECS", "10")]).await;
    let api = format!("http://127.0.0.1:{port}");
    let db = format!("/tmp/halyard-openhands-{port}.db");
    let small = small_agent_server();
    let run = openhands(&api, &key, &db, &small, &["start", IMAGE, "wait", "last", "RUNNING"]);
    let sandbox = ok(&run[1]).clone();
    let id = sandbox["id"].as_str().unwrap().to_owned();
    let agent = sandbox["exposed_urls"][0]["url"].as_str().unwrap().to_owned();
    let container = runtime_containers(&h.deployment()).pop().unwrap();
    docker(&["exec", "-u", "0", &container, "sh", "-c", "echo kept > /workspace/note.txt"]);

    // Unused past its idle time: its processes end, its files stay, and OpenHands reads it as
    // paused (which it knows how to resume).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while docker(&["inspect", "-f", "{{.State.Status}}", &container]) != "exited" {
        assert!(std::time::Instant::now() < deadline, "the unused runtime did not hibernate: {}", h.log());
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    let run = openhands(&api, &key, &db, &small, &["get", &id]);
    assert_eq!(ok(&run[0])["status"], "PAUSED");
    let http = reqwest::Client::new();
    let asleep = http.get(format!("{agent}/alive")).send().await.unwrap();
    let s = asleep.status().as_u16();
    let body: Value = asleep.json().await.unwrap_or_default();
    assert_eq!((s, body["code"].as_str()), (503, Some("runtime_not_running")));

    // Resumed as OpenHands resumes a paused sandbox: the same container, its file still there.
    let run = openhands(&api, &key, &db, &small, &["resume", &id, "wait", &id, "RUNNING"]);
    assert_eq!(ok(&run[0]), &json!(true));
    assert_eq!(ok(&run[1])["status"], "RUNNING");
    assert_eq!(http.get(format!("{agent}/alive")).send().await.unwrap().status(), 200);
    assert_eq!(docker(&["exec", &container, "cat", "/workspace/note.txt"]), "kept");
    let run = openhands(&api, &key, &db, &small, &["delete", &id]);
    assert_eq!(ok(&run[0]), &json!(true));
    let _ = std::fs::remove_file(Path::new(ROOT).join(db.trim_start_matches('/')));
}

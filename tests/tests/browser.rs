#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! The web workspace in a real browser: a real `halyard up` serving the built app (`web/dist`),
//! a scripted LLM, and Playwright driving Debian's Chromium through the specs in `web/tests/`
//! as a person would. `tests/run.sh` installs Chromium and the npm packages and builds the app.
//!
//! The LLM follows the user's last message: each spec asks for a task by a keyword and gets
//! the same steps every time (see [`script`]).

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::routing::post;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;

use halyard_tests::docker::require_engine;
use halyard_tests::mcp_oauth::{token_number, whoami_answers};
use halyard_tests::registry::Registry;
use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";
const BOB: &str = "bob-secret-key";

/// The text of the last user message in a chat request, and how many tool results follow it.
fn turn(request: &Value) -> (String, usize) {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    // (Not the message that carries tool results' images after them: the model's own.)
    let carries_images = |m: &Value| m["content"][0]["text"].as_str().is_some_and(|t| t.starts_with(halyard_platform::llm::IMAGES_FROM));
    let last_user = messages.iter().rposition(|m| m["role"] == "user" && !carries_images(m)).unwrap_or(0);
    let text = match &messages.get(last_user).map(|m| m["content"].clone()).unwrap_or_default() {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join("\n"),
        _ => String::new(),
    };
    let tools = messages[last_user..].iter().filter(|m| m["role"] == "tool").count();
    (text, tools)
}

fn terminal(command: &str) -> Reply {
    Reply::tool("terminal", json!({"command": command, "security_risk": "low"}))
}

/// The Network spec's command: `registry.test` (allowed) and `other.test` (not), by name.
const REACH: &str = r#"python3 - <<'PY'
import urllib.request, urllib.error
for url in ("http://registry.test:8080/simple", "http://other.test:8080/"):
    try:
        print(url, "OK", urllib.request.urlopen(url, timeout=8).read().decode())
    except urllib.error.HTTPError as e:
        print(url, "HTTP", e.code)
PY"#;

/// The agent's steps for each task the specs ask for.
fn script(request: &Value) -> Reply {
    // Claude Code (spec 22), on Anthropic's wire with its own tools and thinking on: a command,
    // then the answer, each after its thinking as Anthropic sends them.
    if request["tools"].as_array().is_some_and(|t| t.iter().any(|t| t["name"] == "Bash")) {
        let answered = request["messages"].to_string().contains("tool_result");
        let reply = if answered {
            Reply::Text("Claude wrote **claude.txt**.".into())
        } else {
            Reply::tool("Bash", json!({"command": "echo from claude | tee claude.txt", "description": "Write claude.txt"}))
        };
        return Reply::Thinking("Writing claude.txt.".into(), Box::new(reply));
    }
    // A call without tools is an LLM profile's Test: it answers in words.
    if request["tools"].as_array().is_none_or(Vec::is_empty) {
        return Reply::Text("OK".into());
    }
    let (text, step) = turn(request);
    let text = text.to_lowercase();
    if text.contains("hello.py") {
        return match step {
            0 => Reply::tool(
                "file_editor",
                json!({"command": "create", "path": "hello.py", "file_text": "print(\"hello from halyard\")\n", "security_risk": "low"}),
            ),
            1 => terminal("python3 hello.py"),
            _ => Reply::finish("`hello.py` prints **hello from halyard**."),
        };
    }
    // A batch's item (the batches spec): done after a moment, so its table fills while watched.
    if text.contains("batch item") {
        return Reply::Delay(std::time::Duration::from_millis(800), Box::new(Reply::finish("batch item done")));
    }
    // An answer written slowly, a word at a time, for the timeline to show as it grows.
    if text.contains("write slowly") {
        let words: String = (1..=50).map(|i| format!("word{i} ")).collect();
        return Reply::Paced(
            std::time::Duration::from_millis(80),
            Box::new(Reply::Text(format!("Here is the slow answer: {words}and that is the end of the slow answer."))),
        );
    }
    // The Network spec: one request the environment's policy allows and one it refuses, sent as
    // a tool sends them (through the proxy the sandbox's variables name).
    if text.contains("reach the registry") {
        return match step {
            0 => terminal(REACH),
            _ => Reply::finish("Reached the registry; other.test was refused."),
        };
    }
    if text.contains("careful") {
        // No `security_risk`: the model did not say.
        return match step {
            0 => Reply::tool("terminal", json!({"command": "echo carefully-done"})),
            _ => Reply::finish("Done, carefully."),
        };
    }
    if text.contains("tick") {
        return match step {
            0..6 => terminal(&format!("sleep 0.7; echo tick-{}", step + 1)),
            _ => Reply::finish("Ticked six times."),
        };
    }
    // A parent hands out two tasks; each helper's task is its own first message.
    if text.contains("hand out") {
        let task = |title: &str, what: &str| json!({"title": title, "prompt": format!("as a helper, say {what}")});
        return match step {
            0 => Reply::tool("delegate", json!({"tasks": [task("First helper", "one"), task("Second helper", "two")]})),
            _ => Reply::finish("Both helpers answered."),
        };
    }
    if let Some(what) = text.strip_prefix("as a helper, say ") {
        return match step {
            0 => terminal(&format!("echo {what}")),
            _ => Reply::finish(&format!("said {what}")),
        };
    }
    if text.contains("plot the squares") {
        return match step {
            0 => Reply::tool(
                "execute_ipython_cell",
                json!({"code": "import matplotlib.pyplot as plt\nsquares = [n * n for n in range(6)]\nprint(squares)\nplt.plot(squares)\nplt.show()", "security_risk": "low"}),
            ),
            _ => Reply::finish("Plotted the squares."),
        };
    }
    if text.contains("browse the form") {
        // A form served in the sandbox, filled in and sent by the agent's browser.
        const PAGES: &str = "mkdir -p site && cd site && cat > index.html <<'EOF'\n\
            <html><head><title>Sign up</title></head><body><h1>Sign up</h1><form action=\"next.html\">\
            <input name=\"who\" placeholder=\"Your name\"><button type=\"submit\">Send</button></form></body></html>\n\
            EOF\n\
            cat > next.html <<'EOF'\n\
            <html><head><title>Welcome</title></head><body><h1>Welcome aboard</h1></body></html>\n\
            EOF\n\
            (nohup python3 -m http.server 8125 --bind 127.0.0.1 >/dev/null 2>&1 &) && sleep 1";
        let browse = |tool: &str, args: Value| Reply::tool(tool, args);
        return match step {
            0 => terminal(PAGES),
            1 => browse("browser_navigate", json!({"url": "http://localhost:8125/index.html", "security_risk": "low"})),
            2 => terminal("sleep 2"),
            3 => browse("browser_type", json!({"index": 0, "text": "Ada", "security_risk": "low"})),
            4 => browse("browser_click", json!({"index": 1, "security_risk": "low"})),
            _ => Reply::finish("Signed up as Ada."),
        };
    }
    if text.contains("in steps") {
        let plan = |first: &str, second: &str| {
            Reply::tool(
                "task_tracker",
                json!({"command": "plan", "task_list": [
                    {"title": "Look around", "notes": "list the files", "status": first},
                    {"title": "Write the report", "status": second}
                ]}),
            )
        };
        return match step {
            0 => plan("in_progress", "todo"),
            1 => terminal("sleep 1.5; ls -a"),
            2 => plan("done", "in_progress"),
            3 => terminal("sleep 1.5; echo report > report.txt"),
            4 => plan("done", "done"),
            _ => Reply::finish("Done in steps."),
        };
    }
    if text.contains("drafts") {
        return match step {
            0 => terminal("echo first > draft.txt && echo first-draft"),
            1 => terminal("echo second > draft.txt && echo second-draft"),
            _ => Reply::finish("Wrote two drafts."),
        };
    }
    if text.contains("thief") {
        return match step {
            0 => terminal(&format!(
                "cat > thief.py <<'PY'\n{THIEF}PY\n(setsid nohup python3 thief.py >/dev/null 2>&1 &); sleep 1; echo thief on $WORKER_1_PORT"
            )),
            _ => Reply::finish("The thief listens on WORKER_1."),
        };
    }
    if text.contains("serve") {
        return match step {
            0 => terminal(
                "mkdir -p site && echo '<h1>served by the agent</h1>' > site/index.html && \
                 (cd site && setsid nohup python3 -m http.server \"$WORKER_1_PORT\" --bind 127.0.0.1 >/dev/null 2>&1 &) && \
                 sleep 1 && echo serving on $WORKER_1_PORT",
            ),
            _ => Reply::finish("The site is served on WORKER_1."),
        };
    }
    // The MCP server that wants a sign-in: its tool once offered, else words.
    if text.contains("who am i at notes") {
        let offered = request["tools"].as_array().is_some_and(|t| t.iter().any(|t| t["function"]["name"] == "notes__whoami"));
        return match (step, offered) {
            (0, true) => Reply::tool("notes__whoami", json!({})),
            (0, false) => Reply::finish("notes offers nothing yet"),
            _ => Reply::finish("notes answered"),
        };
    }
    // Raw HTML in the model's words stays words.
    Reply::finish("Done. <img src=x onerror=alert(1)><b>not bold</b>")
}

/// A hostile app: it writes down every request's host and cookies (`stolen.log`), and answers
/// its first visit with a redirect to the direct address it thinks it has.
const THIEF: &str = r#"import http.server, os
PORT = int(os.environ["WORKER_1_PORT"])
class Thief(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open("stolen.log", "a") as f:
            f.write("host=%s path=%s cookie=%s\n" % (self.headers.get("host"), self.path, self.headers.get("cookie", "")))
        if self.path == "/":
            self.send_response(302)
            self.send_header("Location", "http://127.0.0.1:%d/stolen" % PORT)
            self.end_headers()
        else:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"thanks")
http.server.ThreadingHTTPServer(("0.0.0.0", PORT), Thief).serve_forever()
"#;

/// Runs the Playwright spec `spec` (a file under `web/tests/`) against `h`, with `env`; returns
/// its output, having checked that it passed with `passed` tests.
async fn playwright(h: Halyard, spec: &str, passed: usize, env: Vec<(&'static str, String)>) -> (String, Halyard) {
    let web = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../web").canonicalize().unwrap();
    assert!(
        web.join("dist/index.html").exists() && web.join("node_modules/@playwright/test").exists(),
        "the web app is not built: run ./tests/run.sh (or `npm ci && npm run build` in web/)"
    );
    let chromium = std::env::var("HALYARD_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(std::path::Path::new(&chromium).exists(), "no Chromium at {chromium}: apt-get install chromium");
    let spec = spec.to_owned();
    let (out, h) = tokio::task::spawn_blocking(move || {
        Command::new("npx")
            .args(["--no-install", "playwright", "test", &spec])
            .current_dir(&web)
            .env("HALYARD_URL", &h.http)
            .env("HALYARD_DIRECT_URL", &h.http)
            .env("HALYARD_ALICE_KEY", ALICE)
            .env("HALYARD_BOB_KEY", BOB)
            .env("HALYARD_CHROMIUM", &chromium)
            .env("CI", "1")
            .envs(env)
            .output()
            .map(|o| (o, h))
    })
    .await
    .unwrap()
    .expect("run npx playwright");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}\n{stderr}");
    assert!(out.status.success(), "Playwright failed (screenshots in web/test-results/):\n{stdout}\n{stderr}\nhalyard log:\n{}", h.log());
    // Every spec ran (a spec that was skipped or not found is a failure too).
    assert!(stdout.contains(&format!("{passed} passed")), "{stdout}");
    (stdout, h)
}

/// A local repository whose setup script takes a while, so the start phases can be watched.
fn slow_repository(dir: &std::path::Path) -> PathBuf {
    let repo = dir.join("slow-repo");
    std::fs::create_dir_all(repo.join(".openhands")).unwrap();
    std::fs::write(repo.join(".openhands/setup.sh"), "sleep 2\n").unwrap();
    std::fs::write(repo.join("README.md"), "# slow\n").unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .current_dir(&repo)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "."]);
    git(&["commit", "-qm", "init"]);
    repo
}

/// A TCP relay in front of the gateway that a spec can take down (`POST <control>/down`: open
/// connections are cut and new ones refused) and bring back (`POST <control>/up`): a network
/// that drops, for real, between the browser and Halyard. Returns the relay's and the control's
/// base URLs.
async fn relay(target: String) -> (String, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (cut, _) = broadcast::channel::<()>(8);
    let down = Arc::new(AtomicBool::new(false));
    tokio::spawn({
        let (cut, down) = (cut.clone(), down.clone());
        async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if down.load(Ordering::SeqCst) {
                    continue; // dropped: the connection is closed at once
                }
                let mut cut = cut.subscribe();
                let target = target.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(&target).await else { return };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut.recv() => {}
                    }
                });
            }
        }
    });
    let control = Router::new()
        .route(
            "/down",
            post({
                let (cut, down) = (cut.clone(), down.clone());
                move || async move {
                    down.store(true, Ordering::SeqCst);
                    let _ = cut.send(());
                }
            }),
        )
        .route(
            "/up",
            post(move || async move {
                down.store(false, Ordering::SeqCst);
            }),
        );
    let control_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let control_addr = control_listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(control_listener, control).await });
    (format!("http://{addr}"), format!("http://{control_addr}"))
}

/// The scripted LLM, and Halyard serving the built web app with `settings`.
async fn with_web(settings: &[(&str, &str)]) -> (ScriptedLlm, Halyard) {
    init();
    let llm = ScriptedLlm::start().await;
    llm.fallback(script);
    let web = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../web/dist");
    let opts = settings
        .iter()
        .fold(HalyardOptions::new(&llm.base_url).set("HALYARD_WEB_DIR", &web.display().to_string()), |o, (k, v)| o.set(k, v));
    let h = Halyard::start(opts);
    (llm, h)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_workspace_works_in_chromium_as_a_person_uses_it() {
    // Loopback outbound calls: spec 21's Slack Web API is a server of its own on this machine.
    // (LLM profiles on loopback: spec 22's Anthropic profile is the scripted LLM.)
    let (llm, h) = with_web(&[("HALYARD_GIT_API_ALLOW", "loopback"), ("HALYARD_LLM_PROFILE_ALLOW", "loopback")]).await;
    let scratch = tempfile::tempdir().unwrap();
    let repo = slow_repository(scratch.path());
    let (via_relay, relay_control) = relay(h.http.trim_start_matches("http://").to_owned()).await;
    // The browser reaches Halyard through the relay; the specs may call it directly.
    let env = vec![
        ("HALYARD_URL", via_relay),
        ("HALYARD_RELAY_CONTROL", relay_control),
        ("HALYARD_SLOW_REPO", repo.display().to_string()),
        ("HALYARD_LLM_URL", llm.base_url.clone()),
    ];
    playwright(h, "tests/workspace.spec.ts", 23, env).await;
    // The pasted image reached the model as an image part of the message.
    let pasted = llm.requests().iter().flat_map(|r| r["messages"].as_array().cloned().unwrap_or_default()).any(|m| {
        m["content"].as_array().is_some_and(|parts| {
            parts.iter().any(|p| {
                p["type"] == "image_url" && p["image_url"]["url"].as_str().is_some_and(|u| u.starts_with("data:image/png;base64,"))
            })
        })
    });
    assert!(pasted, "no request carried the pasted image");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_settings_set_up_everything_without_curl() {
    // The profile the spec adds points at the scripted LLM on this machine, and its git provider
    // at the scripted GitHub.
    let settings = [("HALYARD_LLM_PROFILE_ALLOW", "loopback"), ("HALYARD_GIT_API_ALLOW", "loopback"), ("HALYARD_ADMINS", "alice")];
    let (llm, h) = with_web(&settings).await;
    let github = halyard_tests::GithubServer::start("ghp_picker-token-0042", &["alice/halyard", "alice/dotfiles"]).await;
    let env = vec![
        ("HALYARD_LLM_URL", llm.base_url.clone()),
        ("HALYARD_GITHUB_HOST", github.host.clone()),
        ("HALYARD_GITHUB_API", github.api_url.clone()),
        ("HALYARD_GITHUB_TOKEN", "ghp_picker-token-0042".to_owned()),
    ];
    let (_, h) = playwright(h, "tests/settings.spec.ts", 16, env).await;
    // Nothing the spec typed as a secret reached the log.
    let log = h.log();
    assert!(!log.contains("s3cr3t-value-xyz") && !log.contains("sk-profile-secret"), "a secret value was logged");
    assert!(!log.contains("sk-ant-oat01-browser-login-token-9k2q"), "a subscription login was logged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_network_tab_shows_what_a_sandbox_reached_and_was_refused_in_chromium() {
    // The destination is a container: the egress proxy never reaches the host's own addresses.
    require_engine();
    let registry = Registry::start();
    let resolve = registry.resolve();
    let (_llm, h) = with_web(&[("HALYARD_EGRESS_RESOLVE", resolve.as_str()), ("HALYARD_EGRESS_ADDRESS_ALLOW", "private")]).await;
    playwright(h, "tests/network.spec.ts", 1, Vec::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugins_page_adds_a_marketplace_installs_and_upgrades_a_plugin_in_chromium() {
    const TOKEN: &str = "git-token-plugins-page-77c1";
    let (_llm, h) = with_web(&[("HALYARD_GIT_API_ALLOW", "loopback")]).await;
    let repos = tempfile::tempdir().unwrap();
    let market = halyard_tests::marketplace::Marketplace::create(repos.path());
    let server = halyard_tests::GitServer::start(repos.path().to_path_buf(), "oauth2", TOKEN).await;
    let provider = json!({"kind": "generic", "host": server.base.trim_start_matches("http://"), "username": "oauth2", "token": TOKEN});
    assert_eq!(h.api(ALICE).call(reqwest::Method::PUT, "/api/v1/git-providers/work", Some(provider)).await.0, 201);
    let env = vec![
        ("HALYARD_MARKETPLACE_URL", format!("{}/acme-plugins.git", server.base)),
        ("HALYARD_MARKETPLACE_SRC", market.src.display().to_string()),
        ("HALYARD_MARKETPLACE_BARE", market.bare.display().to_string()),
    ];
    playwright(h, "tests/plugins.spec.ts", 1, env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_server_that_wants_oauth_is_signed_in_to_from_chromium_and_its_token_refreshed_without_the_user() {
    // Access tokens live this long: a message after it finds the token expired.
    const TTL: u64 = 12;
    init();
    let mcp = halyard_tests::mcp_oauth::OAuthMcpServer::start(TTL).await;
    let (llm, h) = with_web(&[("HALYARD_MCP_ALLOW", "loopback"), ("HALYARD_ADMINS", "alice")]).await;
    let alice = h.api(ALICE);
    let (s, v) = alice.call(reqwest::Method::PUT, "/api/v1/mcp-servers/notes", Some(json!({"transport": "http", "url": mcp.url()}))).await;
    assert_eq!(s, 201, "{v}");

    // Before any sign-in, a run says where to sign in, and goes on without the server.
    let (conv, _) = alice.start_ready(json!({"message": "who am I at notes?"})).await;
    let events = alice.wait_finished(&conv, 1).await;
    let asked: Vec<&Value> = events.iter().filter(|e| e["kind"] == "mcp_auth_required").collect();
    let link = format!("{}/settings?mcp_sign_in=notes#mcp-servers", h.http);
    assert_eq!(asked.len(), 1, "{events:?}");
    assert_eq!((asked[0]["server"].as_str(), asked[0]["sign_in_url"].as_str()), (Some("notes"), Some(link.as_str())));
    let servers = events.iter().find(|e| e["kind"] == "mcp_servers").expect("an mcp_servers event").to_string();
    assert!(servers.contains("wants you to sign in"), "{servers}");
    assert!(Value::Array(events.clone()).to_string().contains("notes offers nothing yet"), "{events:?}");

    // A callback in a browser that started no sign-in is refused, saying so, and stores nothing.
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let r = http.get(format!("{}/api/v1/mcp-oauth/callback?code=stolen&state=guessed", h.http)).send().await.unwrap();
    let to = r.headers()["location"].to_str().unwrap().to_owned();
    assert!(r.status() == 303 && to.starts_with("/settings?mcp_sign_in_error="), "{} {to}", r.status());
    assert!(alice.get("/api/v1/mcp-servers/notes").await.1.get("sign_in").is_none());
    // Bob cannot start a sign-in to Alice's server.
    let bob = h.api(BOB);
    assert_eq!(bob.get("/api/v1/mcp-servers/notes/sign-in").await.0, 404);

    // An organization of Alice's has the same server, for everyone in it.
    assert_eq!(alice.post("/api/v1/orgs", json!({"name": "acme"})).await.0, 201);
    let team = json!({"transport": "http", "url": mcp.url()});
    assert_eq!(alice.call(reqwest::Method::PUT, "/api/v1/orgs/acme/mcp-servers/team-notes", Some(team)).await.0, 201);

    // Chromium follows the link and signs in at the server's authorization server; then signs in
    // for the organization.
    let env = vec![("HALYARD_SIGN_IN_LINK", link.clone()), ("HALYARD_PROVIDER_LOGIN", "alice@notes.test".to_owned())];
    let (_, h) = playwright(h, "tests/mcp-oauth.spec.ts", 2, env).await;
    let alice = h.api(ALICE);
    let (_, team) = alice.get("/api/v1/orgs/acme/mcp-servers").await;
    assert_eq!(team["items"][0]["sign_in"]["issuer"].as_str(), Some(mcp.issuer.as_str()), "{team}");
    let (_, server) = alice.get("/api/v1/mcp-servers/notes").await;
    assert_eq!(server["sign_in"]["issuer"].as_str(), Some(mcp.issuer.as_str()), "{server}");
    assert!(server["sign_in"]["expires_at"].is_string(), "{server}");
    let signed_in_at = server["sign_in"]["refreshed_at"].clone();

    // The next run uses the sign-in: the tool answers as the user who signed in.
    alice.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "who am I at notes now?"})).await;
    let events = alice.wait_finished(&conv, 2).await;
    let first = whoami_answers(&events);
    assert_eq!(first.len(), 1, "{events:?}");
    assert!(first[0].starts_with("signed in as alice@notes.test with token #"), "{first:?}");

    // After the access token expired, the next call refreshes it, without the user.
    tokio::time::sleep(std::time::Duration::from_secs(TTL + 2)).await;
    alice.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "who am I at notes, once more?"})).await;
    let events = alice.wait_finished(&conv, 3).await;
    let answers = whoami_answers(&events);
    assert_eq!(answers.len(), 2, "{events:?}");
    assert!(answers[1].starts_with("signed in as alice@notes.test"), "{answers:?}");
    assert!(token_number(&answers[1]) > token_number(&answers[0]), "the expired token was used again: {answers:?}");
    let (_, server) = alice.get("/api/v1/mcp-servers/notes").await;
    assert_ne!(server["sign_in"]["refreshed_at"], signed_in_at, "{server}");
    assert_eq!(events.iter().filter(|e| e["kind"] == "mcp_auth_required").count(), 1);

    // The tokens are nowhere to be read: not in events, not sent to the LLM, not in the log.
    let tokens = mcp.tokens();
    assert!(tokens.len() >= 2, "{tokens:?}");
    let all = Value::Array(events.clone()).to_string();
    let requests = Value::Array(llm.requests()).to_string();
    let log = h.log();
    for t in &tokens {
        assert!(!all.contains(t.as_str()) && !requests.contains(t.as_str()) && !log.contains(t.as_str()), "a token leaked");
    }

    // Signed out, the next run asks again.
    let (s, _) = alice.call(reqwest::Method::DELETE, "/api/v1/mcp-servers/notes/sign-in", None).await;
    assert_eq!(s, 204);
    alice.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "who am I at notes after signing out?"})).await;
    let events = alice.wait_finished(&conv, 4).await;
    assert_eq!(events.iter().filter(|e| e["kind"] == "mcp_auth_required").count(), 2, "{events:?}");
    let audit = alice.get("/api/v1/admin/audit?actor=alice&action=mcp_server.").await.1.to_string();
    assert!(audit.contains("mcp_server.sign_in") && audit.contains("mcp_server.sign_out"), "{audit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_environments_page_defines_one_and_shows_its_snapshot_in_chromium() {
    let (_llm, h) = with_web(&[]).await;
    playwright(h, "tests/environments.spec.ts", 1, Vec::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batchs_table_fills_in_as_its_items_end_and_a_groups_attempts_stand_side_by_side_in_chromium() {
    let (_llm, h) = with_web(&[]).await;
    playwright(h, "tests/batches.spec.ts", 2, Vec::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_start_shows_its_place_in_line_counting_down_and_the_queue_page_in_chromium() {
    let (_llm, h) = with_web(&[("HALYARD_MAX_RUNNING_PER_USER", "1"), ("HALYARD_ADMINS", "alice")]).await;
    playwright(h, "tests/queue.spec.ts", 2, Vec::new()).await;
}

/// The hostile app of [`THIEF`] in a sandbox of `kind`, opened and followed in Chromium: it is
/// reached (through the proxy and directly where the sandbox publishes it), and it never
/// receives the workspace's session cookie.
async fn thief_gets_no_session(kind: &str) {
    let (_llm, h) = with_web(&[("HALYARD_SANDBOX", kind), ("HALYARD_ADMINS", "alice")]).await;
    // A key of Alice's own, for the spec's session that ends when the key is revoked.
    let (s, key) = h.api(ALICE).post("/api/v1/admin/users/alice/keys", json!({"name": "browser"})).await;
    assert_eq!(s, 201, "{key}");
    let scratch = tempfile::tempdir().unwrap();
    let report = scratch.path().join("report.json");
    let env = vec![
        ("HALYARD_REPORT", report.display().to_string()),
        ("HALYARD_ISSUED_KEY", key["key"].as_str().unwrap().to_owned()),
        ("HALYARD_ISSUED_KEY_ID", key["id"].as_str().unwrap().to_owned()),
    ];
    let (_, h) = playwright(h, "tests/session-theft.spec.ts", 2, env).await;
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let conversation = report["conversation"].as_str().unwrap();
    let session = report["session"].as_str().unwrap();
    let (status, log) = h.api(ALICE).get(&format!("/api/v1/conversations/{conversation}/files?path=stolen.log")).await;
    assert_eq!(status, 200, "{log}");
    let log = log["content"].as_str().unwrap_or_default().to_owned();
    let published = report["published"].as_str().unwrap().trim_start_matches("http://").trim_end_matches('/').to_owned();
    // It was reached, so the test could see a theft: through the proxy, and where the sandbox
    // publishes it (which is not where the workspace is served).
    assert!(log.lines().any(|l| l.contains("-worker-1.localhost:")), "{kind}: the app was not opened through the proxy:\n{log}");
    assert!(log.lines().any(|l| l.contains(&format!("host={published} "))), "{kind}: the published address was not followed:\n{log}");
    assert!(!published.starts_with("127.0.0.1:"), "{kind}: published on the workspace's address");
    // And never with the session.
    assert!(!log.contains(session) && !log.contains("halyard_session"), "{kind}: the app received the session:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_in_a_process_sandbox_never_receives_the_session_cookie() {
    init();
    thief_gets_no_session("process").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_in_a_docker_sandbox_never_receives_the_session_cookie() {
    init();
    halyard_tests::docker::require_engine();
    thief_gets_no_session("docker").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_sign_on_goes_through_a_real_openid_provider() {
    const SECRET: &str = "halyard-oidc-client-secret-5521";
    init();
    // The provider must know where to send people back before Halyard starts: its port first.
    let port = halyard_tests::oidc::free_port();
    let provider =
        halyard_tests::OidcProvider::start("halyard", SECRET, &format!("http://127.0.0.1:{port}/api/v1/auth/sso/callback")).await;
    // And Sign in with Slack (spec 10), standing in for slack.com.
    let slack_callback = format!("http://127.0.0.1:{port}/api/v1/auth/slack/callback");
    let slack = halyard_tests::OidcProvider::start_slack("halyard-slack-app", SECRET, &slack_callback).await;
    let addr = format!("127.0.0.1:{port}");
    let settings = [
        ("HALYARD_HTTP_ADDR", addr.as_str()),
        ("HALYARD_OIDC_ISSUER", provider.issuer.as_str()),
        ("HALYARD_OIDC_CLIENT_ID", "halyard"),
        ("HALYARD_OIDC_CLIENT_SECRET", SECRET),
        // root is an administrator by name, with no key of the operator's: nobody's sign-in
        // may become root.
        ("HALYARD_ADMINS", "alice,root"),
        // New users come from these domains (a verified address) or the provider's group.
        ("HALYARD_OIDC_ALLOWED_DOMAINS", "acme.test"),
        ("HALYARD_OIDC_REQUIRED_GROUP", "platform-team"),
        ("HALYARD_SLACK_OIDC_ISSUER", slack.issuer.as_str()),
        ("HALYARD_SLACK_OIDC_CLIENT_ID", "halyard-slack-app"),
        ("HALYARD_SLACK_OIDC_CLIENT_SECRET", SECRET),
        // Spec 10's Slack Web API is a server of its own on this machine.
        ("HALYARD_GIT_API_ALLOW", "loopback"),
    ];
    let (_llm, h) = with_web(&settings).await;
    let alice = h.api(ALICE);
    let bob = h.api(BOB);
    // A user an administrator made with their address signs in as that user.
    let (s, made) = alice.post("/api/v1/admin/users", json!({"name": "frank", "email": "frank@partner.test"})).await;
    assert_eq!(s, 201, "{made}");
    let put = reqwest::Method::PUT;
    // acme takes everyone at acme.test and signs its members in through the provider only;
    // platform takes the provider's platform-team group.
    assert_eq!(alice.post("/api/v1/orgs", json!({"name": "acme"})).await.0, 201);
    assert_eq!(alice.post("/api/v1/orgs", json!({"name": "platform"})).await.0, 201);
    let (s, e) = alice.call(put.clone(), "/api/v1/orgs/acme/settings", Some(json!({"require_sso": true}))).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_field")), "{e}");
    let acme = json!({"require_sso": true, "sso_domains": ["acme.test"]});
    assert_eq!(alice.call(put.clone(), "/api/v1/orgs/acme/settings", Some(acme)).await.0, 200);
    assert_eq!(alice.call(put, "/api/v1/orgs/platform/settings", Some(json!({"sso_groups": ["platform-team"]}))).await.0, 200);
    // Joining by domain reaches people outside the organization: not an owner's to set.
    assert_eq!(bob.post("/api/v1/orgs", json!({"name": "bobs"})).await.0, 201);
    let grab = json!({"sso_domains": ["acme.test"], "require_sso": true});
    let (s, e) = bob.call(reqwest::Method::PUT, "/api/v1/orgs/bobs/settings", Some(grab)).await;
    assert_eq!((s, e["error"]["code"].as_str()), (403, Some("admin_only")), "{e}");
    alice.add_to_org("acme", &bob, None).await;
    assert_eq!(alice.post("/api/v1/orgs/acme/members", json!({"user": "alice"})).await.0, 409, "she owns it already");
    // Alice owns acme, so it would refuse her page sign-in too: she leaves it to Bob.
    let (s, _) = alice.call(reqwest::Method::PATCH, "/api/v1/orgs/acme/members/bob", Some(json!({"role": "owner"}))).await;
    assert_eq!(s, 200);
    assert_eq!(alice.call(reqwest::Method::DELETE, "/api/v1/orgs/acme/members/alice", None).await.0, 204);

    let env = vec![("HALYARD_OIDC_URL", provider.issuer.clone()), ("HALYARD_SLACK_OIDC_URL", slack.issuer.clone())];
    let (_, h) = playwright(h, "tests/sso.spec.ts", 10, env).await;

    // Bob's key still works for programs.
    assert_eq!(h.api(BOB).get("/api/v1/me").await.0, 200);
    // What happened is in the audit trail: the users made, placed and refused, and no secret.
    let (_, trail) = h.api(ALICE).get("/api/v1/admin/audit?limit=1000").await;
    let text = trail.to_string();
    let has = |action: &str, needle: &str| {
        trail["items"].as_array().unwrap().iter().any(|r| r["action"] == action && r.to_string().contains(needle))
    };
    assert!(has("user.create", "carol") && has("org.member_add", "\"sso\""), "{trail}");
    assert!(has("session.create", "\"via\":\"sso\"") && has("org.settings", "\"sso_domains\":[\"acme.test\"]"), "{trail}");
    assert!(has("session.refused", "audience") && has("session.refused", "sso_required"), "{trail}");
    assert!(has("session.refused", "not among those this deployment admits"), "{trail}");
    assert!(has("user.sso_bound", "frank@partner.test"), "{trail}");
    // A stranger's callback (no sign-in of this browser's) is neither shown nor recorded.
    assert!(!text.contains("evil-description"), "an anonymous callback's text reached the audit trail");
    // root stays the administrator the operator named, with no account a sign-in made.
    let (_, users) = h.api(ALICE).get("/api/v1/admin/users").await;
    let names: Vec<&str> = users["items"].as_array().unwrap().iter().filter_map(|u| u["name"].as_str()).collect();
    assert!(names.contains(&"root-2") && names.iter().any(|n| n.starts_with("sso-")), "{users}");
    let root2 = users["items"].as_array().unwrap().iter().find(|u| u["name"] == "root-2").unwrap();
    assert_eq!(root2["admin"], false, "{root2}");
    assert!(!text.contains(SECRET), "the client secret reached the audit trail");
    assert!(!h.log().contains(SECRET), "the client secret reached the log");
}

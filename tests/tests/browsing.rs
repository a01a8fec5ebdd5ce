#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! The agent's browser, as a user checks it: the agent serves a form inside its sandbox, opens
//! it, reads the indexed elements, types, clicks, and reads the page it leads to; `file://` is
//! refused; every browser step's screenshot is kept outside the log and served to the owner
//! only (by id, and the latest), the one the agent asked for reaches the model as an image, and
//! they go with the conversation. In a process sandbox and in a container; and a browser left
//! unused stops, its memory freed.

use std::time::Duration;

use halyard_tests::{Api, Halyard, HalyardOptions, Reply, ScriptedLlm, finished, init};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";
const BOB: &str = "bob-secret-key";
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n";

/// A form and the page it leads to, served by Python's http.server inside the sandbox (the
/// second page greets whoever the query names).
fn serve_pages(port: u16) -> Reply {
    let command = format!(
        "mkdir -p site && cd site && cat > index.html <<'EOF'\n\
         <html><head><title>Sign up</title></head><body><h1>Sign up</h1>\
         <form action=\"next.html\"><input name=\"who\" placeholder=\"Your name\"><button type=\"submit\">Send</button></form>\
         </body></html>\n\
         EOF\n\
         cat > next.html <<'EOF'\n\
         <html><head><title>Welcome</title></head><body><h2 id=\"hi\"></h2><p>Thanks for signing up.</p>\
         <script>document.getElementById('hi').textContent = 'Hello ' + new URLSearchParams(location.search).get('who');</script>\
         </body></html>\n\
         EOF\n\
         (nohup python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 &) && sleep 1 && cd .."
    );
    Reply::tool("terminal", json!({"command": command, "security_risk": "low"}))
}

/// The steps of the form: open it, read it (with a screenshot), type, click, read the result.
fn browse_the_form(port: u16) -> Vec<Reply> {
    vec![
        serve_pages(port),
        Reply::tool("browser_navigate", json!({"url": format!("http://localhost:{port}/index.html"), "security_risk": "low"})),
        Reply::tool("browser_get_state", json!({"include_screenshot": true})),
        Reply::tool("browser_type", json!({"index": 0, "text": "Ada", "security_risk": "low"})),
        Reply::tool("browser_click", json!({"index": 1, "security_risk": "low"})),
        Reply::tool("browser_get_content", json!({})),
        Reply::tool("browser_navigate", json!({"url": "file:///etc/passwd", "security_risk": "low"})),
    ]
}

fn browser_results(events: &[Value]) -> Vec<&Value> {
    events.iter().filter(|e| e["kind"] == "observation" && e["tool"].as_str().unwrap_or_default().starts_with("browser_")).collect()
}

fn content(e: &Value) -> &str {
    e["content"].as_str().unwrap_or_default()
}

/// What a user checks of the form's steps, whatever the sandbox.
fn check_the_form(events: &[Value], port: u16) {
    let b = browser_results(events);
    assert_eq!(b.len(), 6, "{b:#?}");
    let site = format!("http://localhost:{port}");
    assert!(content(b[0]).starts_with(&format!("Navigated to {site}/index.html (Sign up)")), "{}", content(b[0]));
    let state = content(b[1]);
    assert!(state.contains(&format!("URL: {site}/index.html\nTitle: Sign up")), "{state}");
    assert!(state.contains("[0]<input name=\"who\" placeholder=\"Your name\"></input>"), "{state}");
    assert!(state.contains("[1]<button type=\"submit\">Send</button>"), "{state}");
    assert!(content(b[2]).starts_with("Typed \"Ada\" into element 0"), "{}", content(b[2]));
    assert_eq!(b[3]["url"], format!("{site}/next.html?who=Ada"), "the click sent the form: {}", b[3]);
    let page = content(b[4]);
    assert!(page.contains("## Hello Ada") && page.contains("Thanks for signing up."), "{page}");
    assert_eq!(b[5]["is_error"], true);
    assert!(content(b[5]).contains("Only http and https URLs"), "{}", content(b[5]));
    assert!(b[5].get("screenshot_id").is_none(), "a refused step took no screenshot");
    for e in &b[..5] {
        assert!(e["screenshot_id"].as_str().is_some_and(|s| s.len() == 32), "every step's page is kept: {e}");
        assert!(e["url"].as_str().is_some(), "{e}");
    }
    // The bytes never enter the log.
    let log = serde_json::to_string(events).unwrap();
    assert!(!log.contains("iVBORw0KGgo"), "a PNG in the log");
}

async fn get_bytes(api: &Api, path: &str) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    let resp = api.http.get(format!("{}{path}", api.base)).bearer_auth(&api.key).send().await.unwrap();
    let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
    (status, headers, resp.bytes().await.unwrap().to_vec())
}

#[tokio::test]
async fn the_agent_browses_a_form_it_serves_in_its_sandbox() {
    init();
    let llm = ScriptedLlm::start().await;
    let port = 8123;
    llm.push(browse_the_form(port));
    llm.push([Reply::finish("signed up")]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let alice = h.api(ALICE);
    let (conv, _) = alice.start_ready(json!({"message": "sign up on the page you serve"})).await;
    let events = alice.wait_events(&conv, "the run", finished).await;
    check_the_form(&events, port);

    // The browser tools are offered, with OpenHands' names.
    let offered = halyard_tests::llm::tool_names(&llm.requests()[0]);
    for t in ["browser_navigate", "browser_click", "browser_type", "browser_get_state", "browser_get_content", "browser_close_tab"] {
        assert!(offered.contains(&t.to_owned()), "{t} in {offered:?}");
    }
    // The screenshot the agent asked for reaches the model after the tool's result, as an
    // image part (chat completions' tool results hold text only); the others do not.
    let after_state = &llm.requests()[3]["messages"];
    let messages = after_state.as_array().unwrap();
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "user", "{last}");
    assert!(last["content"][0]["text"].as_str().unwrap().starts_with("Images from tool call call_"), "{last}");
    assert!(last["content"][1]["image_url"]["url"].as_str().unwrap().starts_with("data:image/png;base64,iVBORw0KGgo"), "{last}");
    assert_eq!(messages[messages.len() - 2]["role"], "tool");
    let images = |r: &Value| r["messages"].to_string().matches("data:image/png").count();
    assert_eq!(images(&llm.requests()[2]), 0, "a screenshot not asked for is not sent");

    // The owner gets each screenshot by id and the latest; nobody else does.
    let b = browser_results(&events);
    let first = b[0]["screenshot_id"].as_str().unwrap();
    let (status, headers, png) = get_bytes(&alice, &format!("/api/v1/conversations/{conv}/screenshots/{first}")).await;
    assert_eq!((status, headers["content-type"].to_str().unwrap()), (200, "image/png"));
    assert!(png.starts_with(PNG) && png.len() > 1000, "{} bytes", png.len());
    let last_shot = b[4]["screenshot_id"].as_str().unwrap();
    let (status, headers, latest) = get_bytes(&alice, &format!("/api/v1/conversations/{conv}/browser/screenshot")).await;
    assert_eq!(status, 200);
    assert!(latest.starts_with(PNG));
    assert_eq!(headers["content-location"], format!("/api/v1/conversations/{conv}/screenshots/{last_shot}").as_str());
    assert_eq!(headers["x-browser-url"], format!("http://localhost:{port}/next.html?who=Ada").as_str());
    let c = alice.get(&format!("/api/v1/conversations/{conv}")).await.1;
    assert_eq!(c["browser"]["screenshot_id"], last_shot, "{c}");
    let bob = h.api(BOB);
    assert_eq!(get_bytes(&bob, &format!("/api/v1/conversations/{conv}/screenshots/{first}")).await.0, 404);
    assert_eq!(get_bytes(&bob, &format!("/api/v1/conversations/{conv}/browser/screenshot")).await.0, 404);
    let (status, body) = alice.get(&format!("/api/v1/conversations/{conv}/screenshots/0123456789abcdef0123456789abcdef")).await;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("not_found")));

    // A conversation that never browsed has no screenshot, and no browser running.
    llm.push([Reply::finish("nothing to see")]);
    let (quiet, _) = alice.start_ready(json!({"message": "do nothing"})).await;
    alice.wait_events(&quiet, "the run", finished).await;
    let (status, body) = alice.get(&format!("/api/v1/conversations/{quiet}/browser/screenshot")).await;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("no_screenshot")));

    // The screenshots go with their conversation.
    let js = async_nats::jetstream::new(h.nats_client("admin").await);
    let store = js.get_object_store("halyard_images").await.unwrap();
    let name = format!("{conv}/{first}");
    assert!(store.info(&name).await.is_ok_and(|i| !i.deleted));
    assert_eq!(alice.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{conv}"), None).await.0, 202);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while store.info(&name).await.is_ok_and(|i| !i.deleted) {
        assert!(std::time::Instant::now() < deadline, "the screenshot outlived its conversation");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(store.info(format!("{conv}/{last_shot}")).await.map_or(true, |i| i.deleted), "every screenshot goes");
    assert_eq!(h.service_permission_violations(), Vec::<String>::new());
}

#[tokio::test]
async fn the_agent_browses_in_a_container() {
    init();
    halyard_tests::docker::require_engine();
    let llm = ScriptedLlm::start().await;
    let port = 8124;
    llm.push(browse_the_form(port));
    llm.push([Reply::finish("signed up")]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_SANDBOX", "docker").set("HALYARD_SANDBOX_POOL_SIZE", "0"));
    let alice = h.api(ALICE);
    let (conv, _) = alice.start_ready(json!({"message": "sign up on the page you serve"})).await;
    let events = alice.wait_events(&conv, "the run", finished).await;
    check_the_form(&events, port);
    let (status, _, png) = get_bytes(&alice, &format!("/api/v1/conversations/{conv}/browser/screenshot")).await;
    assert!(status == 200 && png.starts_with(PNG));
}

/// The browser's processes in the sandbox (those under its executor: other sandboxes of other
/// test deployments may share its uid) and the memory they hold, as the agent's shell sees them:
/// `<count> <KiB>`.
fn chromium_memory() -> Reply {
    let command = r#"ps -U "$(id -u)" -o pid=,ppid=,rss=,comm= | awk -v me=$$ '
        { up[$1] = $2; rss[$1] = $3; comm[$1] = $4 }
        END {
          e = me; while ((e in up) && comm[e] != "halyard") e = up[e]
          for (p in up) { q = p; while ((q in up) && q != e) q = up[q]; if (q == e && comm[p] ~ /chrom/) { n++; kb += rss[p] } }
          print n + 0, kb + 0
        }'"#;
    Reply::tool("terminal", json!({"command": command, "security_risk": "low"}))
}

#[tokio::test]
async fn an_unused_browser_stops_and_its_memory_is_freed() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([
        chromium_memory(),
        Reply::tool("browser_navigate", json!({"url": "http://localhost:8999/", "security_risk": "low"})),
        chromium_memory(),
        Reply::tool("terminal", json!({"command": "sleep 6", "security_risk": "low"})),
        chromium_memory(),
        Reply::finish("done"),
    ]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_SANDBOX_BROWSER_IDLE_SECS", "2"));
    let alice = h.api(ALICE);
    let (conv, _) = alice.start_ready(json!({"message": "browse a little"})).await;
    let events = alice.wait_events(&conv, "the run", finished).await;
    let measured: Vec<(u64, u64)> = events
        .iter()
        .filter(|e| e["kind"] == "observation" && e["tool"] == "terminal" && content(e).contains("exit code"))
        .filter_map(|e| {
            let first = content(e).lines().next()?;
            let mut it = first.split_whitespace().map(|n| n.parse::<u64>().ok());
            Some((it.next()??, it.next()??))
        })
        .collect();
    assert_eq!(measured.len(), 3, "{events:#?}");
    assert_eq!(measured[0], (0, 0), "no browser before the first browser call");
    assert!(measured[1].0 >= 2 && measured[1].1 > 10_000, "a running browser holds memory: {:?}", measured[1]);
    assert_eq!(measured[2], (0, 0), "the browser is gone 6 s after its last use (idle time 2 s)");
    // Refused: the page could not be reached; the browser still answered.
    let nav = browser_results(&events)[0];
    assert_eq!(nav["is_error"], true, "{nav}");
    assert!(content(nav).contains("ERR_CONNECTION_REFUSED"), "{nav}");
}

/// What the model is shown of a screenshot it asked for: inside the tool's result on Anthropic's
/// wire (its requests' `tool_result` content), and nothing on a profile whose model reads no
/// images (the user still gets it).
#[tokio::test]
async fn a_screenshot_reaches_an_anthropic_model_in_its_tool_result_and_no_model_that_reads_none() {
    init();
    let llm = ScriptedLlm::start().await;
    let port = 8126;
    let steps = || {
        [
            serve_pages(port),
            Reply::tool("browser_navigate", json!({"url": format!("http://localhost:{port}/index.html"), "security_risk": "low"})),
            Reply::tool("browser_get_state", json!({"include_screenshot": true})),
            Reply::finish("seen"),
        ]
    };
    llm.push(steps());
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_LLM_PROFILE_ALLOW", "loopback"));
    let alice = h.api(ALICE);
    let profile = |provider: &str, vision: bool| json!({"provider": provider, "base_url": llm.base_url, "model": "m", "api_key": "sk-test", "vision": vision});
    assert_eq!(alice.call(reqwest::Method::PUT, "/api/v1/llm-profiles/claude", Some(profile("anthropic", true))).await.0, 201);
    assert_eq!(alice.call(reqwest::Method::PUT, "/api/v1/llm-profiles/blind", Some(profile("openai", false))).await.0, 201);
    let (conv, _) = alice.start_ready(json!({"message": "look at the page", "llm_profile": "claude"})).await;
    alice.wait_events(&conv, "the run", finished).await;
    let after = &llm.requests()[3];
    let last = after["messages"].as_array().unwrap().last().unwrap();
    let result = last["content"].as_array().unwrap().iter().find(|b| b["type"] == "tool_result").expect("a tool result");
    assert_eq!(result["content"][0]["type"], "text", "{result}");
    assert!(result["content"][0]["text"].as_str().unwrap().starts_with("URL: http://localhost:"), "{result}");
    assert_eq!(result["content"][1]["type"], "image", "{result}");
    assert_eq!(result["content"][1]["source"]["media_type"], "image/png");
    assert!(result["content"][1]["source"]["data"].as_str().unwrap().starts_with("iVBORw0KGgo"));

    llm.push(steps());
    let (blind, _) = alice.start_ready(json!({"message": "look at the page", "llm_profile": "blind"})).await;
    let events = alice.wait_events(&blind, "the run", finished).await;
    let state = browser_results(&events)[1];
    assert!(content(state).ends_with("[An image was made, but this model does not read images.]"), "{state}");
    assert!(state["screenshot_id"].is_string(), "the user still gets the screenshot");
    assert!(!llm.requests()[7].to_string().contains("data:image/png"), "no image went to a model that reads none");
    let p = alice.get("/api/v1/llm-profiles/blind").await.1;
    assert_eq!(p["vision"], false, "{p}");
}

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Automations: a `webhook` automation's hook takes requests signed by the Standard Webhooks
//! reference library and starts one conversation per delivery (a replay, a bad signature, a
//! stale timestamp, a disabled automation or a body that is not JSON start nothing, each for a
//! reason a user can read); a `schedule` automation fires exactly once per tick with two
//! automation services racing for it; an automation names the agent its conversations have.

use std::time::{Duration, Instant};

use halyard_tests::harness::halyard_bin;
use halyard_tests::{Api, Halyard, HalyardOptions, NatsServer, Reply, ScriptedLlm, init};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";
const BOB: &str = "bob-secret-key";

/// The headers the Standard Webhooks reference library signs `body` with.
async fn signed(secret: &str, msg_id: &str, timestamp: i64, body: &str) -> Vec<(String, String)> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../protocol/examples/sign_hook_request.py");
    let mut child = tokio::process::Command::new("python3")
        .args([script, secret, msg_id, &timestamp.to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use tokio::io::AsyncWriteExt;
    child.stdin.take().unwrap().write_all(body.as_bytes()).await.unwrap();
    let out = child.wait_with_output().await.unwrap();
    assert!(out.status.success(), "signer failed (pip install standardwebhooks): {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().filter_map(|l| l.split_once(": ").map(|(k, v)| (k.to_owned(), v.to_owned()))).collect()
}

/// Posts `body` to `url` with `headers` and no key; the status and the JSON answer.
async fn hook(url: &str, headers: &[(String, String)], body: &str) -> (u16, Value) {
    let mut req = reqwest::Client::new().post(url).header("content-type", "application/json").body(body.to_owned());
    for (k, v) in headers {
        req = req.header(k, v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn now_s() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

/// Waits until the automation has `n` runs; returns them, newest first.
async fn runs(api: &Api, id: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (s, r) = api.get(&format!("/api/v1/automations/{id}/runs")).await;
        assert_eq!(s, 200, "{r}");
        let items = r["items"].as_array().unwrap().clone();
        if items.len() >= n {
            assert_eq!(items.len(), n, "more runs than requests: {items:?}");
            return items;
        }
        assert!(Instant::now() < deadline, "{} runs of {n}: {items:?}", items.len());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_signed_request_to_a_webhook_automation_starts_one_conversation_and_nothing_else_does() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);

    // Bad definitions are refused, each saying what to fix.
    for (body, code) in [
        (json!({"name": "x", "trigger": {"kind": "schedule", "cron": "0 9 * * *"}}), "invalid_field"),
        (json!({"name": "x", "trigger": {"kind": "schedule", "cron": "0 9 * *"}, "prompt": "p"}), "invalid_schedule"),
        (
            json!({"name": "x", "trigger": {"kind": "schedule", "cron": "0 9 * * *", "timezone": "Mars/Base"}, "prompt": "p"}),
            "invalid_schedule",
        ),
        (
            json!({"name": "x", "trigger": {"kind": "webhook"}, "repository": {"provider": "nope", "full_name": "a/b"}}),
            "unknown_git_provider",
        ),
        (json!({"name": "x", "trigger": {"kind": "webhook"}, "llm_profile": "nope"}), "unknown_llm_profile"),
        (json!({"name": "", "trigger": {"kind": "webhook"}}), "invalid_field"),
    ] {
        let (s, e) = api.post("/api/v1/automations", body.clone()).await;
        assert_eq!((s, e["error"]["code"].as_str()), (400, Some(code)), "{body}: {e}");
    }
    let (s, e) = api.post("/api/v1/automations", json!({"name": "x", "trigger": {"kind": "telepathy"}})).await;
    assert_eq!(s, 400, "{e}");

    let (s, a) = api
        .post(
            "/api/v1/automations",
            json!({"name": "Triage", "trigger": {"kind": "webhook"}, "prompt": "Triage this: {{title}}\n\n{{body}}"}),
        )
        .await;
    assert_eq!(s, 201, "{a}");
    let id = a["id"].as_str().unwrap().to_owned();
    let secret = a["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "{a}");
    let hook_url = a["hook_url"].as_str().unwrap().to_owned();
    assert_eq!(hook_url, format!("{}/api/v1/hooks/{id}", h.http));
    assert_eq!(a["enabled"], true);
    // Shown once: never again, to anyone.
    let (_, list) = api.get("/api/v1/automations").await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1, "{list}");
    assert!(!list.to_string().contains(&secret) && list["items"][0].get("secret").is_none(), "{list}");
    let (_, one) = api.get(&format!("/api/v1/automations/{id}")).await;
    assert!(!one.to_string().contains(&secret), "{one}");
    let bob = h.api(BOB);
    assert_eq!(bob.get(&format!("/api/v1/automations/{id}")).await.0, 404);
    assert_eq!(bob.get("/api/v1/automations").await.1["items"], json!([]));
    assert_eq!(bob.call(reqwest::Method::DELETE, &format!("/api/v1/automations/{id}"), None).await.0, 404);

    // A signed request: accepted at once, one conversation with the request in its message.
    llm.push([Reply::finish("triaged")]);
    let body = json!({"title": "Flaky test", "body": "test_login fails one run in ten"}).to_string();
    let headers = signed(&secret, "msg_first", now_s(), &body).await;
    let (s, answer) = hook(&hook_url, &headers, &body).await;
    assert_eq!((s, answer["status"].as_str()), (202, Some("accepted")), "{answer}");
    assert_eq!(answer["delivery_id"], "msg_first");
    let run = &runs(&api, &id, 1).await[0];
    assert_eq!(run["outcome"], "started", "{run}");
    assert_eq!(run["source"], "webhook");
    let conv = run["conversation_id"].as_str().unwrap().to_owned();
    let c = api.wait_conversation(&conv, "the run's conversation", |c| c["status"] == "READY").await;
    assert_eq!(c["tags"], json!({"automation": id, "source": "webhook", "delivery": "msg_first"}), "{c}");
    assert_eq!(c["title"], "Triage");
    let events = api.wait_finished(&conv, 1).await;
    let first = events.iter().find(|e| e["kind"] == "user_message").unwrap();
    assert_eq!(first["text"], "Triage this: Flaky test\n\ntest_login fails one run in ten", "{first}");
    let (_, found) = api.get(&format!("/api/v1/conversations?tag=automation:{id}")).await;
    assert_eq!(found["items"].as_array().unwrap().len(), 1, "{found}");

    // The same delivery again (a forge retrying): answered, nothing started.
    let (s, answer) = hook(&hook_url, &headers, &body).await;
    assert_eq!((s, answer["status"].as_str()), (200, Some("duplicate")), "{answer}");

    // Refused with no detail: a tampered body, another secret, a stale request, no headers.
    let tampered = body.replace("ten", "two");
    let (s, e) = hook(&hook_url, &headers, &tampered).await;
    assert_eq!((s, e["error"]["code"].as_str()), (401, Some("invalid_signature")), "{e}");
    let other = signed("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_other", now_s(), &body).await;
    assert_eq!(hook(&hook_url, &other, &body).await.0, 401);
    let stale = signed(&secret, "msg_stale", now_s() - 600, &body).await;
    assert_eq!(hook(&hook_url, &stale, &body).await.0, 401);
    assert_eq!(hook(&hook_url, &[], &body).await.0, 401);
    let metrics = h.scrape().await;
    for reason in ["bad_signature", "stale", "missing_header"] {
        let n = metrics.sum("halyard_hook_refused_total", &[("kind", "webhook"), ("reason", reason)]);
        assert_eq!(n, if reason == "bad_signature" { 2.0 } else { 1.0 }, "{reason}");
    }

    // Signed but not JSON: taken, and the run says why it started nothing.
    let text = "this is not JSON";
    let (s, _) = hook(&hook_url, &signed(&secret, "msg_text", now_s(), text).await, text).await;
    assert_eq!(s, 202);
    let latest = runs(&api, &id, 2).await.remove(0);
    assert_eq!(latest["outcome"], "ignored", "{latest}");
    assert!(latest["reason"].as_str().unwrap().contains("not JSON"), "{latest}");
    assert!(latest["conversation_id"].is_null(), "{latest}");

    // Disabled: taken, recorded, nothing started.
    let (s, p) = api.call(reqwest::Method::PATCH, &format!("/api/v1/automations/{id}"), Some(json!({"enabled": false}))).await;
    assert_eq!((s, &p["enabled"]), (200, &json!(false)), "{p}");
    let (s, _) = hook(&hook_url, &signed(&secret, "msg_off", now_s(), &body).await, &body).await;
    assert_eq!(s, 202);
    let latest = runs(&api, &id, 3).await.remove(0);
    assert_eq!((latest["outcome"].as_str(), latest["reason"].as_str()), (Some("ignored"), Some("the automation is disabled")));
    let (_, one) = api.get(&format!("/api/v1/automations/{id}")).await;
    assert_eq!(one["last_run"]["id"], latest["id"], "{one}");
    let (_, found) = api.get(&format!("/api/v1/conversations?tag=automation:{id}")).await;
    assert_eq!(found["items"].as_array().unwrap().len(), 1, "only the first request started one: {found}");

    // Another kind is another automation; a schedule has no hook.
    let (s, e) = api
        .call(
            reqwest::Method::PATCH,
            &format!("/api/v1/automations/{id}"),
            Some(json!({"trigger": {"kind": "schedule", "cron": "* * * * *"}})),
        )
        .await;
    assert_eq!(s, 400, "{e}");

    // The command line sees the same, and makes and removes automations too.
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(halyard_bin())
            .arg("automations")
            .args(args)
            .env("HALYARD_URL", &h.http)
            .env("HALYARD_API_KEY", ALICE)
            .env("HOME", h.data.path())
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr))
    };
    let (code, out) = cli(&["ls"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains(&id) && out.contains("Triage  webhook  disabled  last: ignored"), "{out}");
    let (code, out) = cli(&["runs", &id[..13]]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(out.lines().count(), 3, "{out}");
    assert!(out.lines().next().unwrap().contains("ignored  delivery msg_off  the automation is disabled"), "{out}");
    assert!(out.contains(&format!("started  delivery msg_first  conversation {conv}")), "{out}");
    let (code, out) = cli(&["add", "Weekly", "--schedule", "0 9 * * 1", "--timezone", "Europe/Paris", "--prompt", "Review open issues."]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("Weekly  schedule 0 9 * * 1 Europe/Paris  enabled  never run  next: "), "{out}");
    let weekly = out.split_whitespace().next().unwrap().to_owned();
    let (code, out) = cli(&["add", "Nope", "--schedule", "0 9 * *", "--prompt", "p"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("invalid_schedule") && out.contains("five-field"), "{out}");
    let (code, out) = cli(&["rm", &weekly]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(api.get(&format!("/api/v1/automations/{weekly}")).await.0, 404);

    // Deleted: its hook is gone.
    assert_eq!(api.call(reqwest::Method::DELETE, &format!("/api/v1/automations/{id}"), None).await.0, 204);
    let (s, _) = hook(&hook_url, &signed(&secret, "msg_gone", now_s(), &body).await, &body).await;
    assert_eq!(s, 404);
    assert_eq!(api.get(&format!("/api/v1/automations/{id}")).await.0, 404);
    assert_eq!(api.get("/api/v1/automations").await.1["items"], json!([]));
    assert!(h.service_permission_violations().is_empty(), "{:?}", h.service_permission_violations());
}

#[tokio::test]
async fn a_schedule_fires_once_per_tick_with_two_replicas_racing_and_once_for_a_tick_missed_while_down() {
    init();
    let llm = ScriptedLlm::start().await;
    let nats = NatsServer::start();
    let opts = |services: &[&str]| {
        HalyardOptions::new(&llm.base_url).serve(&nats.url, services).set("HALYARD_SECRET", "a-shared-deployment-secret")
    };
    let h = Halyard::start(opts(&["gateway", "conversations", "sandbox", "agent", "titles"]));
    // Two more replicas of the front: each a gateway with an automation service beside it.
    let mut one = Halyard::start(opts(&["gateway", "automations"]));
    let mut two = Halyard::start(opts(&["gateway", "automations"]));
    let api = h.api(ALICE);
    llm.push([Reply::finish("updated"), Reply::finish("updated again")]);

    let (s, a) = api
        .post(
            "/api/v1/automations",
            json!({"name": "Nightly", "trigger": {"kind": "schedule", "cron": "* * * * *", "timezone": "Europe/Paris"},
                   "prompt": "Update the dependencies."}),
        )
        .await;
    assert_eq!(s, 201, "{a}");
    let id = a["id"].as_str().unwrap().to_owned();
    assert!(a["hook_url"].is_null() && a.get("secret").is_none(), "a schedule has no hook: {a}");
    let next = a["next_run_at"].as_str().unwrap().to_owned();
    assert!(next.ends_with(":00.000Z"), "ticks are on the minute: {next}");

    // The next minute: one run, one conversation, whichever service claimed the tick.
    let deadline = Instant::now() + Duration::from_secs(75);
    let run = loop {
        let (_, r) = api.get(&format!("/api/v1/automations/{id}/runs")).await;
        if let Some(run) = r["items"].as_array().unwrap().first() {
            break run.clone();
        }
        assert!(Instant::now() < deadline, "no tick within a minute");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(run["outcome"], "started", "{run}");
    assert_eq!(run["trigger"], format!("tick {next}"), "{run}");
    let conv = run["conversation_id"].as_str().unwrap().to_owned();
    let events = api.wait_finished(&conv, 1).await;
    let first = events.iter().find(|e| e["kind"] == "user_message").unwrap();
    assert_eq!(first["text"], "Update the dependencies.");
    // Both services saw the tick come; one sent it. Nothing else arrives for it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, r) = api.get(&format!("/api/v1/automations/{id}/runs")).await;
    assert_eq!(r["items"].as_array().unwrap().len(), 1, "{r}");
    let (_, found) = api.get(&format!("/api/v1/conversations?tag=automation:{id}")).await;
    assert_eq!(found["items"].as_array().unwrap().len(), 1, "{found}");
    assert_eq!(found["items"][0]["tags"]["tick"], next, "{found}");
    let ticked = (one.log() + &two.log()).matches("schedule tick").count();
    assert_eq!(ticked, 1, "one service sent the tick");

    // No automation service runs over the next tick: the first to come back runs it once, late.
    one.stop();
    two.stop();
    let missed = api.get(&format!("/api/v1/automations/{id}")).await.1["next_run_at"].as_str().unwrap().to_owned();
    assert_ne!(missed, next);
    let at: std::time::SystemTime = httpdate_free_parse(&missed);
    while std::time::SystemTime::now() < at + Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(api.get(&format!("/api/v1/automations/{id}/runs")).await.1["items"].as_array().unwrap().len(), 1, "nobody ran it");
    one.restart();
    let late = runs(&api, &id, 2).await.remove(0);
    assert_eq!(late["trigger"], format!("tick {missed}"), "{late}");
    assert_eq!(late["outcome"], "started", "{late}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    runs(&api, &id, 2).await;
}

/// `2026-11-26T23:02:00.000Z` as a time.
fn httpdate_free_parse(rfc3339: &str) -> std::time::SystemTime {
    let (date, time) = rfc3339.trim_end_matches('Z').split_once('T').unwrap();
    let d: Vec<i64> = date.split('-').map(|x| x.parse().unwrap()).collect();
    let t: Vec<f64> = time.split(':').map(|x| x.parse().unwrap()).collect();
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y, m) = if d[1] <= 2 { (d[0] - 1, d[1] + 9) } else { (d[0], d[1] - 3) };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d[2] - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days as f64 * 86_400.0 + t[0] * 3600.0 + t[1] * 60.0 + t[2];
    std::time::UNIX_EPOCH + Duration::from_secs_f64(secs)
}

/// GitHub's own side of a webhook: an example payload from `@octokit/webhooks-examples` for
/// `event`/`action`, changed by `patch`, and its signature by `@octokit/webhooks-methods`.
async fn github_request(secret: &str, event: &str, action: &str, patch: impl FnOnce(&mut Value)) -> (String, String) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/js/github-hook.mjs");
    let out = tokio::process::Command::new("node").args([script, "example", event, action]).output().await.unwrap();
    assert!(out.status.success(), "no example (tests/install-deps.sh installs them): {}", String::from_utf8_lossy(&out.stderr));
    let mut payload: Value = serde_json::from_slice(&out.stdout).unwrap();
    patch(&mut payload);
    let body = payload.to_string();
    let mut child = tokio::process::Command::new("node")
        .args([script, "sign", secret])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use tokio::io::AsyncWriteExt;
    child.stdin.take().unwrap().write_all(body.as_bytes()).await.unwrap();
    let out = child.wait_with_output().await.unwrap();
    (body, String::from_utf8(out.stdout).unwrap())
}

fn github_headers(event: &str, delivery: &str, signature: &str) -> Vec<(String, String)> {
    vec![
        ("x-github-event".into(), event.into()),
        ("x-github-delivery".into(), delivery.into()),
        ("x-hub-signature-256".into(), signature.into()),
        ("user-agent".into(), "GitHub-Hookshot/044aadd".into()),
    ]
}

/// A forge world for GitHub automations: git's http-backend serving `repo` (with `file`, if
/// given), a GitHub API that knows it with issue `issue` open and `octo-writer` a writer, a
/// scripted LLM, Halyard, and Alice's git provider `work` on them. (Bind every field: one
/// left to `..` is dropped at once, and the repositories' folder or a server with it.)
struct GithubWorld {
    repos: tempfile::TempDir,
    github: halyard_tests::GithubServer,
    llm: ScriptedLlm,
    h: Halyard,
    api: Api,
    _server: halyard_tests::GitServer,
}

async fn github_world(token: &str, repo: &str, file: Option<(&str, &str)>, issue: u64) -> GithubWorld {
    let repos = tempfile::tempdir().unwrap();
    if let Some(file) = file {
        halyard_tests::bare_repository(repos.path(), &format!("{repo}.git"), file);
    }
    let server = halyard_tests::GitServer::start(repos.path().to_path_buf(), "x-access-token", token).await;
    let github = halyard_tests::GithubServer::start_with_git(token, &[repo], Some(repos.path().to_path_buf())).await;
    github.open_issue(repo, issue);
    github.set_permission("octo-writer", "write");
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_GIT_API_ALLOW", "loopback"));
    let api = h.api(ALICE);
    let provider = json!({"kind": "github", "host": server.base.trim_start_matches("http://"), "api_url": github.api_url, "token": token});
    assert_eq!(api.call(reqwest::Method::PUT, "/api/v1/git-providers/work", Some(provider)).await.0, 201);
    GithubWorld { repos, github, llm, h, api, _server: server }
}

#[tokio::test]
async fn a_labelled_github_issue_gets_a_pull_request_and_answers_and_a_later_mention_continues_it() {
    init();
    const TOKEN: &str = "ghp_automation-token-5d1c2e";
    let GithubWorld { repos: _repos, github, llm, h, api, _server } =
        github_world(TOKEN, "alice/app", Some(("README.md", "teh app\n")), 42).await;

    let (s, e) = api.post("/api/v1/automations", json!({"name": "x", "trigger": {"kind": "github", "provider": "nope"}})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("unknown_git_provider")), "{e}");
    let (s, a) = api.post("/api/v1/automations", json!({"name": "Issue bot", "trigger": {"kind": "github", "provider": "work"}})).await;
    assert_eq!(s, 201, "{a}");
    assert_eq!(a["trigger"], json!({"kind": "github", "provider": "work", "label": "halyard", "mention": "@halyard"}));
    let (id, secret, hook_url) = (a["id"].as_str().unwrap(), a["secret"].as_str().unwrap(), a["hook_url"].as_str().unwrap());

    // The `halyard` label on issue 42, by someone who may write: a conversation on the
    // repository that fixes it, opens a pull request, and says so on the issue.
    llm.push([
        Reply::tool(
            "terminal",
            json!({"command": "git checkout -q -b fix-typo && sed -i s/teh/the/ README.md && git -c user.name=a -c user.email=a@example.com commit -qam fix && git push -q origin fix-typo && echo PUSHED"}),
        ),
        Reply::tool("halyard__create_pull_request", json!({"title": "Fix the typo", "head": "fix-typo", "body": "Fixes #42."})),
        Reply::finish("Fixed the typo in README.md."),
    ]);
    let (body, signature) = github_request(secret, "issues", "labeled", |p| {
        p["repository"]["full_name"] = "alice/app".into();
        p["label"]["name"] = "halyard".into();
        p["issue"]["number"] = 42.into();
        p["issue"]["title"] = "Typo in the README".into();
        p["issue"]["body"] = "It says teh.".into();
        p["issue"]["html_url"] = "https://github.com/alice/app/issues/42".into();
        p["sender"]["login"] = "octo-writer".into();
    })
    .await;
    let labelled = github_headers("issues", "d1a1b2c3-0000-11ef-8000-000000000001", &signature);
    let (s, answer) = hook(hook_url, &labelled, &body).await;
    assert_eq!((s, answer["status"].as_str()), (202, Some("accepted")), "{answer}");
    let run = runs(&api, id, 1).await.remove(0);
    assert_eq!((run["outcome"].as_str(), run["source"].as_str()), (Some("started"), Some("github")), "{run}");
    let conv = run["conversation_id"].as_str().unwrap().to_owned();
    let c = api.wait_conversation(&conv, "the run's conversation", |c| c["status"] == "READY").await;
    assert_eq!(c["tags"]["issue"], "42", "{c}");
    assert_eq!(c["tags"]["repository"], "alice/app", "{c}");
    assert_eq!(c["tags"]["source"], "github", "{c}");
    let events = api.wait_finished(&conv, 1).await;
    let first = events.iter().find(|e| e["kind"] == "user_message").unwrap()["text"].as_str().unwrap().to_owned();
    assert!(first.starts_with("Typo in the README\n\nIt says teh.") && first.contains("https://github.com/alice/app/issues/42"), "{first}");
    assert!(events.iter().any(|e| e["kind"] == "pull_request_opened"), "no pull request");
    // 👀 on the issue, "on it" with the link, then the summary with the pull request.
    assert_eq!(github.reactions(), vec![("/api/v3/repos/alice/app/issues/42/reactions".to_owned(), json!({"content": "eyes"}))]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while github.comments().len() < 2 {
        assert!(Instant::now() < deadline, "no summary: {:?}", github.comments());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let comments = github.comments();
    let said: Vec<&str> = comments.iter().map(|(_, _, b)| b["body"].as_str().unwrap()).collect();
    assert!(comments.iter().all(|(r, n, _)| r == "alice/app" && *n == 42), "{comments:?}");
    assert!(said[0].starts_with("On it") && said[0].contains(&format!("/c/{conv}")), "{said:?}");
    let pr = format!("http://{}/alice/app/pull/1", github.host);
    assert!(said[1].contains("Fixed the typo in README.md.") && said[1].contains(&pr), "{said:?}");
    assert!(said.iter().all(|s| s.contains("<!-- halyard -->")), "{said:?}");

    // A later mention in the same issue: a message to the same conversation, 👀 on the comment.
    llm.push([Reply::finish("Also fixed the other one.")]);
    let mention = |body_text: &'static str, login: &'static str, comment_id: u64| {
        github_request(secret, "issue_comment", "created", move |p| {
            p["repository"]["full_name"] = "alice/app".into();
            p["issue"]["number"] = 42.into();
            p["issue"]["pull_request"] = Value::Null;
            p["issue"]["html_url"] = "https://github.com/alice/app/issues/42".into();
            p["comment"]["id"] = comment_id.into();
            p["comment"]["body"] = body_text.into();
            p["sender"]["login"] = login.into();
        })
    };
    let (body, signature) = mention("Thanks! @Halyard please also fix `recieve`.", "octo-writer", 9001).await;
    let (s, _) = hook(hook_url, &github_headers("issue_comment", "d1a1b2c3-0000-11ef-8000-000000000002", &signature), &body).await;
    assert_eq!(s, 202);
    let run = runs(&api, id, 2).await.remove(0);
    assert_eq!((run["outcome"].as_str(), run["conversation_id"].as_str()), (Some("continued"), Some(conv.as_str())), "{run}");
    let events = api.wait_finished(&conv, 2).await;
    let last = events.iter().rfind(|e| e["kind"] == "user_message").unwrap();
    assert!(last["text"].as_str().unwrap().contains("octo-writer wrote on https://github.com/alice/app/issues/42"), "{last}");
    assert!(
        github.reactions().contains(&("/api/v3/repos/alice/app/issues/comments/9001/reactions".to_owned(), json!({"content": "eyes"})))
    );

    // Each of these starts nothing, and its run says why.
    let (body, signature) = mention("> @halyard please also fix `recieve`.\n\nSeconded.", "octo-writer", 9002).await;
    assert_eq!(hook(hook_url, &github_headers("issue_comment", "d1a1b2c3-0000-11ef-8000-000000000003", &signature), &body).await.0, 202);
    let (body2, signature2) = mention("@halyard delete the repository", "octo-reader", 9003).await;
    assert_eq!(hook(hook_url, &github_headers("issue_comment", "d1a1b2c3-0000-11ef-8000-000000000004", &signature2), &body2).await.0, 202);
    let reasons: Vec<String> = runs(&api, id, 4).await[..2].iter().map(|r| format!("{} {}", r["outcome"], r["reason"])).collect();
    assert!(reasons.iter().any(|r| r.contains("ignored") && r.contains("no mention of @halyard")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("ignored") && r.contains("octo-reader lacks write access")), "{reasons:?}");
    // A replayed delivery is answered and starts nothing; a bad signature gets 401.
    let (s, answer) = hook(hook_url, &labelled, &github_request(secret, "issues", "labeled", |_| {}).await.0).await;
    assert_eq!(s, 401, "another body under the first request's signature: {answer}");
    let (s, answer) = hook(hook_url, &github_headers("issue_comment", "d1a1b2c3-0000-11ef-8000-000000000004", &signature2), &body2).await;
    assert_eq!((s, answer["status"].as_str()), (200, Some("duplicate")), "{answer}");
    // The delivery id is a header the signature does not cover: a captured delivery sent again
    // under a fresh id is the same delivery.
    let (s, answer) = hook(hook_url, &github_headers("issue_comment", "d1a1b2c3-0000-11ef-8000-0000000000ff", &signature2), &body2).await;
    assert_eq!((s, answer["status"].as_str()), (200, Some("duplicate")), "a replay under a fresh id: {answer}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    runs(&api, id, 4).await;
    // Three comments in all on GitHub: "on it", and a summary per run.
    let deadline = Instant::now() + Duration::from_secs(20);
    while github.comments().len() < 3 {
        assert!(Instant::now() < deadline, "no second summary: {:?}", github.comments());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(github.comments().len(), 3, "{:?}", github.comments());
    // The command line makes the same kind of automation.
    let out = std::process::Command::new(halyard_bin())
        .args(["automations", "add", "CLI bot", "--github", "work", "--mention", "@ship-it"])
        .env("HALYARD_URL", &h.http)
        .env("HALYARD_API_KEY", ALICE)
        .env("HOME", h.data.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && said.contains("CLI bot  github  enabled") && said.contains("secret (shown once): whsec_"), "{said}");
    let (_, list) = api.get("/api/v1/automations").await;
    let made = list["items"].as_array().unwrap().iter().find(|a| a["name"] == "CLI bot").cloned().unwrap();
    assert_eq!(made["trigger"], json!({"kind": "github", "provider": "work", "label": "halyard", "mention": "@ship-it"}));
    assert!(github.seen().iter().all(|(_, auth)| auth.as_deref() == Some(&format!("Bearer {TOKEN}"))), "{:?}", github.seen());
    assert!(h.service_permission_violations().is_empty(), "{:?}", h.service_permission_violations());
}

#[tokio::test]
async fn a_github_run_whose_start_fails_says_why_on_the_issue_and_the_next_mention_starts_afresh() {
    init();
    const TOKEN: &str = "ghp_automation-token-start-fails";
    // The forge knows alice/widget, but its git server has no such repository (yet): the clone
    // through the git proxy fails.
    let GithubWorld { repos, github, llm, h: _h, api, _server } = github_world(TOKEN, "alice/widget", None, 7).await;
    let (s, a) = api.post("/api/v1/automations", json!({"name": "Issue bot", "trigger": {"kind": "github", "provider": "work"}})).await;
    assert_eq!(s, 201, "{a}");
    let (id, secret, hook_url) = (a["id"].as_str().unwrap(), a["secret"].as_str().unwrap(), a["hook_url"].as_str().unwrap());

    let mention = |comment_id: u64, text: &'static str| {
        github_request(secret, "issue_comment", "created", move |p| {
            p["repository"]["full_name"] = "alice/widget".into();
            p["issue"]["number"] = 7.into();
            p["issue"]["pull_request"] = Value::Null;
            p["issue"]["html_url"] = "https://github.com/alice/widget/issues/7".into();
            p["comment"]["id"] = comment_id.into();
            p["comment"]["body"] = text.into();
            p["sender"]["login"] = "octo-writer".into();
        })
    };
    let (body, signature) = mention(7001, "@halyard fix the build").await;
    assert_eq!(hook(hook_url, &github_headers("issue_comment", "e1a1b2c3-0000-11ef-8000-000000000001", &signature), &body).await.0, 202);
    let run = runs(&api, id, 1).await.remove(0);
    let first = run["conversation_id"].as_str().unwrap().to_owned();
    api.wait_conversation(&first, "the start to fail", |c| c["status"] == "ERROR").await;
    // "On it", then how it ended, in words: what failed and what to do.
    let deadline = Instant::now() + Duration::from_secs(30);
    while github.comments().len() < 2 {
        assert!(Instant::now() < deadline, "the issue never heard how the start ended: {:?}", github.comments());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let comments = github.comments();
    let said: Vec<&str> = comments.iter().map(|(_, _, b)| b["body"].as_str().unwrap()).collect();
    assert!(said[0].starts_with("On it"), "{said:?}");
    assert!(said[1].contains("I could not get the repository") && said[1].contains("alice/widget"), "{said:?}");
    assert!(said[1].contains("mention me again") && said[1].contains(&format!("/c/{first}")), "{said:?}");
    assert!(!said[1].contains(TOKEN), "{said:?}");

    // The repository is fixed; the next mention starts a new conversation that runs.
    halyard_tests::bare_repository(repos.path(), "alice/widget.git", ("README.md", "widget\n"));
    llm.push([Reply::finish("The build is fixed.")]);
    let (body, signature) = mention(7002, "@halyard try again please").await;
    assert_eq!(hook(hook_url, &github_headers("issue_comment", "e1a1b2c3-0000-11ef-8000-000000000002", &signature), &body).await.0, 202);
    let run = runs(&api, id, 2).await.remove(0);
    assert_eq!(run["outcome"], "started", "{run}");
    let second = run["conversation_id"].as_str().unwrap().to_owned();
    assert_ne!(second, first, "the mention went to the conversation that never started");
    let events = api.wait_finished(&second, 1).await;
    let asked = events.iter().find(|e| e["kind"] == "user_message").unwrap()["text"].as_str().unwrap().to_owned();
    assert!(asked.contains("try again please"), "{asked}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !github.comments().iter().any(|(_, _, b)| b["body"].as_str().unwrap_or_default().contains("The build is fixed.")) {
        assert!(Instant::now() < deadline, "no summary for the new run: {:?}", github.comments());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The failure was said once.
    let failures =
        github.comments().iter().filter(|(_, _, b)| b["body"].as_str().unwrap_or_default().contains("could not work on this")).count();
    assert_eq!(failures, 1, "{:?}", github.comments());
}

/// A GitLab hook's payload, shaped as GitLab documents it.
fn gitlab_note(note_id: u64, text: &str, user_id: u64, noteable: &str, iid: u64) -> Value {
    let item = json!({"iid": iid, "title": "Slow search", "description": "Search takes 5 s.", "source_branch": "speed-up",
                      "url": format!("https://gitlab.example/group/app/-/issues/{iid}")});
    let mut p = json!({
        "object_kind": "note", "event_type": "note",
        "user": {"id": user_id, "name": "Dev", "username": format!("dev{user_id}")},
        "project_id": 7,
        "project": {"id": 7, "name": "app", "path_with_namespace": "group/app", "web_url": "https://gitlab.example/group/app"},
        "object_attributes": {"id": note_id, "note": text, "noteable_type": noteable, "discussion_id": format!("disc{note_id}"),
                              "url": format!("https://gitlab.example/group/app/-/issues/{iid}#note_{note_id}")},
    });
    p[if noteable == "Issue" { "issue" } else { "merge_request" }] = item;
    p
}

#[tokio::test]
async fn a_gitlab_mention_starts_a_conversation_that_replies_in_the_same_discussion() {
    init();
    const TOKEN: &str = "glpat-automation-token-19ab";
    let repos = tempfile::tempdir().unwrap();
    halyard_tests::bare_repository(repos.path(), "group/app.git", ("README.md", "slow search\n"));
    halyard_tests::git(&repos.path().join("group/app.git"), &["branch", "speed-up", "main"]);
    let server = halyard_tests::GitServer::start(repos.path().to_path_buf(), "oauth2", TOKEN).await;
    let gitlab = halyard_tests::GitlabServer::start(TOKEN).await;
    gitlab.add_member(11, 30);
    gitlab.add_member(12, 20);
    gitlab.open_merge_request(5, "speed-up");
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_GIT_API_ALLOW", "loopback"));
    let api = h.api(ALICE);
    let provider = json!({"kind": "gitlab", "host": server.base.trim_start_matches("http://"), "api_url": gitlab.api_url, "token": TOKEN});
    assert_eq!(api.call(reqwest::Method::PUT, "/api/v1/git-providers/lab", Some(provider)).await.0, 201);
    let (s, e) = api.post("/api/v1/automations", json!({"name": "x", "trigger": {"kind": "github", "provider": "lab"}})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_field")), "a gitlab provider for a github trigger: {e}");
    let (s, a) = api.post("/api/v1/automations", json!({"name": "Lab bot", "trigger": {"kind": "gitlab", "provider": "lab"}})).await;
    assert_eq!(s, 201, "{a}");
    let (id, secret, hook_url) = (a["id"].as_str().unwrap(), a["secret"].as_str().unwrap(), a["hook_url"].as_str().unwrap());
    let headers = |delivery: &str, token: &str| {
        vec![
            ("x-gitlab-event".to_owned(), "Note Hook".to_owned()),
            ("x-gitlab-event-uuid".to_owned(), delivery.to_owned()),
            ("x-gitlab-token".to_owned(), token.to_owned()),
        ]
    };

    // A developer mentions Halyard on merge request 5: a conversation on its source branch.
    llm.push([Reply::tool("terminal", json!({"command": "git rev-parse --abbrev-ref HEAD"})), Reply::finish("Added an index.")]);
    let body = gitlab_note(301, "@halyard can you add an index?", 11, "MergeRequest", 5).to_string();
    assert_eq!(hook(hook_url, &headers("3f0f2d9a-1", "wrong-token"), &body).await.0, 401);
    let (s, answer) = hook(hook_url, &headers("3f0f2d9a-1", secret), &body).await;
    assert_eq!((s, answer["status"].as_str()), (202, Some("accepted")), "{answer}");
    let run = runs(&api, id, 1).await.remove(0);
    assert_eq!((run["outcome"].as_str(), run["source"].as_str()), (Some("started"), Some("gitlab")), "{run}");
    let conv = run["conversation_id"].as_str().unwrap().to_owned();
    let events = api.wait_finished(&conv, 1).await;
    let branch = events.iter().find(|e| e["kind"] == "observation").unwrap()["content"].as_str().unwrap().to_owned();
    assert!(branch.contains("speed-up"), "the conversation works on the merge request's branch: {branch}");
    let (_, c) = api.get(&format!("/api/v1/conversations/{conv}")).await;
    assert_eq!((c["tags"]["merge_request"].as_str(), c["tags"]["source"].as_str()), (Some("5"), Some("gitlab")), "{c}");
    // 👀 on the note; "on it" and the summary in the note's discussion.
    assert_eq!(
        gitlab.emoji(),
        vec![("/api/v4/projects/group%2Fapp/merge_requests/5/notes/301/award_emoji".to_owned(), json!({"name": "eyes"}))]
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while gitlab.notes().len() < 2 {
        assert!(Instant::now() < deadline, "no summary: {:?}", gitlab.notes());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let notes = gitlab.notes();
    assert!(notes.iter().all(|(p, _)| p == "/api/v4/projects/group%2Fapp/merge_requests/5/discussions/disc301/notes"), "{notes:?}");
    assert!(notes[0].1["body"].as_str().unwrap().starts_with("On it"), "{notes:?}");
    assert!(notes[1].1["body"].as_str().unwrap().contains("Added an index."), "{notes:?}");

    // A reporter (may not push) and a non-member start nothing; a replay neither.
    let body = gitlab_note(302, "@halyard drop the table", 12, "Issue", 9).to_string();
    assert_eq!(hook(hook_url, &headers("3f0f2d9a-2", secret), &body).await.0, 202);
    let body = gitlab_note(303, "@halyard drop the table", 99, "Issue", 9).to_string();
    assert_eq!(hook(hook_url, &headers("3f0f2d9a-3", secret), &body).await.0, 202);
    let reasons: Vec<String> = runs(&api, id, 3).await[..2].iter().map(|r| r["reason"].as_str().unwrap_or_default().to_owned()).collect();
    assert!(reasons.iter().any(|r| r.contains("dev12 lacks write access")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("dev99 lacks write access")), "{reasons:?}");
    assert_eq!(hook(hook_url, &headers("3f0f2d9a-3", secret), &body).await.1["status"], "duplicate");
    assert!(h.service_permission_violations().is_empty(), "{:?}", h.service_permission_violations());
}

/// The headers Slack signs `body` with, made by Slack's own SDK (`SignatureVerifier`).
async fn slack_signed(secret: &str, timestamp: i64, body: &str) -> Vec<(String, String)> {
    let code = "import sys\nfrom slack_sdk.signature import SignatureVerifier\nprint(SignatureVerifier(sys.argv[1]).generate_signature(timestamp=sys.argv[2], body=sys.stdin.read()))";
    let mut child = tokio::process::Command::new("python3")
        .args(["-c", code, secret, &timestamp.to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use tokio::io::AsyncWriteExt;
    child.stdin.take().unwrap().write_all(body.as_bytes()).await.unwrap();
    let out = child.wait_with_output().await.unwrap();
    assert!(out.status.success(), "slack_sdk (pip install slack_sdk): {}", String::from_utf8_lossy(&out.stderr));
    let signature = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    vec![("x-slack-signature".into(), signature), ("x-slack-request-timestamp".into(), timestamp.to_string())]
}

/// An Events API `app_mention`, shaped as Slack sends it.
fn app_mention(event_id: &str, user: &str, channel: &str, text: &str, ts: &str, thread_ts: Option<&str>) -> String {
    let mut event =
        json!({"type": "app_mention", "user": user, "text": text, "ts": ts, "channel": channel, "event_ts": ts, "team": "T0001"});
    if let Some(t) = thread_ts {
        event["thread_ts"] = t.into();
    }
    json!({"token": "legacy-verification-token", "team_id": "T0001", "api_app_id": "A0001", "event": event, "type": "event_callback",
           "event_id": event_id, "event_time": now_s(), "authorizations": [{"team_id": "T0001", "user_id": "U0BOT", "is_bot": true}]})
    .to_string()
}

#[tokio::test]
async fn a_slack_mention_starts_a_conversation_answered_in_its_thread() {
    init();
    const SIGNING: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const BOT: &str = "xoxb-17653672481-19874698323-pdFZKVeTuE8sk7oOcBrzbqgy";
    const SLACK_APP_SECRET: &str = "operator-slack-app-secret-0042";
    let slack = halyard_tests::SlackServer::start(BOT).await;
    slack.add_user("U0999XYZ", "bob.b", "Bob Builder");
    let llm = ScriptedLlm::start().await;
    // The operator's Sign in with Slack (a stand-in for slack.com's OpenID provider), which must
    // know where to send people back before Halyard starts.
    let port = halyard_tests::oidc::free_port();
    let callback = format!("http://127.0.0.1:{port}/api/v1/auth/slack/callback");
    let slack_id = halyard_tests::OidcProvider::start_slack("halyard-slack-app", SLACK_APP_SECRET, &callback).await;
    let h = Halyard::start(
        HalyardOptions::new(&llm.base_url)
            .set("HALYARD_GIT_API_ALLOW", "loopback")
            .set("HALYARD_HTTP_ADDR", &format!("127.0.0.1:{port}"))
            .set("HALYARD_SLACK_OIDC_ISSUER", &slack_id.issuer)
            .set("HALYARD_SLACK_OIDC_CLIENT_ID", "halyard-slack-app")
            .set("HALYARD_SLACK_OIDC_CLIENT_SECRET", SLACK_APP_SECRET),
    );
    let api = h.api(ALICE);
    let trigger = |users: Value| {
        json!({"kind": "slack", "signing_secret": SIGNING, "bot_token": BOT, "channels": {"C0123ABC": null}, "users": users,
               "api_url": slack.api_url})
    };
    let (s, e) = api.post("/api/v1/automations", json!({"name": "x", "trigger": trigger(json!({"U0456DEF": "bob"}))})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_field")), "a Slack user linked to someone else: {e}");
    let (s, a) = api.post("/api/v1/automations", json!({"name": "Slack bot", "trigger": trigger(json!({"U0456DEF": "alice"}))})).await;
    assert_eq!(s, 201, "{a}");
    assert!(!a.to_string().contains(SIGNING) && !a.to_string().contains(BOT) && a.get("secret").is_none(), "{a}");
    let (id, hook_url) = (a["id"].as_str().unwrap(), a["hook_url"].as_str().unwrap());

    // Slack's handshake when the Request URL is saved.
    let challenge =
        json!({"token": "t", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", "type": "url_verification"}).to_string();
    let (s, answer) = hook(hook_url, &slack_signed(SIGNING, now_s(), &challenge).await, &challenge).await;
    assert_eq!((s, answer["challenge"].as_str()), (200, Some("3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P")), "{answer}");

    // A linked user mentions the bot: a conversation, 👀, "on it" in the thread, then the summary.
    llm.push([Reply::finish("The login page loads in 300 ms now.")]);
    let body = app_mention("Ev0001", "U0456DEF", "C0123ABC", "<@U0BOT> why is the login page slow?", "1700000000.000100", None);
    let headers = slack_signed(SIGNING, now_s(), &body).await;
    let (s, answer) = hook(hook_url, &headers, &body).await;
    assert_eq!((s, answer["delivery_id"].as_str()), (202, Some("Ev0001")), "{answer}");
    let run = runs(&api, id, 1).await.remove(0);
    assert_eq!((run["outcome"].as_str(), run["source"].as_str()), (Some("started"), Some("slack")), "{run}");
    let conv = run["conversation_id"].as_str().unwrap().to_owned();
    let events = api.wait_finished(&conv, 1).await;
    assert_eq!(events.iter().find(|e| e["kind"] == "user_message").unwrap()["text"], "why is the login page slow?");
    let deadline = Instant::now() + Duration::from_secs(20);
    while slack.calls_of("chat.postMessage").len() < 2 {
        assert!(Instant::now() < deadline, "no summary: {:?}", slack.calls());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(slack.calls_of("reactions.add"), vec![json!({"channel": "C0123ABC", "timestamp": "1700000000.000100", "name": "eyes"})]);
    let posts = slack.calls_of("chat.postMessage");
    assert!(posts.iter().all(|p| p["channel"] == "C0123ABC" && p["thread_ts"] == "1700000000.000100"), "{posts:?}");
    assert!(posts[0]["text"].as_str().unwrap().starts_with("On it") && posts[0]["text"].as_str().unwrap().contains(&conv), "{posts:?}");
    assert!(posts[1]["text"].as_str().unwrap().contains("300 ms"), "{posts:?}");

    // Slack retries the same event: answered, nothing more. A stale one is refused.
    let mut retry = slack_signed(SIGNING, now_s(), &body).await;
    retry.push(("x-slack-retry-num".into(), "1".into()));
    assert_eq!(hook(hook_url, &retry, &body).await.1["status"], "duplicate");
    assert_eq!(hook(hook_url, &slack_signed(SIGNING, now_s() - 400, &body).await, &body).await.0, 401);

    // A reply in the thread continues the conversation.
    llm.push([Reply::finish("And the signup page too.")]);
    let body = app_mention("Ev0002", "U0456DEF", "C0123ABC", "<@U0BOT> and signup?", "1700000050.000300", Some("1700000000.000100"));
    assert_eq!(hook(hook_url, &slack_signed(SIGNING, now_s(), &body).await, &body).await.0, 202);
    let run = runs(&api, id, 2).await.remove(0);
    assert_eq!((run["outcome"].as_str(), run["conversation_id"].as_str()), (Some("continued"), Some(conv.as_str())), "{run}");
    api.wait_finished(&conv, 2).await;

    // An unlinked user is told privately and starts nothing; another channel is not the bot's.
    let body = app_mention("Ev0003", "U0999XYZ", "C0123ABC", "<@U0BOT> delete prod", "1700000100.000400", None);
    assert_eq!(hook(hook_url, &slack_signed(SIGNING, now_s(), &body).await, &body).await.0, 202);
    let body = app_mention("Ev0004", "U0456DEF", "C0OTHER1", "<@U0BOT> hello", "1700000200.000500", None);
    assert_eq!(hook(hook_url, &slack_signed(SIGNING, now_s(), &body).await, &body).await.0, 202);
    let reasons: Vec<String> = runs(&api, id, 4).await[..2].iter().map(|r| r["reason"].as_str().unwrap_or_default().to_owned()).collect();
    assert!(reasons.iter().any(|r| r.contains("U0999XYZ is not linked")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("channel C0OTHER1 is not one of the automation's")), "{reasons:?}");
    let told = slack.calls_of("chat.postEphemeral");
    assert_eq!(told.len(), 1, "{told:?}");
    let note = told[0]["text"].as_str().unwrap().to_owned();
    assert!(told[0]["user"] == "U0999XYZ" && note.contains("not linked"), "{told:?}");

    // The note carries a sign-in link; Bob follows it signed in, and that Slack user is Bob.
    let code = note.split("/link/slack/").nth(1).unwrap().chars().take_while(char::is_ascii_hexdigit).collect::<String>();
    assert_eq!(code.len(), 64, "{note}");
    let bob = h.api(BOB);
    let (s, shown) = bob.get(&format!("/api/v1/slack-links/{code}")).await;
    assert_eq!((s, shown["automation"].as_str(), shown["slack_user"].as_str()), (200, Some("Slack bot"), Some("U0999XYZ")), "{shown}");
    // Named as the app's Slack names them: who, and in which workspace.
    assert_eq!(
        (shown["slack_name"].as_str(), shown["workspace"].as_str()),
        (Some("Bob Builder (@bob.b)"), Some("Acme (acme-corp.slack.com)")),
        "{shown}"
    );
    assert_eq!(shown["slack_sign_in"], true, "{shown}");
    // Only Slack's word links him: his own request is sent to Slack.
    let (s, e) = bob.post(&format!("/api/v1/slack-links/{code}"), json!({})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (403, Some("slack_sign_in_required")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains(&format!("/api/v1/auth/slack/start?link={code}")), "{e}");
    let start = format!("{}/api/v1/auth/slack/start?link={code}", h.http);
    // Starting it links him: a read-only key of his may not (a GET, but one that acts).
    let (s, key) = bob.post("/api/v1/me/keys", json!({"name": "reader", "scope": "read_only"})).await;
    assert_eq!(s, 201, "{key}");
    let reader = h.api(key["key"].as_str().unwrap());
    let (s, e) = reader.get(&format!("/api/v1/auth/slack/start?link={code}")).await;
    assert_eq!((s, e["error"]["code"].as_str()), (403, Some("read_only_key")), "{e}");
    // Signed in to Slack as someone else, or as that id in another workspace: refused, in words,
    // and the link still works.
    for (login, named) in [("T0001/U0777AAA", "U0777AAA"), ("T0666/U0999XYZ", "T0666")] {
        let page = halyard_tests::oidc::sign_in_through(&start, BOB, login).await;
        assert!(page.contains(&format!("/link/slack/{code}?slack_error=")) && page.contains(named), "{page}");
        assert_eq!(bob.get(&format!("/api/v1/slack-links/{code}")).await.0, 200, "{page}");
    }
    // Started with a key that is revoked before Slack sends the browser back: nobody is linked,
    // and the link still works.
    let (s, key) = bob.post("/api/v1/me/keys", json!({"name": "laptop"})).await;
    assert_eq!(s, 201, "{key}");
    let (callback, cookies) = halyard_tests::oidc::up_to_callback(&start, key["key"].as_str().unwrap(), "T0001/U0999XYZ").await;
    let revoke = format!("/api/v1/me/keys/{}", key["id"].as_str().unwrap());
    assert_eq!(bob.call(reqwest::Method::DELETE, &revoke, None).await.0, 200);
    let to = halyard_tests::oidc::call_back(&callback, &cookies).await;
    assert!(to.starts_with(&format!("/link/slack/{code}?slack_error=you can no longer link here")), "{to}");
    assert_eq!(bob.get(&format!("/api/v1/slack-links/{code}")).await.0, 200, "{to}");
    // As that Slack user: linked, without letting the automation run as him.
    let page = halyard_tests::oidc::sign_in_through(&start, BOB, "T0001/U0999XYZ").await;
    assert!(page.contains("linked=U0999XYZ&as=bob&runs_as_you=false"), "{page}");
    let (s, again) = bob.get(&format!("/api/v1/slack-links/{code}")).await;
    assert_eq!((s, again["error"]["code"].as_str()), (404, Some("not_found")), "a link works once: {again}");
    // A mention "by" Bob's Slack id (the owner holds the signing secret: it may be forged)
    // starts nothing as Bob, who is told privately how to allow it.
    let body = app_mention("Ev0010", "U0999XYZ", "C0123ABC", "<@U0BOT> spend bob's budget", "1700000250.000550", None);
    assert_eq!(hook(hook_url, &slack_signed(SIGNING, now_s(), &body).await, &body).await.0, 202);
    let run = runs(&api, id, 5).await.remove(0);
    assert!(run["outcome"] == "ignored" && run["reason"].as_str().unwrap().contains("has not let this automation run as them"), "{run}");
    let told = slack.calls_of("chat.postEphemeral");
    let note = told.last().unwrap()["text"].as_str().unwrap().to_owned();
    assert!(note.contains("has not let this automation"), "{note}");
    let code = note.split("/link/slack/").nth(1).unwrap().chars().take_while(char::is_ascii_hexdigit).collect::<String>();
    let start = format!("{}/api/v1/auth/slack/start?link={code}&run_as_me=true", h.http);
    let page = halyard_tests::oidc::sign_in_through(&start, BOB, "T0001/U0999XYZ").await;
    assert!(page.contains("linked=U0999XYZ&as=bob&runs_as_you=true"), "{page}");
    let (_, a) = api.get(&format!("/api/v1/automations/{id}")).await;
    assert_eq!(a["trigger"]["users"], json!({"U0456DEF": "alice", "U0999XYZ": "bob"}), "{a}");
    // The owner may keep or drop that link, never make one for someone else.
    let patch =
        |users: Value| json!({"trigger": {"kind": "slack", "channels": {"C0123ABC": null}, "users": users, "api_url": slack.api_url}});
    let url = format!("/api/v1/automations/{id}");
    let (s, e) = api.call(reqwest::Method::PATCH, &url, Some(patch(json!({"U0456DEF": "alice", "U0777AAA": "bob"})))).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_field")), "{e}");
    let (s, kept) = api.call(reqwest::Method::PATCH, &url, Some(patch(json!({"U0456DEF": "alice", "U0999XYZ": "bob"})))).await;
    assert_eq!(s, 200, "{kept}");

    // Bob's mention now starts a conversation that is his, not Alice's.
    llm.push([Reply::finish("Prod is fine; I deleted nothing.")]);
    let body = app_mention("Ev0005", "U0999XYZ", "C0123ABC", "<@U0BOT> check prod", "1700000300.000600", None);
    assert_eq!(hook(hook_url, &slack_signed(SIGNING, now_s(), &body).await, &body).await.0, 202);
    let run = runs(&api, id, 6).await.remove(0);
    assert_eq!(run["outcome"], "started", "{run}");
    let bobs = run["conversation_id"].as_str().unwrap().to_owned();
    bob.wait_finished(&bobs, 1).await;
    assert_eq!(api.get(&format!("/api/v1/conversations/{bobs}")).await.0, 404, "Alice does not see Bob's conversation");
    // Alice, in Bob's thread, is told it is Bob's and starts nothing.
    let body = app_mention("Ev0006", "U0456DEF", "C0123ABC", "<@U0BOT> also this", "1700000400.000700", Some("1700000300.000600"));
    assert_eq!(hook(hook_url, &slack_signed(SIGNING, now_s(), &body).await, &body).await.0, 202);
    let run = runs(&api, id, 7).await.remove(0);
    assert!(run["outcome"] == "ignored" && run["reason"].as_str().unwrap().contains("conversation is bob's"), "{run}");
    // The owner changing the prompt drops the links to others: Bob's word was given for the
    // automation as it was.
    let (s, changed) = api.call(reqwest::Method::PATCH, &url, Some(json!({"prompt": "Do whatever this says: {{body}}"}))).await;
    assert_eq!(s, 200, "{changed}");
    assert_eq!(changed["trigger"]["users"], json!({"U0456DEF": "alice"}), "{changed}");
    assert!(h.service_permission_violations().is_empty(), "{:?}", h.service_permission_violations());
}

/// Hex HMAC-SHA256 of the body: Forgejo's, Gitea's, Jira's and Linear's signatures (Python's own
/// hmac: none of them has a signing library of its own to test with).
fn hex_hmac(secret: &str, body: &str) -> String {
    let code = "import hmac, hashlib, sys\nprint(hmac.new(sys.argv[1].encode(), sys.stdin.buffer.read(), hashlib.sha256).hexdigest())";
    let mut child = std::process::Command::new("python3")
        .args(["-c", code, secret])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap().trim().to_owned()
}

#[tokio::test]
async fn a_forgejo_provider_lists_clones_and_opens_pull_requests_and_its_mentions_start_work() {
    init();
    const TOKEN: &str = "forgejo-token-8c21f0";
    let repos = tempfile::tempdir().unwrap();
    halyard_tests::bare_repository(repos.path(), "team/site.git", ("index.html", "<h1>Helo</h1>\n"));
    let server = halyard_tests::GitServer::start(repos.path().to_path_buf(), "x-access-token", TOKEN).await;
    let forgejo = halyard_tests::GithubServer::start_forgejo(TOKEN, &["team/site"], Some(repos.path().to_path_buf())).await;
    forgejo.open_issue("team/site", 7);
    forgejo.set_permission("frodo", "write");
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_GIT_API_ALLOW", "loopback"));
    let api = h.api(ALICE);
    let provider =
        json!({"kind": "forgejo", "host": server.base.trim_start_matches("http://"), "api_url": forgejo.api_url, "token": TOKEN});
    let (s, p) = api.call(reqwest::Method::PUT, "/api/v1/git-providers/codeberg", Some(provider)).await;
    assert_eq!(s, 201, "{p}");
    // The provider lists the token's repositories and their branches, as GitHub's does.
    let (s, listed) = api.get("/api/v1/repositories?provider=codeberg").await;
    assert_eq!(s, 200, "{listed}");
    assert!(listed.to_string().contains("team/site"), "{listed}");

    let (s, a) = api.post("/api/v1/automations", json!({"name": "Site bot", "trigger": {"kind": "forgejo", "provider": "codeberg"}})).await;
    assert_eq!(s, 201, "{a}");
    let (id, secret, hook_url) = (a["id"].as_str().unwrap(), a["secret"].as_str().unwrap(), a["hook_url"].as_str().unwrap());

    // A mention in an issue comment, Gitea-shaped: the conversation clones through the git proxy
    // and opens a pull request with Halyard's forge tool, on Forgejo.
    llm.push([
        Reply::tool(
            "terminal",
            json!({"command": "git checkout -q -b fix-helo && sed -i s/Helo/Hello/ index.html && git -c user.name=a -c user.email=a@example.com commit -qam fix && git push -q origin fix-helo && echo PUSHED"}),
        ),
        Reply::tool("halyard__create_pull_request", json!({"title": "Fix the heading", "head": "fix-helo", "body": "Fixes #7."})),
        Reply::finish("Fixed the heading."),
    ]);
    let payload = json!({
        "action": "created",
        "issue": {"id": 70, "number": 7, "title": "Typo on the home page", "body": "It says Helo.", "html_url": "https://codeberg.example/team/site/issues/7",
                  "labels": [], "pull_request": null, "user": {"login": "frodo", "username": "frodo"}},
        "comment": {"id": 4242, "body": "@halyard can you fix it?", "html_url": "https://codeberg.example/team/site/issues/7#issuecomment-4242",
                    "user": {"login": "frodo", "username": "frodo"}},
        "repository": {"id": 1, "name": "site", "full_name": "team/site", "html_url": "https://codeberg.example/team/site"},
        "sender": {"id": 3, "login": "frodo", "username": "frodo"},
        "is_pull": false,
    })
    .to_string();
    let headers = |delivery: &str, signature: String| {
        vec![
            ("x-forgejo-event".to_owned(), "issue_comment".to_owned()),
            ("x-forgejo-delivery".to_owned(), delivery.to_owned()),
            ("x-forgejo-signature".to_owned(), signature),
        ]
    };
    assert_eq!(hook(hook_url, &headers("b7e1-1", hex_hmac("not the secret", &payload)), &payload).await.0, 401);
    let (s, answer) = hook(hook_url, &headers("b7e1-1", hex_hmac(secret, &payload)), &payload).await;
    assert_eq!((s, answer["status"].as_str()), (202, Some("accepted")), "{answer}");
    let run = runs(&api, id, 1).await.remove(0);
    assert_eq!((run["outcome"].as_str(), run["source"].as_str()), (Some("started"), Some("forgejo")), "{run}");
    let conv = run["conversation_id"].as_str().unwrap().to_owned();
    let events = api.wait_events(&conv, "the run to finish", halyard_tests::events::ended).await;
    let pushed =
        events.iter().find(|e| e["kind"] == "observation" && e["tool"] == "terminal").unwrap()["content"].as_str().unwrap().to_owned();
    assert!(pushed.contains("PUSHED"), "{pushed}");
    assert_eq!(forgejo.pulls().len(), 1, "{:?}", forgejo.pulls());
    assert_eq!(forgejo.pulls()[0].1["head"], "fix-helo");
    assert!(
        forgejo.reactions().contains(&("/api/v3/repos/team/site/issues/comments/4242/reactions".to_owned(), json!({"content": "eyes"})))
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while forgejo.comments().len() < 2 {
        assert!(Instant::now() < deadline, "no summary: {:?}", forgejo.comments());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let said: Vec<String> = forgejo.comments().iter().map(|(_, n, b)| format!("#{n} {}", b["body"].as_str().unwrap())).collect();
    assert!(said[0].starts_with("#7 On it") && said[1].starts_with("#7 Done.") && said[1].contains("Fixed the heading."), "{said:?}");
    // Every call carried the token as Forgejo wants it.
    assert!(forgejo.seen().iter().all(|(_, auth)| auth.as_deref() == Some(&format!("token {TOKEN}"))), "{:?}", forgejo.seen());
    assert!(h.service_permission_violations().is_empty(), "{:?}", h.service_permission_violations());
}

/// A Jira webhook's payload, shaped as Jira Cloud sends it.
fn jira_event(event: &str, key: &str, extra: Value) -> String {
    let mut p = json!({
        "timestamp": 1_700_000_000_000u64, "webhookEvent": event,
        "user": {"accountId": "5b10ac8d82e05b22cc7d4ef5", "displayName": "Ann Lee"},
        "issue": {"id": "10002", "key": key, "fields": {"summary": "Search is slow", "description": "It takes 5 s.",
                  "project": {"id": "10000", "key": key.split('-').next().unwrap(), "name": "Project"}, "labels": ["halyard"]}},
    });
    if let (Some(p), Some(e)) = (p.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    p.to_string()
}

#[tokio::test]
async fn a_jira_label_starts_a_conversation_that_comments_back_and_a_mention_continues_it() {
    init();
    let jira = halyard_tests::JiraServer::start("bot@acme.example", "jira-api-token-77").await;
    jira.grant_edit("5b10ac8d82e05b22cc7d4ef5", "PROJ");
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_GIT_API_ALLOW", "loopback"));
    let api = h.api(ALICE);
    let trigger = json!({"kind": "jira", "api_url": jira.site, "email": "bot@acme.example", "api_token": "jira-api-token-77",
                         "projects": {"PROJ": null}});
    let (s, a) = api.post("/api/v1/automations", json!({"name": "Jira bot", "trigger": trigger})).await;
    assert_eq!(s, 201, "{a}");
    assert!(!a.to_string().contains("jira-api-token-77"), "{a}");
    let (id, secret, hook_url) = (a["id"].as_str().unwrap(), a["secret"].as_str().unwrap(), a["hook_url"].as_str().unwrap());
    let send = |body: String, delivery: &'static str| {
        let sig = format!("sha256={}", hex_hmac(secret, &body));
        async move {
            let headers = vec![("x-hub-signature".to_owned(), sig), ("x-atlassian-webhook-identifier".to_owned(), delivery.to_owned())];
            hook(hook_url, &headers, &body).await
        }
    };

    llm.push([Reply::finish("Added an index on the search table.")]);
    let labelled = jira_event(
        "jira:issue_updated",
        "PROJ-12",
        json!({"changelog": {"items": [{"field": "labels", "fromString": "", "toString": "halyard"}]}}),
    );
    let forged = vec![
        ("x-hub-signature".to_owned(), format!("sha256={}", hex_hmac(secret, &labelled))),
        ("x-atlassian-webhook-identifier".to_owned(), "wh-1".to_owned()),
    ];
    assert_eq!(hook(hook_url, &forged, &labelled.replace("Search", "Serch")).await.0, 401, "a body other than the signed one");
    let (s, answer) = send(labelled, "wh-1").await;
    assert_eq!((s, answer["status"].as_str()), (202, Some("accepted")), "{answer}");
    let run = runs(&api, id, 1).await.remove(0);
    assert_eq!((run["outcome"].as_str(), run["source"].as_str()), (Some("started"), Some("jira")), "{run}");
    let conv = run["conversation_id"].as_str().unwrap().to_owned();
    let events = api.wait_finished(&conv, 1).await;
    let first = events.iter().find(|e| e["kind"] == "user_message").unwrap()["text"].as_str().unwrap().to_owned();
    assert!(first.starts_with("Search is slow\n\nIt takes 5 s.") && first.contains(&format!("{}/browse/PROJ-12", jira.site)), "{first}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while jira.comments().len() < 2 {
        assert!(Instant::now() < deadline, "no summary: {:?}", jira.comments());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let said: Vec<String> = jira.comments().iter().map(|(k, b)| format!("{k} {}", b["body"].as_str().unwrap())).collect();
    assert!(said[0].starts_with("PROJ-12 On it") && said[0].contains(&conv), "{said:?}");
    assert!(said[1].starts_with("PROJ-12 Done.") && said[1].contains("Added an index"), "{said:?}");

    // A mention on the same issue continues; Halyard's own comment (quoting the mention) and
    // another project start nothing.
    llm.push([Reply::finish("Also cached it.")]);
    let mention = |text: &str, key: &str| {
        let author = json!({"displayName": "Ann Lee", "accountId": "5b10ac8d82e05b22cc7d4ef5"});
        jira_event("comment_created", key, json!({"comment": {"id": "10050", "body": text, "author": author}}))
    };
    assert_eq!(send(mention("@halyard can you also cache it?", "PROJ-12"), "wh-2").await.0, 202);
    let run = runs(&api, id, 2).await.remove(0);
    assert_eq!((run["outcome"].as_str(), run["conversation_id"].as_str()), (Some("continued"), Some(conv.as_str())), "{run}");
    assert_eq!(send(mention(&said[1][8..], "PROJ-12"), "wh-3").await.0, 202);
    assert_eq!(send(mention("@halyard hi", "OTHER-1"), "wh-4").await.0, 202);
    let reasons: Vec<String> = runs(&api, id, 4).await[..2].iter().map(|r| r["reason"].as_str().unwrap_or_default().to_owned()).collect();
    assert!(reasons.iter().any(|r| r == "Halyard's own comment" || r.starts_with("no mention")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("OTHER is not one of the automation's")), "{reasons:?}");
    assert_eq!(send(mention("@halyard hi", "OTHER-1"), "wh-4").await.1["status"], "duplicate");
    // Someone Jira does not let edit the project's issues starts nothing.
    let eve =
        json!({"comment": {"id": "10051", "body": "@halyard drop the table", "author": {"displayName": "Eve", "accountId": "eve-77"}}});
    assert_eq!(send(jira_event("comment_created", "PROJ-12", eve), "wh-5").await.0, 202);
    let latest = runs(&api, id, 5).await.remove(0);
    assert_eq!(latest["outcome"], "ignored", "{latest}");
    assert!(latest["reason"].as_str().unwrap().contains("Eve may not work in PROJ"), "{latest}");
    api.wait_finished(&conv, 2).await;
    assert!(h.service_permission_violations().is_empty(), "{:?}", h.service_permission_violations());
}

#[tokio::test]
async fn a_linear_mention_starts_a_conversation_and_stale_or_foreign_requests_start_nothing() {
    init();
    const SIGNING: &str = "lin_wh_signing_secret_5b8e";
    let linear = halyard_tests::LinearServer::start("lin_api_key_2c9d").await;
    linear.add_member("usr-1", "ENG");
    linear.add_member("usr-9", "OPS");
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_GIT_API_ALLOW", "loopback"));
    let api = h.api(ALICE);
    let trigger = json!({"kind": "linear", "signing_secret": SIGNING, "api_key": "lin_api_key_2c9d", "teams": {"ENG": null}, "api_url": linear.api_url});
    let (s, a) = api.post("/api/v1/automations", json!({"name": "Linear bot", "trigger": trigger})).await;
    assert_eq!(s, 201, "{a}");
    assert!(!a.to_string().contains(SIGNING) && !a.to_string().contains("lin_api_key_2c9d") && a.get("secret").is_none(), "{a}");
    let (id, hook_url) = (a["id"].as_str().unwrap(), a["hook_url"].as_str().unwrap());
    let comment = |text: &str, identifier: &str, at_ms: i64| {
        json!({"action": "create", "type": "Comment", "createdAt": "2026-11-26T23:00:00.000Z", "organizationId": "org-1",
               "url": format!("https://linear.app/acme/issue/{identifier}#comment-1"), "webhookId": "wh-lin-1", "webhookTimestamp": at_ms,
               "data": {"id": "cmt-1", "body": text, "issueId": "iss-42", "userId": "usr-1", "user": {"id": "usr-1", "name": "Kim"},
                        "issue": {"id": "iss-42", "identifier": identifier, "title": "Crash on save"}}})
        .to_string()
    };
    let signed = |body: &str, delivery: &str| {
        vec![("linear-signature".to_owned(), hex_hmac(SIGNING, body)), ("linear-delivery".to_owned(), delivery.to_owned())]
    };
    let now_ms = || now_s() * 1000;

    // What Linear's own SDK accepts is what Halyard accepts, and refuses what it refuses.
    let linear_says = |body: &str| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/js/linear-verify.mjs");
        let mut child = std::process::Command::new("node")
            .args([script, SIGNING, &hex_hmac(SIGNING, body)])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
        String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap()
    };

    llm.push([Reply::finish("Fixed the crash.")]);
    let body = comment("@halyard can you take this?", "ENG-42", now_ms());
    assert_eq!(linear_says(&body), "verified");
    let (s, answer) = hook(hook_url, &signed(&body, "d-1"), &body).await;
    assert_eq!((s, answer["status"].as_str()), (202, Some("accepted")), "{answer}");
    let run = runs(&api, id, 1).await.remove(0);
    assert_eq!((run["outcome"].as_str(), run["source"].as_str()), (Some("started"), Some("linear")), "{run}");
    let conv = run["conversation_id"].as_str().unwrap().to_owned();
    api.wait_finished(&conv, 1).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while linear.comments().len() < 2 {
        assert!(Instant::now() < deadline, "no summary: {:?}", linear.comments());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let said = linear.comments();
    assert!(said.iter().all(|c| c["issueId"] == "iss-42"), "{said:?}");
    assert!(
        said[0]["body"].as_str().unwrap().starts_with("On it") && said[1]["body"].as_str().unwrap().contains("Fixed the crash."),
        "{said:?}"
    );

    // A request over a minute old is refused; another team's issue starts nothing.
    let stale = comment("@halyard again", "ENG-42", now_ms() - 120_000);
    assert_eq!(linear_says(&stale), "refused: Invalid webhook timestamp");
    assert_eq!(hook(hook_url, &signed(&stale, "d-2"), &stale).await.0, 401);
    let other = comment("@halyard hi", "OPS-1", now_ms());
    assert_eq!(hook(hook_url, &signed(&other, "d-3"), &other).await.0, 202);
    let latest = runs(&api, id, 2).await.remove(0);
    assert!(latest["reason"].as_str().unwrap().contains("OPS is not one of the automation's"), "{latest}");
    assert_eq!(hook(hook_url, &signed(&other, "d-3"), &other).await.1["status"], "duplicate");
    // A user who is not in the team starts nothing.
    let outsider = comment("@halyard take it", "ENG-42", now_ms()).replace("usr-1", "usr-9").replace("Kim", "Lou");
    assert_eq!(hook(hook_url, &signed(&outsider, "d-4"), &outsider).await.0, 202);
    let latest = runs(&api, id, 3).await.remove(0);
    assert_eq!(latest["outcome"], "ignored", "{latest}");
    assert!(latest["reason"].as_str().unwrap().contains("Lou may not work in ENG"), "{latest}");
    assert!(h.service_permission_violations().is_empty(), "{:?}", h.service_permission_violations());
}

#[tokio::test]
async fn a_bitbucket_provider_and_a_pull_request_comment_that_mentions_halyard() {
    init();
    const PASSWORD: &str = "ATBB-app-password-31c7";
    let repos = tempfile::tempdir().unwrap();
    halyard_tests::bare_repository(repos.path(), "ws/app.git", ("README.md", "hello\n"));
    halyard_tests::git(&repos.path().join("ws/app.git"), &["branch", "feature", "main"]);
    let server = halyard_tests::GitServer::start(repos.path().to_path_buf(), "halyard-bot", PASSWORD).await;
    let bitbucket = halyard_tests::BitbucketServer::start("halyard-bot", PASSWORD, "ws/app", repos.path().to_path_buf()).await;
    bitbucket.set_permission("557058:sam", "write");
    let pr = bitbucket.open_pull("feature");
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_GIT_API_ALLOW", "loopback"));
    let api = h.api(ALICE);
    let provider = json!({"kind": "bitbucket", "host": server.base.trim_start_matches("http://"), "username": "halyard-bot",
                          "api_url": bitbucket.api_url, "token": PASSWORD});
    let (s, p) = api.call(reqwest::Method::PUT, "/api/v1/git-providers/bb", Some(provider)).await;
    assert_eq!(s, 201, "{p}");
    let (s, listed) = api.get("/api/v1/repositories?provider=bb").await;
    assert!(s == 200 && listed.to_string().contains("ws/app"), "{listed}");
    let (s, branches) = api.get("/api/v1/repositories/branches?provider=bb&repository=ws/app").await;
    assert!(s == 200 && branches["default_branch"] == "main" && branches.to_string().contains("feature"), "{branches}");

    let (s, a) = api.post("/api/v1/automations", json!({"name": "BB bot", "trigger": {"kind": "bitbucket", "provider": "bb"}})).await;
    assert_eq!(s, 201, "{a}");
    let (id, secret, hook_url) = (a["id"].as_str().unwrap(), a["secret"].as_str().unwrap(), a["hook_url"].as_str().unwrap());
    llm.push([
        Reply::tool("terminal", json!({"command": "git rev-parse --abbrev-ref HEAD"})),
        Reply::tool("halyard__comment_on_pull_request", json!({"number": pr, "body": "Reviewed: looks good."})),
        Reply::finish("Reviewed it."),
    ]);
    let event = |text: &str, account: &str, comment_id: u64| {
        json!({"actor": {"display_name": "Sam", "nickname": "sam", "account_id": account, "type": "user"},
               "repository": {"full_name": "ws/app", "name": "app", "type": "repository"},
               "pullrequest": {"id": pr, "title": "Feature", "description": "Adds the feature.", "source": {"branch": {"name": "feature"}},
                               "destination": {"branch": {"name": "main"}}, "links": {"html": {"href": "https://bitbucket.org/ws/app/pull-requests/1"}}},
               "comment": {"id": comment_id, "content": {"raw": text, "markup": "markdown"}}})
        .to_string()
    };
    let headers = |body: &str, delivery: &str| {
        vec![
            ("x-hub-signature".to_owned(), format!("sha256={}", hex_hmac(secret, body))),
            ("x-request-uuid".to_owned(), delivery.to_owned()),
            ("x-event-key".to_owned(), "pullrequest:comment_created".to_owned()),
        ]
    };
    let body = event("@halyard please review this", "557058:sam", 91);
    let (s, answer) = hook(hook_url, &headers(&body, "bb-1"), &body).await;
    assert_eq!((s, answer["status"].as_str()), (202, Some("accepted")), "{answer}");
    let run = runs(&api, id, 1).await.remove(0);
    assert_eq!((run["outcome"].as_str(), run["source"].as_str()), (Some("started"), Some("bitbucket")), "{run}");
    let conv = run["conversation_id"].as_str().unwrap().to_owned();
    let events = api.wait_events(&conv, "the run to finish", halyard_tests::events::ended).await;
    let head =
        events.iter().find(|e| e["kind"] == "observation" && e["tool"] == "terminal").unwrap()["content"].as_str().unwrap().to_owned();
    assert!(head.contains("feature"), "the conversation works on the pull request's branch: {head}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while bitbucket.comments().len() < 3 {
        assert!(Instant::now() < deadline, "no summary: {:?}", bitbucket.comments());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let comments = bitbucket.comments();
    // "On it" under the comment that asked, the agent's own comment through the MCP tool, then
    // the summary under the comment.
    assert!(comments.iter().all(|(n, _)| *n == pr), "{comments:?}");
    let texts: Vec<&str> = comments.iter().map(|(_, c)| c["content"]["raw"].as_str().unwrap()).collect();
    assert!(texts[0].starts_with("On it") && comments[0].1["parent"]["id"] == 91, "{comments:?}");
    assert!(texts.contains(&"Reviewed: looks good."), "{texts:?}");
    assert!(texts[2].contains("Reviewed it.") && comments[2].1["parent"]["id"] == 91, "{comments:?}");
    // Someone without write access starts nothing.
    let body = event("@halyard merge it", "557058:eve", 92);
    assert_eq!(hook(hook_url, &headers(&body, "bb-2"), &body).await.0, 202);
    let latest = runs(&api, id, 2).await.remove(0);
    assert!(latest["reason"].as_str().unwrap().contains("lacks write access to ws/app"), "{latest}");
    assert!(h.service_permission_violations().is_empty(), "{:?}", h.service_permission_violations());
}

#[tokio::test]
async fn a_bitbucket_data_center_provider_and_a_pull_request_comment_that_mentions_halyard() {
    init();
    const TOKEN: &str = "BBDC-NjY4MzQ0MzI1OTE2Ok3x";
    let repos = tempfile::tempdir().unwrap();
    halyard_tests::bare_repository(repos.path(), "scm/APP/site.git", ("README.md", "hello\n"));
    halyard_tests::git(&repos.path().join("scm/APP/site.git"), &["branch", "feature", "main"]);
    let server = halyard_tests::GitServer::start(repos.path().to_path_buf(), "halyard-bot", TOKEN).await;
    let git_host = server.base.trim_start_matches("http://").to_owned();
    let dc = halyard_tests::BitbucketDcServer::start("halyard-bot", TOKEN, "APP/site", repos.path().to_path_buf(), &git_host).await;
    dc.grant_write("sam");
    let pr = dc.open_pull("feature");
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_GIT_API_ALLOW", "loopback"));
    let api = h.api(ALICE);
    // A `bitbucket` provider whose API is a Data Center's REST 1.0.
    let provider = json!({"kind": "bitbucket", "host": git_host, "username": "halyard-bot", "api_url": dc.api_url, "token": TOKEN});
    let (s, p) = api.call(reqwest::Method::PUT, "/api/v1/git-providers/dc", Some(provider)).await;
    assert_eq!(s, 201, "{p}");
    let (s, listed) = api.get("/api/v1/repositories?provider=dc").await;
    assert_eq!(s, 200, "{listed}");
    let repo = &listed["items"][0];
    assert_eq!((repo["full_name"].as_str(), repo["default_branch"].as_str()), (Some("APP/site"), Some("main")), "{listed}");
    assert_eq!(repo["clone_url"], format!("http://{git_host}/scm/APP/site.git"), "the user name is not in the clone URL: {listed}");
    let (s, branches) = api.get("/api/v1/repositories/branches?provider=dc&repository=APP/site").await;
    assert!(s == 200 && branches["default_branch"] == "main" && branches.to_string().contains("\"feature\""), "{branches}");

    let (s, a) = api.post("/api/v1/automations", json!({"name": "DC bot", "trigger": {"kind": "bitbucket", "provider": "dc"}})).await;
    assert_eq!(s, 201, "{a}");
    let (id, secret, hook_url) = (a["id"].as_str().unwrap(), a["secret"].as_str().unwrap(), a["hook_url"].as_str().unwrap());
    llm.push([
        Reply::tool(
            "terminal",
            json!({"command": "git rev-parse --abbrev-ref HEAD && git push -q origin HEAD:refs/heads/reviewed && echo pushed"}),
        ),
        Reply::tool("halyard__comment_on_pull_request", json!({"number": pr, "body": "Reviewed: looks good."})),
        Reply::tool("halyard__create_pull_request", json!({"title": "Follow-up", "head": "reviewed", "base": "main"})),
        Reply::finish("Reviewed it."),
    ]);
    // Data Center's `pr:comment:added`, as it sends it.
    let event = |text: &str, user: &str, comment_id: u64| {
        let repository =
            json!({"slug": "site", "id": 84, "name": "site", "scmId": "git", "project": {"key": "APP", "id": 3, "name": "App"}});
        json!({"eventKey": "pr:comment:added", "date": "2026-11-27T03:00:00+0000",
               "actor": {"name": user, "emailAddress": format!("{user}@acme.example"), "id": 7, "displayName": user, "active": true, "slug": user, "type": "NORMAL"},
               "pullRequest": {"id": pr, "version": 1, "title": "Feature", "description": "Adds the feature.", "state": "OPEN", "open": true,
                               "fromRef": {"id": "refs/heads/feature", "displayId": "feature", "repository": repository},
                               "toRef": {"id": "refs/heads/main", "displayId": "main", "repository": repository},
                               "links": {"self": [{"href": format!("https://git.acme.example/projects/APP/repos/site/pull-requests/{pr}")}]}},
               "comment": {"properties": {"repositoryId": 84}, "id": comment_id, "version": 0, "text": text, "comments": [], "tasks": []}})
        .to_string()
    };
    let headers = |body: &str, delivery: &str| {
        vec![
            ("x-hub-signature".to_owned(), format!("sha256={}", hex_hmac(secret, body))),
            ("x-request-id".to_owned(), delivery.to_owned()),
            ("x-event-key".to_owned(), "pr:comment:added".to_owned()),
        ]
    };
    let body = event("@halyard please review this", "sam", 62);
    let (s, answer) = hook(hook_url, &headers(&body, "dc-1"), &body).await;
    assert_eq!((s, answer["delivery_id"].as_str()), (202, Some("dc-1")), "{answer}");
    let run = runs(&api, id, 1).await.remove(0);
    assert_eq!((run["outcome"].as_str(), run["source"].as_str()), (Some("started"), Some("bitbucket")), "{run}");
    let conv = run["conversation_id"].as_str().unwrap().to_owned();
    let events = api.wait_events(&conv, "the run to finish", halyard_tests::events::ended).await;
    let head =
        events.iter().find(|e| e["kind"] == "observation" && e["tool"] == "terminal").unwrap()["content"].as_str().unwrap().to_owned();
    assert!(head.contains("feature") && head.contains("pushed"), "cloned from /scm/ on the pull request's branch and pushed: {head}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while dc.comments().len() < 3 {
        assert!(Instant::now() < deadline, "no summary: {:?}", dc.comments());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // "On it" under the comment that asked, the agent's comment and pull request through the MCP
    // tools, then the summary under the comment.
    let comments = dc.comments();
    assert!(comments.iter().all(|(n, _)| *n == pr), "{comments:?}");
    let texts: Vec<&str> = comments.iter().map(|(_, c)| c["text"].as_str().unwrap()).collect();
    assert!(texts[0].starts_with("On it") && comments[0].1["parent"]["id"] == 62, "{comments:?}");
    assert!(texts.contains(&"Reviewed: looks good."), "{texts:?}");
    assert!(texts[2].contains("Reviewed it.") && comments[2].1["parent"]["id"] == 62, "{comments:?}");
    let pulls = dc.pulls();
    assert_eq!((pulls.len(), &pulls[1]["fromRef"]["id"]), (2, &json!("refs/heads/reviewed")), "{pulls:?}");
    // Someone Data Center does not let write starts nothing.
    let body = event("@halyard merge it", "eve", 63);
    assert_eq!(hook(hook_url, &headers(&body, "dc-2"), &body).await.0, 202);
    let latest = runs(&api, id, 2).await.remove(0);
    assert!(latest["reason"].as_str().unwrap().contains("lacks write access to APP/site"), "{latest}");
    assert!(h.service_permission_violations().is_empty(), "{:?}", h.service_permission_violations());
}

#[tokio::test]
async fn azure_devops_repositories_and_comments_on_pull_requests_and_work_items() {
    init();
    const PAT: &str = "azdo-pat-4f1e9";
    let repos = tempfile::tempdir().unwrap();
    halyard_tests::bare_repository(repos.path(), "acme/web/_git/site", ("README.md", "site\n"));
    let bare = repos.path().join("acme/web/_git/site");
    halyard_tests::git(&bare, &["branch", "ci", "main"]);
    let server = halyard_tests::GitServer::start(repos.path().to_path_buf(), "pat", PAT).await;
    let azure = halyard_tests::AzureServer::start(PAT, "acme", bare).await;
    azure.add_identity("u-1", "dana@acme.example", true);
    azure.add_identity("u-3", "rae@acme.example", false);
    let pr = azure.open_pull("ci");
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_GIT_API_ALLOW", "loopback"));
    let api = h.api(ALICE);
    let provider =
        json!({"kind": "azure_devops", "host": server.base.trim_start_matches("http://"), "api_url": azure.org_url, "token": PAT});
    let (s, p) = api.call(reqwest::Method::PUT, "/api/v1/git-providers/az", Some(provider)).await;
    assert_eq!(s, 201, "{p}");
    let (s, listed) = api.get("/api/v1/repositories?provider=az").await;
    assert!(s == 200 && listed["items"][0]["full_name"] == "acme/web/site", "{listed}");
    let (s, branches) = api.get("/api/v1/repositories/branches?provider=az&repository=acme/web/site").await;
    assert!(s == 200 && branches["default_branch"] == "main" && branches.to_string().contains("\"ci\""), "{branches}");

    let body = json!({"name": "AzDO bot", "trigger": {"kind": "azure_devops", "provider": "az"},
                      "repository": {"provider": "az", "full_name": "acme/web/site"}});
    let (s, a) = api.post("/api/v1/automations", body).await;
    assert_eq!(s, 201, "{a}");
    let (id, secret, hook_url) = (a["id"].as_str().unwrap(), a["secret"].as_str().unwrap(), a["hook_url"].as_str().unwrap());
    use base64::Engine;
    let auth = |password: &str| {
        vec![(
            "authorization".to_owned(),
            format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("halyard:{password}"))),
        )]
    };

    // A pull request comment: a conversation on its source branch; replies in its thread.
    llm.push([
        Reply::tool("terminal", json!({"command": "git rev-parse --abbrev-ref HEAD"})),
        Reply::tool("halyard__create_pull_request", json!({"title": "Follow-up", "head": "ci"})),
        Reply::finish("Fixed the build."),
    ]);
    let event = json!({"id": "9a1c-01", "eventType": "ms.vss-code.git-pullrequest-comment-event", "publisherId": "tfs",
        "resource": {
            "comment": {"id": 2, "content": "@halyard the build is red", "author": {"displayName": "Dana", "id": "u-1"},
                        "_links": {"threads": {"href": format!("{}/_apis/git/repositories/r-1/pullRequests/{pr}/threads/77", azure.org_url)}}},
            "pullRequest": {"pullRequestId": pr, "title": "CI", "description": "Make CI green", "sourceRefName": "refs/heads/ci",
                            "repository": {"id": "r-1", "name": "site", "url": format!("{}/_apis/git/repositories/r-1", azure.org_url),
                                           "webUrl": format!("{}/web/_git/site", azure.org_url), "project": {"name": "web"}}}},
        "resourceContainers": {"account": {"baseUrl": format!("{}/", azure.org_url)}}})
    .to_string();
    assert_eq!(hook(hook_url, &auth("wrong"), &event).await.0, 401);
    let (s, answer) = hook(hook_url, &auth(secret), &event).await;
    assert_eq!((s, answer["delivery_id"].as_str()), (202, Some("9a1c-01")), "{answer}");
    let run = runs(&api, id, 1).await.remove(0);
    assert_eq!((run["outcome"].as_str(), run["source"].as_str()), (Some("started"), Some("azure_devops")), "{run}");
    let conv = run["conversation_id"].as_str().unwrap().to_owned();
    let events = api.wait_events(&conv, "the run to finish", halyard_tests::events::ended).await;
    let head =
        events.iter().find(|e| e["kind"] == "observation" && e["tool"] == "terminal").unwrap()["content"].as_str().unwrap().to_owned();
    assert!(head.contains("ci"), "{head}");
    assert_eq!(azure.pulls().len(), 2, "the agent's pull request through the MCP tool: {:?}", azure.pulls());
    assert_eq!(azure.pulls()[1]["sourceRefName"], "refs/heads/ci");
    let deadline = Instant::now() + Duration::from_secs(20);
    while azure.comments().len() < 2 {
        assert!(Instant::now() < deadline, "no summary: {:?}", azure.comments());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let comments = azure.comments();
    let thread = format!("/acme/web/_apis/git/repositories/site/pullRequests/{pr}/threads/77/comments");
    assert!(comments.iter().all(|(p, _)| *p == thread), "{comments:?}");
    assert!(comments[0].1["content"].as_str().unwrap().starts_with("On it"), "{comments:?}");
    assert!(comments[1].1["content"].as_str().unwrap().contains("Fixed the build."), "{comments:?}");

    // A work item comment: a conversation on the automation's repository; comments on the item.
    llm.push([Reply::finish("Looked into it.")]);
    let item = json!({"id": "9a1c-02", "eventType": "workitem.commented", "resource": {"id": 12, "rev": 3,
        "fields": {"System.Title": "Slow page", "System.History": "<div>@halyard&nbsp;why is it slow?</div>", "System.ChangedBy": "Dana <dana@acme.example>"},
        "_links": {"html": {"href": format!("{}/web/_workitems/edit/12", azure.org_url)}}}})
    .to_string();
    assert_eq!(hook(hook_url, &auth(secret), &item).await.0, 202);
    let run = runs(&api, id, 2).await.remove(0);
    assert_eq!(run["outcome"], "started", "{run}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while azure.comments().iter().filter(|(p, _)| p.contains("/workItems/12/comments")).count() < 2 {
        assert!(Instant::now() < deadline, "no work item summary: {:?}", azure.comments());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Someone who may only read the repository starts nothing, whoever they mention.
    let reader = event.replace("\"u-1\"", "\"u-3\"").replace("Dana", "Rae").replace("9a1c-01", "9a1c-03");
    assert_eq!(hook(hook_url, &auth(secret), &reader).await.0, 202);
    let run = runs(&api, id, 3).await.remove(0);
    assert_eq!(run["outcome"], "ignored", "{run}");
    assert!(run["reason"].as_str().unwrap().contains("sender Rae lacks write access to acme/web/site"), "{run}");
    assert!(h.service_permission_violations().is_empty(), "{:?}", h.service_permission_violations());
}

#[tokio::test]
async fn an_automation_runs_its_conversations_with_the_agent_it_names() {
    init();
    let llm = ScriptedLlm::start().await;
    // OpenCode's steps: a title when it asks for one (no tools), its command, then its answer.
    llm.fallback(|request| {
        if request["tools"].as_array().is_none_or(Vec::is_empty) {
            return Reply::Text("Night job".into());
        }
        if request["input"].to_string().contains("function_call_output") {
            return Reply::Text("OpenCode ran the job.".into());
        }
        Reply::tool("bash", json!({"command": "echo nightly > job.txt", "description": "Run the job"}))
    });
    let h = Halyard::start(
        HalyardOptions::new(&llm.base_url).set("HALYARD_LLM_PROVIDER", "openai-responses").set("HALYARD_LLM_MODEL", "gpt-4o"),
    );
    let api = h.api(ALICE);
    // An agent that is unknown, or cannot speak the profile's wire, is refused when saved.
    for (agent, code) in [("clippy", "unknown_agent"), ("claude-code", "agent_profile_mismatch")] {
        let body = json!({"name": "x", "trigger": {"kind": "webhook"}, "agent": agent});
        let (s, e) = api.post("/api/v1/automations", body).await;
        assert_eq!((s, e["error"]["code"].as_str()), (400, Some(code)), "{agent}: {e}");
    }
    let (s, a) = api.post("/api/v1/automations", json!({"name": "Nightly", "trigger": {"kind": "webhook"}, "agent": "opencode"})).await;
    assert_eq!((s, a["agent"].as_str()), (201, Some("opencode")), "{a}");
    let id = a["id"].as_str().unwrap().to_owned();
    let (s, e) = api.call(reqwest::Method::PATCH, &format!("/api/v1/automations/{id}"), Some(json!({"agent": "claude-code"}))).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("agent_profile_mismatch")), "{e}");

    let body = json!({"title": "nightly"}).to_string();
    let headers = signed(a["secret"].as_str().unwrap(), "msg_agent", now_s(), &body).await;
    let (s, answer) = hook(a["hook_url"].as_str().unwrap(), &headers, &body).await;
    assert_eq!(s, 202, "{answer}");
    let run = &runs(&api, &id, 1).await[0];
    assert_eq!(run["outcome"], "started", "{run}");
    let conv = run["conversation_id"].as_str().unwrap().to_owned();
    let c =
        api.wait_conversation(&conv, "the run's end", |c| c["execution_status"] == "finished" || c["execution_status"] == "error").await;
    assert_eq!((c["agent"].as_str(), c["execution_status"].as_str()), (Some("opencode"), Some("finished")), "{c}");
    let events = api.events(&conv).await;
    let answer = events.iter().rev().find(|e| e["kind"] == "agent_message").expect("the agent's answer");
    assert_eq!(answer["text"], "OpenCode ran the job.");
}

#[tokio::test]
async fn an_automation_with_a_template_runs_checked_work_and_comments_its_result_and_verdict() {
    init();
    const TOKEN: &str = "ghp_automation-token-templated";
    // The repository names its own checks: `fixed.txt` must exist when the agent finishes.
    let checks = (".halyard/checks.json", r#"{"verify": [{"command": "test -f fixed.txt"}], "max_verify_attempts": 2}"#);
    let GithubWorld { repos: _repos, github, llm, h: _h, api, _server } = github_world(TOKEN, "alice/widget", Some(checks), 9).await;
    // The template's message is the run's (over the event's fields); its schema types the result.
    let schema = json!({"type": "object", "properties": {"fixed": {"type": "boolean"}}, "required": ["fixed"]});
    let template = json!({"start": {"message": "Triage: {{comment}}"}, "result_schema": schema});
    assert_eq!(api.call(reqwest::Method::PUT, "/api/v1/templates/triage", Some(template)).await.0, 201);
    let (s, e) =
        api.post("/api/v1/automations", json!({"name": "T", "trigger": {"kind": "github", "provider": "work"}, "template": "nope"})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("unknown_template")), "{e}");
    let body = json!({"name": "Triage bot", "trigger": {"kind": "github", "provider": "work"}, "template": "triage"});
    let (s, a) = api.post("/api/v1/automations", body).await;
    assert_eq!((s, a["template"].as_str()), (201, Some("triage")), "{a}");
    let (id, secret, hook_url) = (a["id"].as_str().unwrap(), a["secret"].as_str().unwrap(), a["hook_url"].as_str().unwrap());

    // The agent finishes at once: the repository's check fails and sends it back; it makes the
    // file and finishes again, with its result.
    let finish = |fixed: bool| Reply::tool("finish", json!({"message": "Triaged.", "result": {"fixed": fixed}}));
    llm.push([finish(false), Reply::tool("terminal", json!({"command": "touch fixed.txt", "security_risk": "low"})), finish(true)]);
    let (body, signature) = github_request(secret, "issue_comment", "created", |p| {
        p["repository"]["full_name"] = "alice/widget".into();
        p["issue"]["number"] = 9.into();
        p["issue"]["pull_request"] = Value::Null;
        p["issue"]["html_url"] = "https://github.com/alice/widget/issues/9".into();
        p["comment"]["id"] = 9001.into();
        p["comment"]["body"] = "@halyard is the login page broken?".into();
        p["sender"]["login"] = "octo-writer".into();
    })
    .await;
    assert_eq!(hook(hook_url, &github_headers("issue_comment", "f1a1b2c3-0000-11ef-8000-000000000001", &signature), &body).await.0, 202);
    let run = runs(&api, id, 1).await.remove(0);
    let conv = run["conversation_id"].as_str().unwrap().to_owned();
    let events = api.wait_finished(&conv, 1).await;
    let asked = events.iter().find(|e| e["kind"] == "user_message").unwrap()["text"].as_str().unwrap().to_owned();
    assert!(asked.starts_with("Triage: ") && asked.contains("login page"), "{asked}");
    let checks: Vec<&Value> = events.iter().filter(|e| e["kind"] == "verification").collect();
    assert_eq!(checks.len(), 2, "{checks:?}");
    assert_eq!((checks[0]["passed"].as_bool(), checks[1]["passed"].as_bool()), (Some(false), Some(true)));
    assert_eq!(checks[0]["subject"], "test -f fixed.txt");
    // The issue hears the result and the verdict.
    let deadline = Instant::now() + Duration::from_secs(30);
    let summary = loop {
        let said = github.comments().iter().filter_map(|(_, _, b)| b["body"].as_str().map(str::to_owned)).find(|b| b.contains("Triaged."));
        if let Some(said) = said {
            break said;
        }
        assert!(Instant::now() < deadline, "no summary: {:?}", github.comments());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(summary.contains("Checks: passed (1 check, score 1.00)"), "{summary}");
    assert!(summary.contains("Result:\n```json\n{\n  \"fixed\": true\n}\n```"), "{summary}");
}

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Repository hooks (`.openhands/hooks.json`), as a user checks them: what they block, report
//! and let through once allowed, and that none of a file's commands (which run with the
//! conversation's secrets) runs before the owner allowed that file for that repository — a
//! declined file stays declined in its conversation, an allowed one is not asked about again on
//! the same repository until it changes (an agent that rewrites it is asked about again).

use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, finished, git, init};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";
const BOB: &str = "bob-secret-key";

/// Waits for the conversation to ask about its hooks file and wait; returns that question.
async fn asked(api: &halyard_tests::Api, conv: &str) -> Value {
    let waits = |ev: &[Value]| {
        let Some(at) = ev.iter().rposition(|e| e["kind"] == "hooks_consent_required") else { return false };
        ev[at..].iter().any(|e| e["kind"] == "execution_status" && e["status"] == "idle")
    };
    let events = api.wait_events(conv, "the hooks question", waits).await;
    events.into_iter().rev().find(|e| e["kind"] == "hooks_consent_required").unwrap()
}

async fn answer(api: &halyard_tests::Api, conv: &str, sha256: &Value, allow: bool) {
    let (s, body) = api.post(&format!("/api/v1/conversations/{conv}/hooks-consent"), json!({"sha256": sha256, "allow": allow})).await;
    assert_eq!(s, 202, "{body}");
}

/// A repository with OpenHands-style hooks: `rm -rf` refused, every tool logged, a message with
/// a forbidden word refused, no finishing without a summary, sessions counted, and one hook that
/// fails without blocking.
fn repository_with_hooks() -> tempfile::TempDir {
    let repo = tempfile::tempdir().unwrap();
    let p = repo.path();
    std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(p.join(".openhands")).unwrap();
    std::fs::write(
        p.join(".openhands/guard.sh"),
        "input=$(cat)\ncase \"$input\" in *'rm -rf'*) echo \"no rm -rf in $OPENHANDS_TOOL_NAME here\" >&2; exit 2;; esac\n",
    )
    .unwrap();
    let hooks = json!({"hooks": {
        "PreToolUse": [{"matcher": "terminal", "hooks": [{"type": "command", "command": "bash .openhands/guard.sh", "timeout": 10}]}],
        "post_tool_use": [{"matcher": "*", "hooks": [
            {"type": "command", "command": "cat >> hooks.log; echo >> hooks.log"},
            {"type": "command", "command": "echo flaky >&2; exit 1"}
        ]}],
        "user_prompt_submit": [{"hooks": [{"command": "if grep -q forbidden; then echo 'no forbidden words, please' >&2; exit 2; fi"}]}],
        "stop": [{"hooks": [{"command": "test -f summary.txt || { echo 'write summary.txt first' >&2; exit 2; }"}]}],
        "SessionStart": [{"hooks": [{"command": "echo \"$OPENHANDS_EVENT_TYPE $OPENHANDS_SESSION_ID\" >> sessions.log"}]}]
    }});
    std::fs::write(p.join(".openhands/hooks.json"), serde_json::to_string_pretty(&hooks).unwrap()).unwrap();
    git(p, &["init", "-q", "-b", "main"]);
    git(p, &["add", "."]);
    git(p, &["commit", "-qm", "hooks"]);
    repo
}

#[tokio::test]
async fn repository_hooks_block_report_and_let_through() {
    init();
    let repo = repository_with_hooks();
    let llm = ScriptedLlm::start().await;
    llm.push([
        Reply::tool("terminal", json!({"command": "rm -rf build", "security_risk": "low"})),
        Reply::tool("terminal", json!({"command": "echo safe", "security_risk": "low"})),
        Reply::finish("all clean"),
        Reply::tool("terminal", json!({"command": "echo done > summary.txt", "security_risk": "low"})),
        Reply::finish("all clean, with a summary"),
    ]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let alice = h.api(ALICE);
    let url = repo.path().to_string_lossy().to_string();
    let (conv, _) = alice.start_ready(json!({"message": "clean up", "repository": {"url": url}})).await;
    let question = asked(&alice, &conv).await;
    assert!(llm.requests().is_empty(), "the run waits before its first call");
    answer(&alice, &conv, &question["sha256"], true).await;
    let events = alice.wait_events(&conv, "the run", finished).await;
    let hooks: Vec<&Value> = events.iter().filter(|e| e["kind"] == "hook").collect();

    // The guard refused `rm -rf`: the action was rejected with its words, and the model read them.
    let guard: Vec<&&Value> = hooks.iter().filter(|e| e["event"] == "pre_tool_use").collect();
    assert_eq!(guard.len(), 3, "once per terminal command: {guard:?}");
    assert_eq!((guard[0]["exit_code"].as_i64(), guard[0]["blocked"].as_bool()), (Some(2), Some(true)), "{}", guard[0]);
    assert_eq!(guard[0]["tool"], "terminal");
    assert_eq!((guard[1]["exit_code"].as_i64(), guard[1]["blocked"].as_bool()), (Some(0), Some(false)));
    let rejected = events.iter().find(|e| e["kind"] == "action_rejected").expect("the rm -rf was rejected");
    assert!(rejected["reason"].as_str().unwrap().contains("no rm -rf in terminal here"), "{rejected}");
    assert!(!events.iter().any(|e| e["kind"] == "observation" && e["tool_call_id"] == rejected["tool_call_id"]), "it never ran");
    let second = llm.requests()[1]["messages"].to_string();
    assert!(second.contains("no rm -rf in terminal here"), "the model was told why: {second}");

    // The stop hook sent the agent back until summary.txt existed.
    let stops: Vec<&&Value> = hooks.iter().filter(|e| e["event"] == "stop").collect();
    assert_eq!(stops.iter().map(|e| e["blocked"].as_bool().unwrap()).collect::<Vec<_>>(), [true, false]);
    let refused_finish = events.iter().find(|e| e["kind"] == "observation" && e["tool"] == "finish" && e["is_error"] == true).unwrap();
    assert!(refused_finish["content"].as_str().unwrap().contains("write summary.txt first"), "{refused_finish}");
    assert_eq!(events.iter().filter(|e| e["kind"] == "agent_message").count(), 1, "one answer, after the summary");

    // Post-tool hooks saw each result on their input; a failing one is reported, not blocking.
    let (_, log) = alice.get(&format!("/api/v1/conversations/{conv}/files?path=hooks.log")).await;
    let log = log["content"].as_str().unwrap().to_owned();
    let inputs: Vec<Value> = log.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(inputs.len(), 2, "the two commands that ran: {log}");
    assert_eq!(inputs[0]["event_type"], "PostToolUse");
    assert_eq!(inputs[0]["tool_name"], "terminal");
    assert_eq!(inputs[0]["tool_input"]["command"], "echo safe");
    assert!(inputs[0]["tool_response"]["content"].as_str().unwrap().contains("safe"), "{}", inputs[0]);
    assert_eq!(inputs[0]["session_id"], conv.as_str());
    let flaky: Vec<&&Value> = hooks.iter().filter(|e| e["command"] == "echo flaky >&2; exit 1").collect();
    assert_eq!(flaky.len(), 2);
    assert!(flaky.iter().all(|e| e["exit_code"] == 1 && e["blocked"] == false && e["stderr"] == "flaky\n"));
    let (_, sessions) = alice.get(&format!("/api/v1/conversations/{conv}/files?path=sessions.log")).await;
    assert_eq!(sessions["content"].as_str().unwrap(), format!("SessionStart {conv}\n"));

    // A message the user_prompt_submit hook refuses never reaches the model.
    let asked = llm.requests().len();
    alice.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "say forbidden things"})).await;
    let events = alice
        .wait_events(&conv, "the refusal", |ev| {
            ev.iter().any(|e| e["kind"] == "execution_status" && e["reason"].as_str().is_some_and(|r| r.contains("refused the message")))
        })
        .await;
    let idle = events.iter().rev().find(|e| e["kind"] == "execution_status").unwrap();
    assert_eq!(idle["status"], "idle");
    assert!(idle["reason"].as_str().unwrap().contains("no forbidden words, please"), "{idle}");
    assert_eq!(llm.requests().len(), asked, "no LLM call for a refused message");
    llm.push([Reply::finish("hello to you")]);
    alice.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "hello"})).await;
    alice.wait_events(&conv, "the next run", |ev| ev.iter().filter(|e| e["kind"] == "agent_message").count() == 2).await;
    let seen = llm.requests().last().unwrap()["messages"].to_string();
    assert!(seen.contains("hello") && !seen.contains("say forbidden things"), "{seen}");
    let judged = alice.events(&conv).await;
    let prompts: Vec<&Value> = judged.iter().filter(|e| e["kind"] == "hook" && e["event"] == "user_prompt_submit").collect();
    // One judgment per message: "clean up", the refused one, "hello".
    assert_eq!(prompts.iter().map(|e| e["blocked"].as_bool().unwrap()).collect::<Vec<_>>(), [false, true, false]);
    assert_eq!(prompts[1]["message_seq"].as_u64(), judged.iter().find(|e| e["text"] == "say forbidden things").unwrap()["seq"].as_u64());
}

/// A repository whose hooks file hands the shell's secret to a file at every session's start.
fn repository_leaking_a_secret() -> (tempfile::TempDir, String, String) {
    let repo = tempfile::tempdir().unwrap();
    let p = repo.path();
    std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(p.join(".openhands")).unwrap();
    let text = json!({"session_start": [{"hooks": [{"command": "echo \"$DEPLOY_TOKEN\" > leaked.txt"}]}]}).to_string();
    std::fs::write(p.join(".openhands/hooks.json"), &text).unwrap();
    git(p, &["init", "-q", "-b", "main"]);
    git(p, &["add", "."]);
    git(p, &["commit", "-qm", "hooks"]);
    let out = std::process::Command::new("sha256sum").arg(p.join(".openhands/hooks.json")).output().unwrap();
    let sha = String::from_utf8(out.stdout).unwrap().split_whitespace().next().unwrap().to_owned();
    (repo, text, sha)
}

fn hooks_ran(events: &[Value]) -> usize {
    events.iter().filter(|e| e["kind"] == "hook").count()
}

#[tokio::test]
async fn a_repositorys_hooks_run_only_once_their_owner_allowed_them() {
    init();
    let (repo, text, sha) = repository_leaking_a_secret();
    let url = repo.path().to_string_lossy().to_string();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let (alice, bob) = (h.api(ALICE), h.api(BOB));
    let put = alice.call(reqwest::Method::PUT, "/api/v1/secrets/DEPLOY_TOKEN", Some(json!({"value": "s3cr3t-deploy"}))).await;
    assert_eq!(put.0, 201, "{}", put.1);
    let leaked = |conv: String| {
        let alice = &alice;
        async move { alice.get(&format!("/api/v1/conversations/{conv}/files?path=leaked.txt")).await.0 }
    };

    // A new repository's hooks file: the run stops before anything of it runs, and says why.
    let (first, _) = alice.start_ready(json!({"message": "hello", "repository": {"url": url}})).await;
    let question = asked(&alice, &first).await;
    assert_eq!((question["file"].as_str(), question["content"].as_str()), (Some(".openhands/hooks.json"), Some(text.as_str())));
    assert_eq!((question["sha256"].as_str(), question["repository"].as_str()), (Some(sha.as_str()), Some(url.as_str())));
    let events = alice.events(&first).await;
    let status = events.iter().rev().find(|e| e["kind"] == "execution_status").unwrap();
    assert_eq!(status["status"], "idle");
    assert!(status["reason"].as_str().unwrap().contains("hooks-consent"), "the status says what to do: {status}");
    assert_eq!(hooks_ran(&events), 0);
    assert!(llm.requests().is_empty(), "no LLM call before the answer");
    assert_eq!(leaked(first.clone()).await, 404, "the secret was not handed to the hook");

    // Only the owner answers, and only about a SHA-256.
    let path = format!("/api/v1/conversations/{first}/hooks-consent");
    assert_eq!(bob.post(&path, json!({"sha256": sha, "allow": true})).await.0, 404);
    let (s, refused) = alice.post(&path, json!({"sha256": "abc", "allow": true})).await;
    assert_eq!((s, refused["error"]["code"].as_str()), (400, Some("invalid_field")), "{refused}");

    // Declined: this conversation goes on without them.
    llm.push([Reply::finish("hello without hooks")]);
    answer(&alice, &first, &question["sha256"], false).await;
    let events = alice.wait_events(&first, "the run", finished).await;
    assert!(events.iter().any(|e| e["kind"] == "hooks_consent" && e["allowed"] == false && e["source"] == "user"));
    assert_eq!(hooks_ran(&events), 0);
    assert_eq!(leaked(first.clone()).await, 404);
    assert_eq!(alice.get("/api/v1/hook-consents").await.1["items"], json!([]), "a refusal is not remembered elsewhere");

    // Another conversation on the repository asks again; allowed, the hook runs with the
    // secret, and the allowance is listed. The agent then rewrites the file: asked again.
    let rewrite = r#"printf '{"session_start":[{"hooks":[{"command":"echo again >> again.log"}]}]}' > .openhands/hooks.json"#;
    llm.push([Reply::tool("terminal", json!({"command": rewrite, "security_risk": "low"})), Reply::finish("rewritten")]);
    let (second, _) = alice.start_ready(json!({"message": "hello again", "repository": {"url": url}})).await;
    let question = asked(&alice, &second).await;
    assert_eq!(question["sha256"].as_str(), Some(sha.as_str()));
    answer(&alice, &second, &question["sha256"], true).await;
    let events = alice.wait_events(&second, "the run", finished).await;
    let ran: Vec<&Value> = events.iter().filter(|e| e["kind"] == "hook").collect();
    assert_eq!((ran.len(), ran[0]["event"].as_str(), ran[0]["exit_code"].as_i64()), (1, Some("session_start"), Some(0)), "{ran:?}");
    assert_eq!(leaked(second.clone()).await, 200, "the allowed hook ran with the shell's secrets");
    let (_, listed) = alice.get("/api/v1/hook-consents").await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(
        (listed["items"][0]["repository"].as_str(), listed["items"][0]["sha256"].as_str()),
        (Some(url.as_str()), Some(sha.as_str()))
    );
    llm.push([Reply::finish("still here")]);
    alice.post(&format!("/api/v1/conversations/{second}/messages"), json!({"text": "and now?"})).await;
    let rewritten = alice
        .wait_events(&second, "the question about the new file", |ev| {
            ev.iter().filter(|e| e["kind"] == "hooks_consent_required").count() == 2
        })
        .await;
    let again = rewritten.iter().rev().find(|e| e["kind"] == "hooks_consent_required").unwrap();
    assert_ne!(again["sha256"].as_str(), Some(sha.as_str()));
    assert!(again["content"].as_str().unwrap().contains("again.log"), "{again}");
    assert_eq!(hooks_ran(&rewritten), 1, "nothing of the rewritten file ran");

    // A third conversation on the repository, with the file as allowed: no question.
    llm.push([Reply::finish("third")]);
    let (third, _) = alice.start_ready(json!({"message": "third", "repository": {"url": url}})).await;
    let events = alice.wait_events(&third, "the run", finished).await;
    assert!(!events.iter().any(|e| e["kind"] == "hooks_consent_required"), "allowed already");
    assert_eq!(hooks_ran(&events), 1);

    // Taken back: listed no more (and gone once).
    assert_eq!(alice.call(reqwest::Method::DELETE, &format!("/api/v1/hook-consents/{sha}"), None).await.0, 204);
    assert_eq!(alice.get("/api/v1/hook-consents").await.1["items"], json!([]));
    assert_eq!(alice.call(reqwest::Method::DELETE, &format!("/api/v1/hook-consents/{sha}"), None).await.0, 404);
}

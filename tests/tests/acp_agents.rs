#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Third-party agents as a conversation's agent, run for real from their npm packages
//! (`infra/install-agents.sh`) in the conversation's sandbox, against the scripted LLM speaking
//! their provider's wire: Claude Code (claude-agent-acp) over the Agent Client Protocol.

use halyard_tests::harness::LLM_KEY;
use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";

fn last_status(events: &[Value]) -> Option<String> {
    events.iter().rev().find(|e| e["kind"] == "execution_status").and_then(|e| e["status"].as_str().map(str::to_owned))
}

/// The environments of the processes whose command line mentions `needle`.
fn environments_of(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(needle) {
            let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
            found.push(String::from_utf8_lossy(&environ).replace('\0', "\n"));
        }
    }
    found
}

/// Whether any file under `dir` holds `needle`.
fn any_file_holds(dir: &std::path::Path, needle: &[u8]) -> Option<std::path::PathBuf> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() && meta.len() < (64 << 20) {
                let bytes = std::fs::read(&path).unwrap_or_default();
                if bytes.windows(needle.len()).any(|w| w == needle) {
                    return Some(path);
                }
            }
        }
    }
    None
}

#[tokio::test]
async fn claude_code_edits_and_runs_a_command_after_confirm_without_ever_holding_the_key() {
    init();
    let llm = ScriptedLlm::start().await;
    let command = "echo hello from claude > hello.txt && cat hello.txt";
    // Claude Code asks with extended thinking on, and Anthropic then answers with a thinking
    // block first (and wants it back before the tool result).
    let thinking = |reply: Reply| Reply::Thinking("The user wants hello.txt.".into(), Box::new(reply));
    llm.push([
        thinking(Reply::tool("Bash", json!({"command": command, "description": "Write hello.txt"}))),
        thinking(Reply::Text("I wrote hello.txt.".into())),
    ]);
    // Whatever else Claude Code asks (a title, a summary) is answered plainly.
    llm.fallback(|_| Reply::Text("ok".into()));
    let h = Halyard::start(
        HalyardOptions::new(&llm.base_url)
            .set("HALYARD_LLM_PROVIDER", "anthropic")
            .set("HALYARD_LLM_MODEL", "claude-sonnet-4-5")
            .set("HALYARD_LLM_PRICE", "3,15,0.3"),
    );
    let api = h.api(ALICE);

    // The deployment says what it can run.
    let (s, agents) = api.get("/api/v1/agents").await;
    assert_eq!(s, 200, "{agents}");
    let claude = agents["items"].as_array().unwrap().iter().find(|a| a["name"] == "claude-code").unwrap().clone();
    assert_eq!((claude["available"].as_bool(), claude["profiles"].clone()), (Some(true), json!(["default"])), "{claude}");
    let (s, bad) = api.post("/api/v1/conversations", json!({"agent": "clippy", "message": "hi"})).await;
    assert_eq!((s, bad["error"]["code"].as_str()), (400, Some("unknown_agent")), "{bad}");

    // A repository, so Changes shows what the agent changed in it.
    let repo = tempfile::tempdir().unwrap();
    std::fs::set_permissions(repo.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(repo.path().join("README.md"), "# demo\n").unwrap();
    for args in [&["init", "-q", "-b", "main"][..], &["add", "."], &["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "init"]]
    {
        assert!(std::process::Command::new("git").args(args).current_dir(repo.path()).status().unwrap().success());
    }
    let url = repo.path().to_string_lossy().to_string();
    let start = json!({"agent": "claude-code", "message": "Write hello.txt", "confirmation_policy": "always", "repository": {"url": url}});
    let (conv, task) = api.start_ready(start).await;
    let sandbox = task["sandbox_id"].as_str().unwrap().to_owned();

    // The command waits for the user: an action the page shows with Confirm and Reject.
    let events =
        api.wait_events(&conv, "the permission request", |ev| last_status(ev).as_deref() == Some("waiting_for_confirmation")).await;
    let session = events.iter().find(|e| e["kind"] == "agent_session").expect("the ACP session is recorded");
    assert_eq!(session["agent"], "claude-code");
    let action = events.iter().find(|e| e["kind"] == "action").expect("the tool call is an action");
    assert_eq!((action["tool"].as_str(), action["arguments"]["kind"].as_str()), (Some("Bash"), Some("execute")), "{action}");
    assert_eq!(action["arguments"]["input"]["command"], command, "{action}");
    assert!(!h.workspace(&sandbox).join("hello.txt").exists(), "nothing ran before Confirm");

    // The sandbox never holds the real key: not in the agent's environment, not in a file.
    let envs = environments_of("claude-agent-acp");
    assert!(!envs.is_empty(), "the agent runs");
    for env in &envs {
        assert!(!env.contains(LLM_KEY), "the agent's environment holds the LLM key");
        assert!(env.contains("ANTHROPIC_BASE_URL=http://127.0.0.1:"), "its LLM calls go to the relay: {env}");
    }
    assert_eq!(any_file_holds(&h.workspace(&sandbox), LLM_KEY.as_bytes()), None);

    let (s, _) = api.post(&format!("/api/v1/conversations/{conv}/confirm"), json!({})).await;
    assert_eq!(s, 202);
    let events = api.wait_events(&conv, "the turn's end", |ev| last_status(ev).as_deref() == Some("finished")).await;
    assert_eq!(std::fs::read_to_string(h.workspace(&sandbox).join("hello.txt")).unwrap(), "hello from claude\n");
    let observation = events.iter().find(|e| e["kind"] == "observation").expect("the result is an observation");
    assert_eq!(observation["tool_call_id"], action["tool_call_id"]);
    assert!(observation["content"].as_str().unwrap().contains("hello from claude"), "{observation}");
    let answer = events.iter().rev().find(|e| e["kind"] == "agent_message").expect("the answer is a message");
    assert_eq!(answer["text"], "I wrote hello.txt.");

    // The edit is in Changes, and a checkpoint: going back to before the command takes it away,
    // going back to its result brings it again.
    let (s, changes) = api.get(&format!("/api/v1/conversations/{conv}/changes")).await;
    assert_eq!(s, 200, "{changes}");
    assert!(changes["files"].to_string().contains("hello.txt"), "{changes}");
    let file = h.workspace(&sandbox).join("hello.txt");
    for (at, there) in [(action["seq"].as_u64().unwrap(), false), (observation["seq"].as_u64().unwrap(), true)] {
        let (s, body) = api.post(&format!("/api/v1/conversations/{conv}/restore"), json!({"at_seq": at})).await;
        assert_eq!(s, 202, "{body}");
        let want = format!("workspace restored at {at}");
        api.wait_events(&conv, &want, |ev| ev.iter().any(|e| e["kind"] == "workspace_restored" && e["at_seq"] == at)).await;
        assert_eq!(file.exists(), there, "after restoring at {at}");
    }

    // Every LLM call went upstream with the real key and the profile's model, and is counted.
    let requests = llm.requests();
    assert!(requests.len() >= 2, "{}", requests.len());
    assert!(requests.iter().all(|r| r["model"] == "claude-sonnet-4-5"), "the relay sends the profile's model");
    assert!(llm.headers("x-api-key").iter().all(|k| k.as_deref() == Some(LLM_KEY)));
    let calls: Vec<&Value> = events.iter().filter(|e| e["kind"] == "llm_call").collect();
    assert_eq!(calls.len(), requests.len(), "one llm_call a request");
    assert!(calls.iter().all(|c| c["prompt_tokens"].as_u64().unwrap() > 0 && c["cost_usd"].as_f64().unwrap() > 0.0), "{calls:?}");
    let (_, c) = api.get(&format!("/api/v1/conversations/{conv}")).await;
    assert_eq!(c["metrics"]["llm_calls"].as_u64().unwrap() as usize, requests.len(), "{c}");
}

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Third-party agents as a conversation's agent, run for real from their npm packages
//! (`infra/install-agents.sh`) in the conversation's sandbox, against the scripted LLM speaking
//! their provider's wire: Claude Code (claude-agent-acp, Anthropic's), Codex and OpenCode (the
//! Responses API) and Gemini CLI (Gemini's), over the Agent Client Protocol.

use halyard_tests::events::last_status;
use halyard_tests::harness::LLM_KEY;
use halyard_tests::llm::flat_tool_names;
use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";

/// The processes working in `dir` whose command line mentions `needle`: their ids and
/// environments.
fn processes(needle: &str, dir: &std::path::Path) -> Vec<(String, String)> {
    // By the directory itself, not its path: a process sandbox sees its workspace at
    // /workspace, in a mount namespace of its own.
    let wanted = halyard_tests::procs::directory_id(dir);
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cwd = halyard_tests::procs::directory_id(&entry.path().join("cwd"));
        if String::from_utf8_lossy(&cmdline).contains(needle) && cwd.is_some() && cwd == wanted {
            let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
            found.push((entry.file_name().to_string_lossy().into_owned(), String::from_utf8_lossy(&environ).replace('\0', "\n")));
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

/// Options of a deployment whose default LLM speaks `wire` with `model`, priced.
fn speaking(llm: &ScriptedLlm, wire: &str, model: &str) -> HalyardOptions {
    let base = if wire == "gemini" { llm.gemini_base() } else { llm.base_url.clone() };
    HalyardOptions::new(&base).set("HALYARD_LLM_PROVIDER", wire).set("HALYARD_LLM_MODEL", model).set("HALYARD_LLM_PRICE", "3,15,0.3")
}

/// `reply` after a thinking block, as Anthropic answers with extended thinking on (Claude Code
/// asks so, and wants the block back before the tool result).
fn thinking(reply: Reply) -> Reply {
    Reply::Thinking("On it.".into(), Box::new(reply))
}

/// In the container of `sandbox`: `file` of the workspace holds `said`, and no process's
/// environment and no file the agent could write holds the LLM key (`relay_var` shows that the
/// agent's environment was read at all).
fn container_holds_no_key(h: &Halyard, sandbox: &str, workspace: &str, (file, said): (&str, &str), relay_var: &str) {
    let found = halyard_tests::docker::containers(&h.deployment(), Some(&format!("dev.halyard.sandbox={sandbox}")));
    assert_eq!(found.len(), 1, "{found:?}");
    let exec = |script: &str| {
        let out = std::process::Command::new("docker").args(["exec", &found[0], "sh", "-c", script]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(exec(&format!("cat {workspace}/{file}")), said);
    let environments = exec("for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done 2>/dev/null");
    assert!(environments.contains(&format!("{relay_var}=http://127.0.0.1:")), "the agent's environment is read");
    assert!(!environments.contains(LLM_KEY), "a process in the container holds the LLM key");
    let holders = exec(&format!("grep -rl '{LLM_KEY}' {workspace} /root /tmp /home 2>/dev/null"));
    assert_eq!(holders, "", "files in the container hold the LLM key");
}

/// A repository with one commit, to clone from its path.
fn git_repository() -> tempfile::TempDir {
    let repo = tempfile::tempdir().unwrap();
    std::fs::set_permissions(repo.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(repo.path().join("README.md"), "# demo\n").unwrap();
    for args in [&["init", "-q", "-b", "main"][..], &["add", "."], &["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "init"]]
    {
        assert!(std::process::Command::new("git").args(args).current_dir(repo.path()).status().unwrap().success());
    }
    repo
}

#[tokio::test]
async fn claude_code_edits_and_runs_a_command_after_confirm_without_ever_holding_the_key() {
    init();
    let llm = ScriptedLlm::start().await;
    let command = "echo hello from claude > hello.txt && cat hello.txt";
    llm.push([
        thinking(Reply::tool("Bash", json!({"command": command, "description": "Write hello.txt"}))),
        thinking(Reply::Text("I wrote hello.txt.".into())),
    ]);
    // Whatever else Claude Code asks (a title, a summary) is answered plainly.
    llm.fallback(|_| Reply::Text("ok".into()));
    let h = Halyard::start(speaking(&llm, "anthropic", "claude-sonnet-4-5"));
    let api = h.api(ALICE);

    // The deployment says what it can run.
    let (s, agents) = api.get("/api/v1/agents").await;
    assert_eq!(s, 200, "{agents}");
    let claude = agents["items"].as_array().unwrap().iter().find(|a| a["name"] == "claude-code").unwrap().clone();
    assert_eq!((claude["available"].as_bool(), claude["profiles"].clone()), (Some(true), json!(["default"])), "{claude}");
    let (s, bad) = api.post("/api/v1/conversations", json!({"agent": "clippy", "message": "hi"})).await;
    assert_eq!((s, bad["error"]["code"].as_str()), (400, Some("unknown_agent")), "{bad}");
    // Codex cannot speak Anthropic's wire, the deployment's default here: refused at the start, in words.
    let (s, bad) = api.post("/api/v1/conversations", json!({"agent": "codex", "message": "hi"})).await;
    assert_eq!((s, bad["error"]["code"].as_str()), (400, Some("agent_profile_mismatch")), "{bad}");
    assert!(bad["error"]["message"].as_str().unwrap().contains("`anthropic`"), "{bad}");

    // A repository, so Changes shows what the agent changed in it.
    let repo = git_repository();
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
    let envs = processes("claude", &h.workspace(&sandbox));
    assert!(!envs.is_empty(), "the agent runs");
    for (_, env) in &envs {
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
    assert_eq!(c["agent"], "claude-code", "{c}");
}

/// Once the agent's long command (`... s.txt ... sleep 60`) has started, interrupts the turn:
/// it ends `idle` at once, saying why, and the command is stopped.
async fn interrupt_the_long_job(api: &halyard_tests::Api, conv: &str, workspace: &std::path::Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !workspace.join("s.txt").exists() {
        assert!(std::time::Instant::now() < deadline, "the command never started");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // The interrupt reaches the agent as session/cancel: its command stops and the turn ends.
    let interrupted = std::time::Instant::now();
    let (s, _) = api.post(&format!("/api/v1/conversations/{conv}/interrupt"), json!({})).await;
    assert_eq!(s, 202);
    let events = api.wait_events(conv, "the interrupted turn", |ev| last_status(ev).as_deref() == Some("idle")).await;
    assert!(interrupted.elapsed() < std::time::Duration::from_secs(30), "the 60 s command was not stopped");
    let status = events.iter().rev().find(|e| e["kind"] == "execution_status").unwrap();
    assert_eq!(status["reason"], "interrupted by the user", "{status}");
    // (The agent ends its command as it answers the cancel: give it a moment.)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !processes("sleep 60", workspace).is_empty() {
        assert!(std::time::Instant::now() < deadline, "the command still runs 10 s after the interrupt");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn an_interrupt_cancels_claude_codes_turn_and_a_spent_budget_stops_it() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([thinking(Reply::tool("Bash", json!({"command": "echo started > s.txt && sleep 60", "description": "A long job"})))]);
    llm.fallback(move |_| thinking(Reply::Text("Stopped, as you asked.".into())));
    let h = Halyard::start(speaking(&llm, "anthropic", "claude-sonnet-4-5"));
    let api = h.api(ALICE);
    let (conv, task) = api.start_ready(json!({"agent": "claude-code", "message": "Run the long job"})).await;
    let workspace = h.workspace(task["sandbox_id"].as_str().unwrap());
    interrupt_the_long_job(&api, &conv, &workspace).await;

    // The same session goes on with the next message.
    let (s, _) = api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "Are you there?"})).await;
    assert_eq!(s, 202);
    let events = api.wait_events(&conv, "the next turn", |ev| last_status(ev).as_deref() == Some("finished")).await;
    assert_eq!(events.iter().filter(|e| e["kind"] == "agent_session").count(), 1, "one session throughout");
    let answer = events.iter().rev().find(|e| e["kind"] == "agent_message").unwrap_or_else(|| panic!("no answer: {events:?}"));
    assert_eq!(answer["text"], "Stopped, as you asked.");
    let prompt = llm.requests().last().unwrap().to_string();
    assert!(prompt.contains("Run the long job") && prompt.contains("Are you there?"), "the session kept its history");

    // A budget the first call spent: the agent's next call is refused and the run stops, in words.
    llm.push([thinking(Reply::tool("Bash", json!({"command": "echo one > one.txt", "description": "One"})))]);
    let start = json!({"agent": "claude-code", "message": "Do two things", "max_budget_usd": 0.000001});
    let (conv, _) = api.start_ready(start).await;
    let events = api.wait_events(&conv, "the budget's stop", |ev| last_status(ev).as_deref() == Some("error")).await;
    let error = events.iter().rev().find(|e| e["kind"] == "agent_error").unwrap();
    assert_eq!(error["code"], "budget_exceeded", "{error}");
    assert_eq!(events.iter().filter(|e| e["kind"] == "llm_call").count(), 1, "the refused call is no call");
}

#[tokio::test]
async fn a_runner_killed_mid_turn_leaves_claude_code_to_the_other_runner_with_the_same_process() {
    init();
    let llm = ScriptedLlm::start().await;
    let nats = halyard_tests::NatsServer::start();
    let service = |name: &str| {
        let options =
            speaking(&llm, "anthropic", "claude-sonnet-4-5").serve(&nats.url, &[name]).set("HALYARD_SECRET", "a-shared-deployment-secret");
        Halyard::start(options)
    };
    let sandbox = service("sandbox");
    let mut agents = [service("agent"), service("agent")];
    let _others = [service("conversations"), service("titles")];
    let gateway = service("gateway");
    let api = gateway.api(ALICE);

    // The second call hangs: the runner holding the run dies while the agent waits for it.
    llm.push([thinking(Reply::tool("Bash", json!({"command": "echo one >> trail.txt", "description": "Trail"}))), Reply::Hang]);
    let (conv, task) = api.start_ready(json!({"agent": "claude-code", "message": "Write the trail"})).await;
    let workspace = sandbox.workspace(task["sandbox_id"].as_str().unwrap());
    llm.wait_requests(2).await;
    let before: Vec<String> = processes("claude-agent-acp", &workspace).into_iter().map(|(pid, _)| pid).collect();
    assert_eq!(before.len(), 1, "one agent process");
    let holder = {
        let client = async_nats::connect(nats.url.as_str()).await.unwrap();
        let kv = async_nats::jetstream::new(client).get_key_value("halyard_agent_leases").await.unwrap();
        let value = kv.get(&conv).await.unwrap().expect("a runner holds the run");
        let node = String::from_utf8_lossy(&value).split(' ').next().unwrap_or_default().to_owned();
        agents.iter().position(|a| a.deployment() == node).expect("one of the two")
    };
    llm.push([thinking(Reply::Text("The trail is written.".into()))]);
    agents[holder].kill9();
    llm.release();

    // The agent asks again (its call failed with the runner); the other runner answers it and
    // records the end of the turn, from the same ACP process.
    let events = api.wait_events(&conv, "the turn's end", |ev| last_status(ev).as_deref() == Some("finished")).await;
    let answer = events.iter().rev().find(|e| e["kind"] == "agent_message").unwrap();
    assert_eq!(answer["text"], "The trail is written.");
    assert_eq!(events.iter().filter(|e| e["kind"] == "agent_session").count(), 1, "no second session");
    assert_eq!(events.iter().filter(|e| e["kind"] == "observation").count(), 1, "the command ran once");
    let after: Vec<String> = processes("claude-agent-acp", &workspace).into_iter().map(|(pid, _)| pid).collect();
    assert_eq!(after, before, "the same agent process finished the turn");
    assert_eq!(std::fs::read_to_string(workspace.join("trail.txt")).unwrap(), "one\n");
    halyard_tests::harness::assert_log_is_contiguous(&events);
}

#[tokio::test]
async fn claude_code_works_in_a_container_and_the_container_never_holds_the_key() {
    init();
    halyard_tests::docker::require_engine();
    let llm = ScriptedLlm::start().await;
    llm.push([
        thinking(Reply::tool("Bash", json!({"command": "echo from the container > c.txt && cat c.txt", "description": "Write c.txt"}))),
        thinking(Reply::Text("Done in the container.".into())),
    ]);
    llm.fallback(|_| Reply::Text("ok".into()));
    let h = Halyard::start(
        speaking(&llm, "anthropic", "claude-sonnet-4-5").set("HALYARD_SANDBOX", "docker").set("HALYARD_SANDBOX_POOL_SIZE", "0"),
    );
    let api = h.api(ALICE);
    let (conv, task) = api.start_ready(json!({"agent": "claude-code", "message": "Write c.txt"})).await;
    let events = api.wait_events(&conv, "the turn's end", |ev| last_status(ev).as_deref() == Some("finished")).await;
    let answer = events.iter().rev().find(|e| e["kind"] == "agent_message").unwrap();
    assert_eq!(answer["text"], "Done in the container.");
    let observation = events.iter().find(|e| e["kind"] == "observation").unwrap();
    assert!(observation["content"].as_str().unwrap().contains("from the container"), "{observation}");

    let (sandbox, workspace) = (task["sandbox_id"].as_str().unwrap(), events[0]["workspace"].as_str().unwrap());
    container_holds_no_key(&h, sandbox, workspace, ("c.txt", "from the container\n"), "ANTHROPIC_BASE_URL");
    assert!(llm.headers("x-api-key").iter().all(|k| k.as_deref() == Some(LLM_KEY)), "upstream it is there");
}

/// The Halyard agent's steps for `halyard acp`'s session: by the last user message, a command
/// and then the answer.
fn editor_script(request: &Value) -> Reply {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let last_user = messages.iter().rev().find(|m| m["role"] == "user").map(|m| m["content"].to_string()).unwrap_or_default();
    if messages.last().is_some_and(|m| m["role"] == "tool") {
        return Reply::finish(if last_user.contains("notes.md") { "notes.md is edited." } else { "done.txt is written." });
    }
    if last_user.contains("notes.md") {
        // The editor's unsaved text is what the workspace holds: the edit fails otherwise.
        let edit = json!({"command": "str_replace", "path": "notes.md", "old_str": "unsaved editor text", "new_str": "edited by halyard",
            "security_risk": "low"});
        return Reply::tool("file_editor", edit);
    }
    if last_user.contains("long job") {
        return Reply::tool("terminal", json!({"command": "sleep 60", "timeout": 120, "security_risk": "low"}));
    }
    if last_user.contains("done.txt") {
        return Reply::tool("terminal", json!({"command": "echo done > done.txt", "security_risk": "low"}));
    }
    Reply::Text("ok".into())
}

#[tokio::test]
async fn halyard_acp_serves_the_reference_acp_client_through_a_whole_session() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.fallback(editor_script);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/js/acp-client.mjs");
    let out = tokio::process::Command::new("node")
        .arg(script)
        .arg(halyard_tests::harness::halyard_bin())
        .env("HALYARD_URL", &h.http)
        .env("HALYARD_API_KEY", ALICE)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/js"))
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "the client failed: {}", String::from_utf8_lossy(&out.stderr));
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stdout)));

    assert_eq!(seen["init"]["agentInfo"]["name"], "halyard");
    assert_eq!(seen["init"]["agentCapabilities"]["loadSession"], true);
    let session = seen["sessionId"].as_str().unwrap();
    // The first prompt: its command asked permission, ran, and the answer came as chunks.
    assert_eq!(seen["done"]["stopReason"], "end_turn", "{seen}");
    let permissions = seen["permissions"].as_array().unwrap();
    assert_eq!((permissions[0]["kind"].as_str(), permissions[0]["title"].as_str()), (Some("execute"), Some("echo done > done.txt")));
    let updates = seen["updates"].as_array().unwrap();
    let kinds: Vec<&str> = updates.iter().filter_map(|u| u["sessionUpdate"].as_str()).collect();
    assert!(kinds.contains(&"tool_call") && kinds.contains(&"tool_call_update") && kinds.contains(&"agent_message_chunk"), "{kinds:?}");
    let answer: String =
        updates.iter().filter(|u| u["sessionUpdate"] == "agent_message_chunk").filter_map(|u| u["content"]["text"].as_str()).collect();
    assert!(answer.contains("done.txt is written."), "{answer}");
    let (_, conversation) = h.api(ALICE).get(&format!("/api/v1/conversations/{session}")).await;
    let sandbox = conversation["sandbox_id"].as_str().unwrap();
    assert_eq!(std::fs::read_to_string(h.workspace(sandbox).join("done.txt")).unwrap(), "done\n");
    // The second links a file the editor holds unsaved: read from the editor, edited in the
    // workspace, written back to the editor (once: its content is then the editor's).
    assert_eq!(seen["edited"]["stopReason"], "end_turn", "{seen}");
    let notes = format!("{}/js/notes.md", env!("CARGO_MANIFEST_DIR"));
    assert_eq!(seen["reads"], json!([notes]), "{seen}");
    let writes = seen["writes"].as_array().unwrap();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!((writes[0]["path"].as_str(), writes[0]["content"].as_str()), (Some(notes.as_str()), Some("edited by halyard\n")));
    assert!(!std::path::Path::new(&notes).exists(), "the editor's disk is the editor's to write");
    // The third, cancelled mid-command.
    assert_eq!(seen["cancelled"]["stopReason"], "cancelled", "{seen}");
    // A new connection loads the session by id: its history comes back as updates.
    let loaded = seen["loaded"].as_array().unwrap();
    let said: Vec<&str> =
        loaded.iter().filter(|u| u["sessionUpdate"] == "user_message_chunk").filter_map(|u| u["content"]["text"].as_str()).collect();
    assert_eq!(said.len(), 3, "{loaded:?}");
    assert_eq!((said[0], said[2]), ("Write done.txt", "Run the long job"), "{loaded:?}");
    assert!(
        said[1].starts_with("Edit notes.md") && said[1].contains("(see notes.md, in the workspace as the editor holds it)"),
        "{said:?}"
    );
    assert!(loaded.iter().any(|u| u["sessionUpdate"] == "tool_call" && u["title"] == "echo done > done.txt"));
}

/// OpenCode's steps, by what its request holds: its title requests (no tools) get a title, its
/// turn a command and then the answer.
fn opencode_script(request: &Value) -> Reply {
    if request["tools"].as_array().is_none_or(Vec::is_empty) {
        return Reply::Text("Writing a file".into());
    }
    if request["input"].to_string().contains("function_call_output") {
        return Reply::Text("OpenCode wrote oc.txt.".into());
    }
    Reply::tool("bash", json!({"command": "echo from opencode > oc.txt && cat oc.txt", "description": "Write oc.txt"}))
}

#[tokio::test]
async fn opencode_runs_a_command_on_the_responses_wire_without_holding_the_key() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.fallback(opencode_script);
    let h = Halyard::start(speaking(&llm, "openai-responses", "gpt-4o"));
    let api = h.api(ALICE);
    let (conv, task) = api.start_ready(json!({"agent": "opencode", "message": "Write oc.txt"})).await;
    let events = api.wait_events(&conv, "the turn's end", |ev| matches!(last_status(ev).as_deref(), Some("finished" | "error"))).await;
    assert_eq!(last_status(&events).as_deref(), Some("finished"), "{events:?}");
    let workspace = h.workspace(task["sandbox_id"].as_str().unwrap());
    assert_eq!(std::fs::read_to_string(workspace.join("oc.txt")).unwrap(), "from opencode\n");
    let action = events.iter().find(|e| e["kind"] == "action").expect("the command is an action");
    assert_eq!(action["arguments"]["kind"], "execute", "{action}");
    let observation = events.iter().find(|e| e["kind"] == "observation").expect("its result");
    assert!(observation["content"].as_str().unwrap().contains("from opencode"), "{observation}");
    let answer = events.iter().rev().find(|e| e["kind"] == "agent_message").expect("the answer");
    assert_eq!(answer["text"], "OpenCode wrote oc.txt.");
    // Upstream: the Responses API with the real key and the profile's model; every call counted.
    let requests = llm.requests();
    assert!(requests.iter().all(|r| r["model"] == "gpt-4o"), "the relay sends the profile's model");
    assert!(llm.auth_headers().iter().all(|a| a.as_deref() == Some(&format!("Bearer {LLM_KEY}"))));
    assert_eq!(events.iter().filter(|e| e["kind"] == "llm_call").count(), requests.len());
    for (_, env) in processes("opencode", &workspace) {
        assert!(!env.contains(LLM_KEY), "the agent's environment holds the LLM key");
    }
}

/// Codex's steps: its shell tool (whichever of its names the request offers, with the arguments
/// that one takes), then the answer.
fn codex_script(request: &Value) -> Reply {
    let tools = flat_tool_names(request);
    if request["input"].to_string().contains("function_call_output") || tools.is_empty() {
        return Reply::Text("Codex wrote cx.txt.".into());
    }
    let command = "echo from codex > cx.txt && cat cx.txt";
    match tools.iter().find(|t| matches!(t.as_str(), "exec_command" | "shell" | "shell_command")).map(String::as_str) {
        Some("exec_command") => Reply::tool("exec_command", json!({"cmd": command})),
        Some("shell_command") => Reply::tool("shell_command", json!({"command": command})),
        _ => Reply::tool("shell", json!({"command": ["bash", "-lc", command]})),
    }
}

#[tokio::test]
async fn codex_runs_a_command_on_the_responses_wire_without_holding_the_key() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.fallback(codex_script);
    let h = Halyard::start(speaking(&llm, "openai-responses", "gpt-5-codex"));
    let api = h.api(ALICE);
    let (conv, task) = api.start_ready(json!({"agent": "codex", "message": "Write cx.txt"})).await;
    let events = api.wait_events(&conv, "the turn's end", |ev| matches!(last_status(ev).as_deref(), Some("finished" | "error"))).await;
    assert_eq!(last_status(&events).as_deref(), Some("finished"), "{events:?}\n{:?}", llm.requests().first().map(|r| r["tools"].clone()));
    let workspace = h.workspace(task["sandbox_id"].as_str().unwrap());
    assert_eq!(std::fs::read_to_string(workspace.join("cx.txt")).unwrap(), "from codex\n");
    assert!(events.iter().any(|e| e["kind"] == "action" && e["arguments"]["kind"] == "execute"), "{events:?}");
    let answer = events.iter().rev().find(|e| e["kind"] == "agent_message").expect("the answer");
    assert_eq!(answer["text"], "Codex wrote cx.txt.");
    assert!(llm.requests().iter().all(|r| r["model"] == "gpt-5-codex"));
    assert!(llm.auth_headers().iter().all(|a| a.as_deref() == Some(&format!("Bearer {LLM_KEY}"))));
    for (_, env) in processes("codex", &workspace) {
        assert!(!env.contains(LLM_KEY), "the agent's environment holds the LLM key");
    }
}

#[tokio::test]
async fn claude_codes_file_write_is_an_edit_in_the_timeline_and_lands_in_the_workspace() {
    init();
    let llm = ScriptedLlm::start().await;
    // Its file tools: Claude Code's own, or the ones it routes through the client (`mcp__acp__`)
    // where the client offers to read and write files (Halyard does; claude-agent-acp 0.23 still
    // uses its own).
    llm.fallback(|request| {
        let tools = flat_tool_names(request);
        if tools.is_empty() {
            return Reply::Text("Notes".into());
        }
        if request["messages"].to_string().contains("tool_result") {
            return thinking(Reply::Text("The note is written.".into()));
        }
        let write = tools.iter().find(|t| t.as_str() == "mcp__acp__Write").cloned().unwrap_or_else(|| "Write".into());
        let path = request["system"]
            .to_string()
            .split("Primary working directory: ")
            .nth(1)
            .and_then(|s| s.split("\\n").next())
            .unwrap_or(".")
            .to_owned();
        thinking(Reply::tool(&write, json!({"file_path": format!("{path}/note.md"), "content": "# A note\nwritten through Halyard\n"})))
    });
    let h = Halyard::start(speaking(&llm, "anthropic", "claude-sonnet-4-5"));
    let api = h.api(ALICE);
    let (conv, task) = api.start_ready(json!({"agent": "claude-code", "message": "Write note.md"})).await;
    let events = api.wait_events(&conv, "the turn's end", |ev| matches!(last_status(ev).as_deref(), Some("finished" | "error"))).await;
    assert_eq!(last_status(&events).as_deref(), Some("finished"), "{events:?}");
    let workspace = h.workspace(task["sandbox_id"].as_str().unwrap());
    assert_eq!(std::fs::read_to_string(workspace.join("note.md")).unwrap(), "# A note\nwritten through Halyard\n");
    let action = events.iter().find(|e| e["kind"] == "action").expect("the write is an action");
    assert_eq!(action["arguments"]["kind"], "edit", "{action}");
    let observation = events.iter().find(|e| e["kind"] == "observation" && e["tool_call_id"] == action["tool_call_id"]);
    assert!(observation.is_some_and(|o| o["is_error"] == false), "{events:?}");
}

#[tokio::test]
async fn codex_and_opencode_work_in_containers_that_never_hold_the_key() {
    init();
    halyard_tests::docker::require_engine();
    let llm = ScriptedLlm::start().await;
    // Either agent, by the tools it offers (OpenCode's `bash`, Codex's shell).
    llm.fallback(|request| {
        let offers_bash = request["tools"].as_array().into_iter().flatten().any(|t| t["name"] == "bash");
        if offers_bash { opencode_script(request) } else { codex_script(request) }
    });
    let h =
        Halyard::start(speaking(&llm, "openai-responses", "gpt-4o").set("HALYARD_SANDBOX", "docker").set("HALYARD_SANDBOX_POOL_SIZE", "0"));
    let api = h.api(ALICE);
    for (agent, file, said) in [("codex", "cx.txt", "from codex\n"), ("opencode", "oc.txt", "from opencode\n")] {
        let (conv, task) = api.start_ready(json!({"agent": agent, "message": format!("Write {file}")})).await;
        let events = api.wait_events(&conv, "the turn's end", |ev| matches!(last_status(ev).as_deref(), Some("finished" | "error"))).await;
        assert_eq!(last_status(&events).as_deref(), Some("finished"), "{agent}: {events:?}");
        let (sandbox, workspace) = (task["sandbox_id"].as_str().unwrap(), events[0]["workspace"].as_str().unwrap());
        container_holds_no_key(&h, sandbox, workspace, (file, said), "HALYARD_LLM_BASE");
    }
    assert!(llm.auth_headers().iter().all(|a| a.as_deref() == Some(&format!("Bearer {LLM_KEY}"))), "upstream it is there");
}

/// An agent the deployment's administrator registered: OpenCode's launcher under a name of the
/// deployment's, its environment written with the run's placeholders.
fn registered_opencode() -> Value {
    let config = json!({
        "provider": {"openai": {"options": {"baseURL": "${HALYARD_LLM_BASE}/v1", "apiKey": "${HALYARD_LLM_TOKEN}"}}},
        "model": "openai/${HALYARD_LLM_MODEL}", "small_model": "openai/${HALYARD_LLM_MODEL}", "autoupdate": false, "share": "disabled",
    });
    json!({
        "title": "Team OpenCode",
        "command": "exec /opt/halyard-agents/bin/opencode-acp",
        "env": {"OPENCODE_CONFIG_CONTENT": config.to_string(), "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
                "TEAM_NOTE": "registered-by-root"},
        "wire": "openai-responses",
    })
}

#[tokio::test]
async fn an_agent_an_administrator_or_an_organization_registered_runs_like_the_installed_ones() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.fallback(opencode_script);
    let mut opts = speaking(&llm, "openai-responses", "gpt-4o").set("HALYARD_ADMINS", "root");
    opts.api_keys = "root:root-admin-key,alice:alice-secret-key,bob:bob-secret-key".into();
    let h = Halyard::start(opts);
    let (root, alice) = (h.api("root-admin-key"), h.api(ALICE));
    let put = |api: &halyard_tests::Api, path: &str, body: Value| {
        let (api, path) = (api.clone(), path.to_owned());
        async move { api.call(reqwest::Method::PUT, &path, Some(body)).await }
    };

    // Only administrators register the deployment's; not under a name of Halyard's own; a wire
    // Halyard speaks.
    let (s, e) = put(&alice, "/api/v1/agents/team-opencode", registered_opencode()).await;
    assert_eq!((s, e["error"]["code"].as_str()), (403, Some("admin_only")), "{e}");
    let (s, e) = put(&root, "/api/v1/agents/claude-code", registered_opencode()).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_field")), "{e}");
    let mut wrong = registered_opencode();
    wrong["wire"] = "carrier-pigeon".into();
    let (s, e) = put(&root, "/api/v1/agents/team-opencode", wrong).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_field")), "{e}");
    let (s, made) = put(&root, "/api/v1/agents/team-opencode", registered_opencode()).await;
    assert_eq!(s, 201, "{made}");
    assert_eq!(
        made["env"],
        json!(["OPENCODE_CONFIG_CONTENT", "OPENCODE_DISABLE_AUTOUPDATE", "OPENCODE_DISABLE_MODELS_FETCH", "TEAM_NOTE"])
    );
    // Listed for everyone, values of its environment for nobody.
    let (_, listed) = alice.get("/api/v1/agents").await;
    let shown = listed["items"].as_array().unwrap().iter().find(|a| a["name"] == "team-opencode").expect("listed").clone();
    assert_eq!(
        (shown["custom"].as_bool(), shown["available"].as_bool(), shown["title"].as_str()),
        (Some(true), Some(true), Some("Team OpenCode"))
    );
    assert!(!listed.to_string().contains("registered-by-root"), "{listed}");

    // A conversation has it: its process is started from the registration, its calls relayed.
    let (conv, task) = alice.start_ready(json!({"agent": "team-opencode", "message": "Write oc.txt"})).await;
    let events = alice.wait_events(&conv, "the turn's end", |ev| matches!(last_status(ev).as_deref(), Some("finished" | "error"))).await;
    assert_eq!(last_status(&events).as_deref(), Some("finished"), "{events:?}");
    let session = events.iter().find(|e| e["kind"] == "agent_session").expect("its session");
    assert_eq!(session["agent"], "team-opencode");
    let workspace = h.workspace(task["sandbox_id"].as_str().unwrap());
    assert_eq!(std::fs::read_to_string(workspace.join("oc.txt")).unwrap(), "from opencode\n");
    assert!(llm.requests().iter().all(|r| r["model"] == "gpt-4o"), "the placeholders named the profile's model");
    let ran = processes("opencode", &workspace);
    assert!(ran.iter().any(|(_, env)| env.contains("TEAM_NOTE=registered-by-root")), "its environment is the registration's");
    assert!(ran.iter().all(|(_, env)| !env.contains(LLM_KEY) && !env.contains("${HALYARD_LLM_TOKEN}")), "a token, not the key");

    // An organization's agent, for its conversations only.
    assert_eq!(alice.post("/api/v1/orgs", json!({"name": "acme"})).await.0, 201);
    let (s, made) = put(&alice, "/api/v1/orgs/acme/agents/reviewer", registered_opencode()).await;
    assert_eq!((s, made["name"].as_str()), (201, Some("@acme/reviewer")), "{made}");
    let (s, e) = alice.post("/api/v1/conversations", json!({"agent": "@acme/reviewer", "message": "review"})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("agent_not_in_org")), "{e}");
    let (_, bobs) = h.api("bob-secret-key").get("/api/v1/agents").await;
    assert!(!bobs.to_string().contains("@acme/reviewer"), "not a member: {bobs}");
    let (s, started) = alice.post("/api/v1/conversations", json!({"agent": "@acme/reviewer", "org": "acme", "message": "review"})).await;
    assert_eq!(s, 202, "{started}");

    // Removed: no new conversation has it.
    assert_eq!(root.call(reqwest::Method::DELETE, "/api/v1/agents/team-opencode", None).await.0, 204);
    let (s, e) = alice.post("/api/v1/conversations", json!({"agent": "team-opencode", "message": "again"})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("unknown_agent")), "{e}");
}

/// Gemini CLI's steps, by what its request holds: its checks (a JSON answer to a schema: who
/// speaks next) answered as asked, its turn a shell command and then the answer.
fn gemini_script(request: &Value) -> Reply {
    let config = &request["generationConfig"];
    if config["responseMimeType"] == "application/json" {
        let schema = config["responseJsonSchema"].to_string() + &config["responseSchema"].to_string();
        if schema.contains("next_speaker") {
            return Reply::Text(json!({"reasoning": "The answer is complete.", "next_speaker": "user"}).to_string());
        }
        return Reply::Text("{}".into());
    }
    if request["tools"].as_array().is_none_or(Vec::is_empty) {
        return Reply::Text("ok".into());
    }
    if request["contents"].to_string().contains("functionResponse") {
        return Reply::Text("Gemini wrote gm.txt.".into());
    }
    Reply::tool("run_shell_command", json!({"command": "echo from gemini > gm.txt && cat gm.txt", "description": "Write gm.txt"}))
}

#[tokio::test]
async fn gemini_cli_runs_a_command_after_confirm_on_geminis_wire_without_holding_the_key() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.fallback(gemini_script);
    let h = Halyard::start(speaking(&llm, "gemini", "gemini-2.5-pro"));
    let api = h.api(ALICE);
    let (s, agents) = api.get("/api/v1/agents").await;
    let gemini = agents["items"].as_array().unwrap().iter().find(|a| a["name"] == "gemini").cloned().unwrap_or_default();
    assert_eq!((s, gemini["available"].as_bool()), (200, Some(true)), "{agents}");
    // Claude Code cannot speak Gemini's wire: refused at the start, naming both.
    let (s, bad) = api.post("/api/v1/conversations", json!({"agent": "claude-code", "message": "hi"})).await;
    assert_eq!((s, bad["error"]["code"].as_str()), (400, Some("agent_profile_mismatch")), "{bad}");
    assert!(bad["error"]["message"].as_str().unwrap().contains("`gemini`"), "{bad}");

    let repo = git_repository();
    let repository = json!({"url": repo.path().to_string_lossy()});
    let start = json!({"agent": "gemini", "message": "Write gm.txt", "confirmation_policy": "always", "repository": repository});
    let (conv, task) = api.start_ready(start).await;
    let workspace = h.workspace(task["sandbox_id"].as_str().unwrap());
    let events = api
        .wait_events(&conv, "the permission request", |ev| {
            matches!(last_status(ev).as_deref(), Some("waiting_for_confirmation" | "error" | "finished"))
        })
        .await;
    assert_eq!(last_status(&events).as_deref(), Some("waiting_for_confirmation"), "{events:?}");
    let action = events.iter().find(|e| e["kind"] == "action").expect("the command is an action");
    assert_eq!(action["arguments"]["kind"], "execute", "{action}");
    assert!(!workspace.join("gm.txt").exists(), "nothing ran before Confirm");
    let envs = processes("gemini", &workspace);
    assert!(!envs.is_empty(), "the agent runs");
    for (_, env) in &envs {
        assert!(!env.contains(LLM_KEY), "the agent's environment holds the LLM key");
        assert!(env.contains("GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:"), "its LLM calls go to the relay: {env}");
    }
    assert_eq!(any_file_holds(&workspace, LLM_KEY.as_bytes()), None);

    let (s, _) = api.post(&format!("/api/v1/conversations/{conv}/confirm"), json!({})).await;
    assert_eq!(s, 202);
    let events = api.wait_events(&conv, "the turn's end", |ev| matches!(last_status(ev).as_deref(), Some("finished" | "error"))).await;
    assert_eq!(last_status(&events).as_deref(), Some("finished"), "{events:?}");
    assert_eq!(std::fs::read_to_string(workspace.join("gm.txt")).unwrap(), "from gemini\n");
    // Its result is an observation (Gemini CLI 0.61 shows a command's output to its model only,
    // not over ACP: the model's next request has it).
    let observation = events.iter().find(|e| e["kind"] == "observation" && e["tool_call_id"] == action["tool_call_id"]);
    assert!(observation.is_some_and(|o| o["is_error"] == false), "{events:?}");
    let told = llm.requests().iter().flat_map(|r| r["contents"].as_array().cloned().unwrap_or_default()).any(|c| {
        c["parts"].as_array().into_iter().flatten().any(|p| p["functionResponse"]["response"].to_string().contains("from gemini"))
    });
    assert!(told, "the command's output went back to the model as a function response");
    let answer = events.iter().rev().find(|e| e["kind"] == "agent_message").expect("the answer");
    assert_eq!(answer["text"], "Gemini wrote gm.txt.");
    let (s, changes) = api.get(&format!("/api/v1/conversations/{conv}/changes")).await;
    assert!(s == 200 && changes["files"].to_string().contains("gm.txt"), "{changes}");

    // Upstream: Gemini's API with the real key, the profile's model in the path; every model
    // call counted, with the tokens the server reported.
    let paths = llm.paths();
    assert!(!paths.is_empty() && paths.iter().all(|p| p.starts_with("/v1beta/models/gemini-2.5-pro:")), "{paths:?}");
    assert!(llm.headers("x-goog-api-key").iter().all(|k| k.as_deref() == Some(LLM_KEY)));
    let generated = paths.iter().filter(|p| !p.ends_with(":countTokens")).count();
    let calls: Vec<&Value> = events.iter().filter(|e| e["kind"] == "llm_call").collect();
    assert_eq!(calls.len(), generated, "one llm_call a model call: {paths:?}");
    assert!(calls.iter().all(|c| c["prompt_tokens"].as_u64().unwrap() > 0 && c["cost_usd"].as_f64().unwrap() > 0.0), "{calls:?}");
}

#[tokio::test]
async fn gemini_cli_works_in_a_container_that_never_holds_the_key() {
    init();
    halyard_tests::docker::require_engine();
    let llm = ScriptedLlm::start().await;
    llm.fallback(gemini_script);
    let h =
        Halyard::start(speaking(&llm, "gemini", "gemini-2.5-flash").set("HALYARD_SANDBOX", "docker").set("HALYARD_SANDBOX_POOL_SIZE", "0"));
    let api = h.api(ALICE);
    let (conv, task) = api.start_ready(json!({"agent": "gemini", "message": "Write gm.txt"})).await;
    let events = api.wait_events(&conv, "the turn's end", |ev| matches!(last_status(ev).as_deref(), Some("finished" | "error"))).await;
    assert_eq!(last_status(&events).as_deref(), Some("finished"), "{events:?}");
    let (sandbox, workspace) = (task["sandbox_id"].as_str().unwrap(), events[0]["workspace"].as_str().unwrap());
    container_holds_no_key(&h, sandbox, workspace, ("gm.txt", "from gemini\n"), "GOOGLE_GEMINI_BASE_URL");
    assert!(llm.headers("x-goog-api-key").iter().all(|k| k.as_deref() == Some(LLM_KEY)), "upstream it is there");
}

#[tokio::test]
async fn claude_code_calls_the_conversations_mcp_tools_through_halyard() {
    init();
    const TOKEN: &str = "notes-token-acp-41f";
    let notes = halyard_tests::python::PythonServer::start("mcp_notes.py", &[TOKEN]).await;
    let llm = ScriptedLlm::start().await;
    // The notes tool as Claude Code names the conversation's tools (Halyard's server `halyard`,
    // the user's server `notes`), then the answer.
    llm.fallback(|request| {
        let tools = flat_tool_names(request);
        let Some(add) = tools.iter().find(|t| t.ends_with("notes__add_note")) else { return Reply::Text("ok".into()) };
        if request["messages"].to_string().contains("tool_result") {
            return thinking(Reply::Text("The note is kept.".into()));
        }
        thinking(Reply::tool(add, json!({"text": "from claude"})))
    });
    let h = Halyard::start(speaking(&llm, "anthropic", "claude-sonnet-4-5").set("HALYARD_MCP_ALLOW", "loopback"));
    let api = h.api(ALICE);
    let (s, _) = api.call(reqwest::Method::PUT, "/api/v1/secrets/NOTES_TOKEN", Some(json!({"value": TOKEN}))).await;
    assert_eq!(s, 201);
    let server = json!({"transport": "http", "url": notes.mcp_url(), "headers": {"Authorization": "Bearer ${NOTES_TOKEN}"}});
    let (s, v) = api.call(reqwest::Method::PUT, "/api/v1/mcp-servers/notes", Some(server)).await;
    assert_eq!(s, 201, "{v}");

    let (conv, task) = api.start_ready(json!({"agent": "claude-code", "message": "Keep a note"})).await;
    let events = api.wait_events(&conv, "the turn's end", |ev| matches!(last_status(ev).as_deref(), Some("finished" | "error"))).await;
    assert_eq!(last_status(&events).as_deref(), Some("finished"), "{events:?}");
    // The tool is offered to the agent under the conversation's name for it, and its call is an
    // action whose result the server gave.
    let offered = llm.requests().iter().any(|r| r["tools"].to_string().contains("mcp__halyard__notes__add_note"));
    let names: Vec<Vec<String>> = llm.requests().iter().map(flat_tool_names).collect();
    assert!(offered, "Claude Code was offered the notes tool through Halyard's MCP server: {names:?} {events:?}");
    let action = events.iter().find(|e| e["kind"] == "action").expect("the tool call is an action");
    let observation = events.iter().find(|e| e["kind"] == "observation" && e["tool_call_id"] == action["tool_call_id"]);
    assert!(observation.is_some_and(|o| o["content"].to_string().contains("noted: from claude (1 kept)")), "{events:?}");
    let answer = events.iter().rev().find(|e| e["kind"] == "agent_message").expect("the answer");
    assert_eq!(answer["text"], "The note is kept.");
    // The server's address is nowhere in the sandbox: the agent knows Halyard's relay only.
    let workspace = h.workspace(task["sandbox_id"].as_str().unwrap());
    assert_eq!(any_file_holds(&workspace, notes.mcp_url().as_bytes()), None);
    for (_, env) in processes("claude", &workspace) {
        assert!(!env.contains(&notes.mcp_url()), "the agent's environment names the MCP server");
    }
}

#[tokio::test]
async fn an_interrupt_cancels_gemini_clis_turn_and_its_session_goes_on() {
    init();
    let llm = ScriptedLlm::start().await;
    // A long command first; after the interrupt, the next message gets an answer.
    llm.fallback(|request| {
        let contents = request["contents"].to_string();
        if request["generationConfig"]["responseMimeType"] == "application/json" {
            return gemini_script(request);
        }
        if contents.contains("Are you there?") {
            return Reply::Text("Stopped, as you asked.".into());
        }
        if !contents.contains("Run the long job") {
            return Reply::Text("Hello.".into());
        }
        if request["tools"].as_array().is_none_or(Vec::is_empty) || contents.contains("functionResponse") {
            return Reply::Text("ok".into());
        }
        Reply::tool("run_shell_command", json!({"command": "touch s.txt && sleep 60", "description": "The long job"}))
    });
    let h = Halyard::start(speaking(&llm, "gemini", "gemini-2.5-pro"));
    let api = h.api(ALICE);
    // (A first turn that ends: Gemini CLI keeps a session on disk once a turn of it has.)
    let (conv, task) = api.start_ready(json!({"agent": "gemini", "message": "Say hello"})).await;
    api.wait_events(&conv, "the first turn", |ev| last_status(ev).as_deref() == Some("finished")).await;
    let (s, _) = api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "Run the long job"})).await;
    assert_eq!(s, 202);
    let workspace = h.workspace(task["sandbox_id"].as_str().unwrap());
    interrupt_the_long_job(&api, &conv, &workspace).await;
    let (s, _) = api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "Are you there?"})).await;
    assert_eq!(s, 202);
    let events = api.wait_events(&conv, "the next turn", |ev| matches!(last_status(ev).as_deref(), Some("finished" | "error"))).await;
    assert_eq!(last_status(&events).as_deref(), Some("finished"), "{events:?}");
    // (Gemini CLI 0.61 does not always load its session again after the restart: in about half
    // the runs here it answered "No previous sessions found for this project" with the
    // session's file on disk, and the run opened a new session, saying so in the log. So: one
    // session, or a second one after a failed load, and the history kept when it loaded.)
    let sessions = events.iter().filter(|e| e["kind"] == "agent_session").count();
    let failed_loads = h.log().lines().filter(|l| l.contains("could not load its session")).count();
    assert_eq!(sessions, 1 + failed_loads.min(1), "a second session only after a failed load");
    let answer = events.iter().rev().find(|e| e["kind"] == "agent_message").unwrap_or_else(|| panic!("no answer: {events:?}"));
    assert_eq!(answer["text"], "Stopped, as you asked.");
    if failed_loads == 0 {
        let last = llm.requests().iter().rev().find(|r| r["contents"].to_string().contains("Are you there?")).cloned().unwrap();
        assert!(last["contents"].to_string().contains("Run the long job"), "the session kept its history");
    }
}

/// A custom agent built on ACP's reference SDK that runs its commands in the client's terminals
/// (`tests/js/terminal-agent.mjs`), registered as the deployment's.
fn terminal_agent() -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/js/terminal-agent.mjs");
    json!({"title": "Terminal agent", "command": format!("exec node {script}"), "env": {}, "wire": "openai"})
}

#[tokio::test]
async fn an_agents_terminals_are_halyards_shells_with_the_users_secrets_masked_and_stopped_by_an_interrupt() {
    init();
    let llm = ScriptedLlm::start().await;
    let mut opts = HalyardOptions::new(&llm.base_url).set("HALYARD_ADMINS", "root");
    opts.api_keys = "root:root-admin-key,alice:alice-secret-key".into();
    let h = Halyard::start(opts);
    let (root, alice) = (h.api("root-admin-key"), h.api(ALICE));
    let (s, made) = root.call(reqwest::Method::PUT, "/api/v1/agents/terminal-agent", Some(terminal_agent())).await;
    assert_eq!(s, 201, "{made}");
    const SECRET: &str = "tok-9f8e7d6c5b4a3921";
    let (s, _) = alice.call(reqwest::Method::PUT, "/api/v1/secrets/DEPLOY_TOKEN", Some(json!({"value": SECRET}))).await;
    assert_eq!(s, 201);

    // The command asks first, as every action does under the policy.
    let command = r#"echo "$AGENT_GREETING in $(pwd)" > greeting.txt; cat greeting.txt; echo "token=$DEPLOY_TOKEN""#;
    let start = json!({"agent": "terminal-agent", "message": format!("run: {command}"), "confirmation_policy": "always"});
    let (conv, task) = alice.start_ready(start).await;
    let workspace = h.workspace(task["sandbox_id"].as_str().unwrap());
    let events = alice.wait_events(&conv, "the permission", |ev| last_status(ev).as_deref() == Some("waiting_for_confirmation")).await;
    let action = events.iter().find(|e| e["kind"] == "action").expect("the tool call is an action");
    assert_eq!((action["arguments"]["kind"].as_str(), action["arguments"]["input"]["command"].as_str()), (Some("execute"), Some(command)));
    assert!(!workspace.join("greeting.txt").exists(), "nothing ran before Confirm");
    assert_eq!(alice.post(&format!("/api/v1/conversations/{conv}/confirm"), json!({})).await.0, 202);

    // It ran in the sandbox's shell, in the workspace, with the agent's variable and the user's
    // secrets; its output reached the agent and the timeline, the secret masked there.
    let events = alice.wait_events(&conv, "the turn's end", |ev| matches!(last_status(ev).as_deref(), Some("finished" | "error"))).await;
    assert_eq!(last_status(&events).as_deref(), Some("finished"), "{events:?}");
    // (The workspace as the sandbox sees it, as in a container.)
    let said = "hello from the agent in /workspace".to_owned();
    assert_eq!(std::fs::read_to_string(workspace.join("greeting.txt")).unwrap(), format!("{said}\n"));
    let observation = events.iter().find(|e| e["kind"] == "observation").expect("its result");
    let output = observation["content"].as_str().unwrap();
    assert!(output.contains(&said) && output.contains("exit code 0"), "the terminal's output is the observation: {output}");
    let answer = events.iter().rev().find(|e| e["kind"] == "agent_message").unwrap()["text"].as_str().unwrap().to_owned();
    assert!(answer.starts_with("exit 0: ") && answer.contains(&said), "terminal/output reached the agent: {answer}");
    assert!(!serde_json::to_string(&events).unwrap().contains(SECRET), "the secret is masked in every event");
    assert!(answer.contains("token=") && !answer.ends_with("token="), "the command had the secret: {answer}");

    // A long command, interrupted: the turn ends, the command stops, the terminal is released.
    let policy = json!({"policy": "never"});
    assert_eq!(alice.call(reqwest::Method::PUT, &format!("/api/v1/conversations/{conv}/confirmation-policy"), Some(policy)).await.0, 202);
    let long = "echo started > long.txt; sleep 60; echo finished >> long.txt";
    assert_eq!(alice.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": format!("run: {long}")})).await.0, 202);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !workspace.join("long.txt").exists() {
        assert!(std::time::Instant::now() < deadline, "the long command never started");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(alice.post(&format!("/api/v1/conversations/{conv}/interrupt"), json!({})).await.0, 202);
    let events = alice.wait_events(&conv, "the interrupted turn", |ev| last_status(ev).as_deref() == Some("idle")).await;
    let status = events.iter().rev().find(|e| e["kind"] == "execution_status").unwrap();
    assert_eq!(status["reason"], "interrupted by the user", "{status}");
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert!(processes("sleep 60", &workspace).is_empty(), "the terminal's command is stopped");
    assert_eq!(std::fs::read_to_string(workspace.join("long.txt")).unwrap(), "started\n");
}

#[tokio::test]
async fn a_subscription_login_handed_to_claude_code_replaces_the_profiles_key_and_never_enters_the_sandbox() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.fallback(|_| thinking(Reply::Text("Hello from the subscription.".into())));
    let mut opts = speaking(&llm, "anthropic", "claude-sonnet-4-5").set("HALYARD_ADMINS", "root");
    opts.api_keys = "root:root-admin-key,alice:alice-secret-key,bob:bob-secret-key".into();
    let h = Halyard::start(opts);
    let (alice, bob) = (h.api(ALICE), h.api("bob-secret-key"));
    let put = |api: &halyard_tests::Api, agent: &str, credential: &str| {
        let (api, path, body) = (api.clone(), format!("/api/v1/me/agent-logins/{agent}"), json!({"credential": credential}));
        async move { api.call(reqwest::Method::PUT, &path, Some(body)).await }
    };
    const TOKEN: &str = "sk-ant-oat01-subscription-token-of-alice-7f3k";

    // Only a kind whose login Halyard can relay takes one; a credential is one token.
    let (s, e) = put(&alice, "codex", TOKEN).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("login_not_supported")), "{e}");
    let (s, e) = put(&alice, "claude-code", "short").await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_field")), "{e}");
    let (s, made) = put(&alice, "claude-code", TOKEN).await;
    assert_eq!((s, made["agent"].as_str(), made["hint"].as_str()), (201, Some("claude-code"), Some("7f3k")), "{made}");
    let (_, listed) = alice.get("/api/v1/me/agent-logins").await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 1, "{listed}");
    assert!(!listed.to_string().contains(TOKEN) && !made.to_string().contains(TOKEN), "never answered again");
    let (_, agents) = alice.get("/api/v1/agents").await;
    let claude = agents["items"].as_array().unwrap().iter().find(|a| a["name"] == "claude-code").unwrap().clone();
    assert_eq!(claude["logged_in"], true, "{claude}");
    assert!(claude["login"].as_str().unwrap().contains("claude setup-token"), "{claude}");
    let (_, bobs) = bob.get("/api/v1/me/agent-logins").await;
    assert_eq!(bobs["items"], json!([]), "Alice's login is hers");

    // Alice's Claude Code calls carry her login upstream, not the profile's key.
    let (conv, task) = alice.start_ready(json!({"agent": "claude-code", "message": "Say hello"})).await;
    let events = alice.wait_events(&conv, "the turn's end", |ev| matches!(last_status(ev).as_deref(), Some("finished" | "error"))).await;
    assert_eq!(last_status(&events).as_deref(), Some("finished"), "{events:?}");
    let auth = llm.auth_headers();
    assert!(!auth.is_empty() && auth.iter().all(|a| a.as_deref() == Some(&format!("Bearer {TOKEN}"))), "{auth:?}");
    assert!(llm.headers("x-api-key").iter().all(Option::is_none), "no profile key beside the login");
    let betas = llm.headers("anthropic-beta");
    assert!(betas.iter().all(|b| b.as_deref().is_some_and(|b| b.split(',').any(|x| x == "oauth-2025-04-20"))), "{betas:?}");
    assert!(events.iter().any(|e| e["kind"] == "llm_call" && e["prompt_tokens"].as_u64() > Some(0)), "its calls are counted");
    let workspace = h.workspace(task["sandbox_id"].as_str().unwrap());
    let envs = processes("claude", &workspace);
    assert!(!envs.is_empty(), "the agent runs");
    assert!(envs.iter().all(|(_, env)| !env.contains(TOKEN) && !env.contains(LLM_KEY)), "the sandbox holds neither");
    assert_eq!(any_file_holds(&workspace, TOKEN.as_bytes()), None);

    // Taken back: the next conversation's calls carry the profile's key again.
    assert_eq!(alice.call(reqwest::Method::DELETE, "/api/v1/me/agent-logins/claude-code", None).await.0, 204);
    assert_eq!(alice.call(reqwest::Method::DELETE, "/api/v1/me/agent-logins/claude-code", None).await.0, 404);
    let before = llm.requests().len();
    let (conv, _) = alice.start_ready(json!({"agent": "claude-code", "message": "Say hello again"})).await;
    alice.wait_events(&conv, "the second turn's end", |ev| matches!(last_status(ev).as_deref(), Some("finished" | "error"))).await;
    let keys = llm.headers("x-api-key");
    assert!(keys.len() > before && keys[before..].iter().all(|k| k.as_deref() == Some(LLM_KEY)), "{keys:?}");

    // Handing over and taking back are audited, without the credential.
    let (_, trail) = h.api("root-admin-key").get("/api/v1/admin/audit?actor=alice&action=agent_login.").await;
    let actions: Vec<&str> = trail["items"].as_array().unwrap().iter().map(|r| r["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["agent_login.delete", "agent_login.put"], "{trail}");
    assert!(!trail.to_string().contains(TOKEN), "{trail}");
}

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! The command-line client, run as a user runs it: the real `halyard` binary against a real
//! `halyard up`, its exit codes, its output, and its errors in words.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use halyard_tests::events::last_status;
use halyard_tests::harness::halyard_bin;
use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";

/// Runs `halyard args...` against `url` with `key`, in a home of its own.
fn halyard(home: &std::path::Path, url: &str, key: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = Command::new(halyard_bin());
    cmd.args(args).env_clear().env("PATH", std::env::var("PATH").unwrap_or_default()).env("HOME", home).env("HALYARD_URL", url);
    if let Some(k) = key {
        cmd.env("HALYARD_API_KEY", k);
    }
    cmd.stdin(Stdio::null()).output().expect("run halyard")
}

/// [`halyard`] off the test's thread (a command that follows a run waits for it).
async fn send(home: &std::path::Path, url: &str, args: &[&str]) -> Output {
    let (home, url) = (home.to_owned(), url.to_owned());
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || halyard(&home, &url, Some(ALICE), &args.iter().map(String::as_str).collect::<Vec<_>>()))
        .await
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test]
async fn run_streams_a_conversation_to_exit_code_0_and_the_other_commands_read_it() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([
        Reply::tool("terminal", json!({"command": "echo hello > hello.txt && cat hello.txt", "security_risk": "low"})),
        Reply::tool(
            "file_editor",
            json!({"command": "str_replace", "path": "hello.txt", "old_str": "hello", "new_str": "goodbye", "security_risk": "low"}),
        ),
        Reply::finish("hello.txt says goodbye"),
    ]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let home = tempfile::tempdir().unwrap();
    let url = h.http.clone();

    let out = tokio::task::spawn_blocking({
        let (home, url) = (home.path().to_owned(), url.clone());
        move || halyard(&home, &url, Some(ALICE), &["run", "write hello.txt", "--title", "cli run"])
    })
    .await
    .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stderr.contains("READY"), "the start phases are shown: {stderr}");
    assert!(stdout.contains("$ echo hello > hello.txt && cat hello.txt\n  hello"), "the command and its output: {stdout}");
    assert!(stdout.contains("✎ str_replace hello.txt\n- hello\n+ goodbye"), "the edit as a diff: {stdout}");
    assert!(stdout.contains("agent › hello.txt says goodbye"), "{stdout}");
    assert!(!stdout.contains("\x1b["), "no colours when not a terminal");
    let conv = stderr.lines().find_map(|l| l.strip_prefix("conversation ")).unwrap().trim().to_owned();

    // `events --json`: the log, one JSON object a line, contiguous.
    let out = halyard(home.path(), &url, Some(ALICE), &["events", &conv, "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let events: Vec<Value> = text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(events.len() > 8);
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["seq"].as_u64(), Some(i as u64 + 1));
    }
    assert!(halyard_tests::events::finished(&events), "the run finished");
    let out = halyard(home.path(), &url, Some(ALICE), &["events", &conv, "--json", "--after-seq", "3"]);
    assert_eq!(text(&out.stdout).lines().next().map(|l| serde_json::from_str::<Value>(l).unwrap()["seq"].clone()), Some(json!(4)));

    // `ls` and `show`.
    let out = halyard(home.path(), &url, Some(ALICE), &["ls"]);
    let ls = text(&out.stdout);
    assert!(ls.lines().any(|l| l.starts_with(&conv) && l.contains("finished") && l.ends_with("cli run")), "{ls}");
    let out = halyard(home.path(), &url, Some(ALICE), &["show", &conv]);
    assert!(text(&out.stdout).contains("llm calls 3"), "{}", text(&out.stdout));

    // `chat`: a line is a message; the answer is shown as it is written (streamed a piece at a
    // time), once; end of input ends it.
    let answer = "It says goodbye, word by word: one two three four five six seven.";
    llm.push([Reply::Paced(std::time::Duration::from_millis(30), Box::new(Reply::Text(answer.into())))]);
    let mut child = Command::new(halyard_bin())
        .args(["chat", &conv])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("HALYARD_URL", &url)
        .env("HALYARD_API_KEY", ALICE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"what does it say?\n").unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output()).await.unwrap().unwrap();
    let chat = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{chat}\n{}", text(&out.stderr));
    assert!(chat.contains("you › what does it say?") && chat.contains(&format!("agent › {answer}\n")), "{chat}");
    assert_eq!(chat.matches("word by word").count(), 1, "the answer is shown once: {chat}");
    assert!(llm.pieces().len() > 5, "the answer was streamed in pieces");

    // A prefix names the conversation, as git names commits; `send` follows the run it starts.
    let short = &conv[..13];
    llm.push([Reply::Text("Still goodbye.".into())]);
    let out = send(home.path(), &url, &["send", short, "and now?"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("agent › Still goodbye."), "{}", text(&out.stdout));

    // Actions that wait for confirmation: `send` exits 2, `confirm` runs them, `reject` refuses
    // them with the reason, `interrupt` stops a command mid-way and the agent waits.
    let api = h.api(ALICE);
    let policy = json!({"policy": "always"});
    assert_eq!(api.call(reqwest::Method::PUT, &format!("/api/v1/conversations/{conv}/confirmation-policy"), Some(policy)).await.0, 202);
    llm.push([Reply::tool("terminal", json!({"command": "echo confirmed-run", "security_risk": "low"})), Reply::finish("ran it")]);
    let out = send(home.path(), &url, &["send", short, "run it"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let out = halyard(home.path(), &url, Some(ALICE), &["confirm", short]);
    assert_eq!(text(&out.stdout).trim(), format!("confirmed the actions of {conv}"), "{}", text(&out.stderr));
    let events = api.wait_finished(&conv, 2).await;
    assert!(events.iter().any(|e| e["kind"] == "observation" && e["content"].as_str().unwrap_or_default().contains("confirmed-run")));
    llm.push([Reply::tool("terminal", json!({"command": "echo refused-run", "security_risk": "low"})), Reply::finish("fine")]);
    assert_eq!(send(home.path(), &url, &["send", short, "run it again"]).await.status.code(), Some(2));
    let out = halyard(home.path(), &url, Some(ALICE), &["reject", short, "--reason", "not today"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let events = api.wait_finished(&conv, 3).await;
    assert!(events.iter().any(|e| e["kind"] == "action_rejected" && e.to_string().contains("not today")), "{}", Value::Array(events));
    let policy = json!({"policy": "never"});
    assert_eq!(api.call(reqwest::Method::PUT, &format!("/api/v1/conversations/{conv}/confirmation-policy"), Some(policy)).await.0, 202);
    llm.push([Reply::tool("terminal", json!({"command": "sleep 30; echo never-printed", "security_risk": "low"}))]);
    let out = halyard(home.path(), &url, Some(ALICE), &["send", short, "wait a while", "--detach"]);
    assert_eq!(text(&out.stdout).trim(), format!("sent to {conv}"), "{}", text(&out.stderr));
    api.wait_events(&conv, "the long command", |ev| ev.last().is_some_and(|e| e["kind"] == "action" && e.to_string().contains("sleep 30")))
        .await;
    let out = halyard(home.path(), &url, Some(ALICE), &["interrupt", short]);
    assert_eq!(text(&out.stdout).trim(), format!("interrupted {conv}"), "{}", text(&out.stderr));
    let events = api.wait_events(&conv, "the interrupted run", |ev| last_status(ev).as_deref() == Some("idle")).await;
    let last_output = events.iter().rev().find(|e| e["kind"] == "observation").map(|e| e["content"].to_string()).unwrap_or_default();
    assert!(!last_output.contains("never-printed"), "{last_output}");

    // A prefix two conversations share is refused in words; so is one nobody has.
    llm.push([Reply::finish("second")]);
    let (other, _) = api.start_ready(json!({"message": "a second one"})).await;
    let shared: String = conv.chars().zip(other.chars()).take_while(|(a, b)| a == b).map(|(a, _)| a).collect();
    let out = halyard(home.path(), &url, Some(ALICE), &["show", &shared[..shared.len().min(6)]]);
    assert!(out.status.code() == Some(1) && text(&out.stderr).contains("give more of the id"), "{}", text(&out.stderr));
    let out = halyard(home.path(), &url, Some(ALICE), &["show", "fffff"]);
    assert!(text(&out.stderr).contains("none of your conversations starts with `fffff`"), "{}", text(&out.stderr));

    // Client commands take only their own options, each described.
    let out = halyard(home.path(), &url, Some(ALICE), &["ls", "--help"]);
    let help = text(&out.stdout);
    assert!(help.contains("--url") && !help.contains("--http-addr") && !help.contains("--data-dir"), "{help}");
    let out = halyard(home.path(), &url, Some(ALICE), &["ls", "--http-addr", "127.0.0.1:1"]);
    assert_eq!(out.status.code(), Some(2), "a server option is refused, not ignored");

    // Exported: JSON lines to standard output, a Markdown transcript to a file.
    let out = halyard(home.path(), &url, Some(ALICE), &["export", short]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let lines: Vec<Value> = text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines, api.events(&conv).await);
    let file = home.path().join("transcript.md");
    let out = halyard(home.path(), &url, Some(ALICE), &["export", short, "--format", "md", "-o", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let md = std::fs::read_to_string(&file).unwrap();
    assert!(md.starts_with("# cli run\n") && md.contains("## User") && md.contains("what does it say?"), "{md}");
    assert!(text(&out.stderr).contains("transcript.md"), "{}", text(&out.stderr));

    // Pause, resume and delete by name.
    for (verb, said) in [("pause", "paused"), ("resume", "resumed"), ("rm", "deleted")] {
        let out = halyard(home.path(), &url, Some(ALICE), &[verb, short]);
        assert_eq!(out.status.code(), Some(0), "{verb}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout).trim(), format!("{said} {conv}"));
    }
}

#[tokio::test]
async fn errors_are_said_in_words_and_login_is_remembered() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::Status(500)]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_LLM_MAX_RETRIES", "0"));
    let home = tempfile::tempdir().unwrap();
    let url = h.http.clone();

    let out = halyard(home.path(), "http://127.0.0.1:9", Some(ALICE), &["ls"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("cannot reach Halyard at http://127.0.0.1:9"), "{}", text(&out.stderr));
    let out = halyard(home.path(), &url, Some("not-a-key-of-anyone"), &["ls"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("unauthorized (401"), "{}", text(&out.stderr));
    let out = halyard(home.path(), &url, None, &["ls"]);
    assert!(text(&out.stderr).contains("run `halyard login`"), "{}", text(&out.stderr));
    let out = halyard(home.path(), &url, Some(ALICE), &["show", "01900000-0000-7000-8000-000000000000"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("not_found (404"), "{}", text(&out.stderr));

    // A failing run exits non-zero, with the agent's error.
    let out = tokio::task::spawn_blocking({
        let (home, url) = (home.path().to_owned(), url.clone());
        move || halyard(&home, &url, Some(ALICE), &["run", "fail please", "--title", "failing"])
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("error (llm_server_error)"), "{}", text(&out.stdout));

    // Login checks the key, saves it privately, and later commands need nothing else.
    let out = halyard(home.path(), &url, None, &["login", "--url", &url, "--api-key", "bad-key-bad-key"]);
    assert_eq!(out.status.code(), Some(1));
    let out = halyard(home.path(), &url, None, &["login", "--url", &url, "--api-key", ALICE]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("as alice"), "{}", text(&out.stdout));
    let saved = home.path().join(".config/halyard/cli.json");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&saved).unwrap().permissions().mode() & 0o777, 0o600);
    let out = Command::new(halyard_bin())
        .arg("ls")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("failing"), "{}", text(&out.stdout));
    // The saved key is not sent to another gateway.
    let out = halyard(home.path(), "http://127.0.0.1:9", None, &["ls"]);
    assert!(text(&out.stderr).contains("no API key"), "{}", text(&out.stderr));
}

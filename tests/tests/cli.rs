#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! The command-line client, run as a user runs it: the real `halyard` binary against a real
//! `halyard up`, its exit codes, its output, and its errors in words.

use std::io::Write;
use std::process::{Command, Output, Stdio};

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
    assert!(events.iter().any(|e| e["kind"] == "execution_status" && e["status"] == "finished"));
    let out = halyard(home.path(), &url, Some(ALICE), &["events", &conv, "--json", "--after-seq", "3"]);
    assert_eq!(text(&out.stdout).lines().next().map(|l| serde_json::from_str::<Value>(l).unwrap()["seq"].clone()), Some(json!(4)));

    // `ls` and `show`.
    let out = halyard(home.path(), &url, Some(ALICE), &["ls"]);
    let ls = text(&out.stdout);
    assert!(ls.lines().any(|l| l.starts_with(&conv) && l.contains("finished") && l.ends_with("cli run")), "{ls}");
    let out = halyard(home.path(), &url, Some(ALICE), &["show", &conv]);
    assert!(text(&out.stdout).contains("llm calls 3"), "{}", text(&out.stdout));

    // `chat`: a line is a message; the answer is shown; end of input ends it.
    llm.push([Reply::Text("It says goodbye.".into())]);
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
    assert!(chat.contains("you › what does it say?") && chat.contains("agent › It says goodbye."), "{chat}");

    // Pause, resume and delete by name.
    for (verb, said) in [("pause", "paused"), ("resume", "resumed"), ("rm", "deleted")] {
        let out = halyard(home.path(), &url, Some(ALICE), &[verb, &conv]);
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

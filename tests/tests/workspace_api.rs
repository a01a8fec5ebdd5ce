#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! What a client shows of a conversation beyond its events: the workspace's changes as diffs,
//! its files, and the conversation list searched and filtered.

use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, git, init};
use serde_json::json;

const ALICE: &str = "alice-secret-key";
const BOB: &str = "bob-secret-key";

#[tokio::test]
async fn changes_and_files_show_the_workspace_as_the_agent_left_it() {
    init();
    let repo = tempfile::tempdir().unwrap();
    // Readable by every user: an isolated process sandbox runs under a uid of its own.
    std::fs::set_permissions(repo.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(repo.path().join("app.py"), "print('hello')\n").unwrap();
    git(repo.path(), &["init", "-q", "-b", "main"]);
    git(repo.path(), &["add", "."]);
    git(repo.path(), &["commit", "-qm", "first"]);

    let llm = ScriptedLlm::start().await;
    llm.push([
        Reply::tool(
            "file_editor",
            json!({"command": "str_replace", "path": "app.py", "old_str": "hello", "new_str": "goodbye", "security_risk": "low"}),
        ),
        Reply::tool("terminal", json!({"command": "mkdir -p docs && echo '# Notes' > docs/notes.md", "security_risk": "low"})),
        Reply::finish("changed"),
    ]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);
    let url = repo.path().to_string_lossy().to_string();
    let (conv, _) = api.start_ready(json!({"message": "change it", "title": "alpha repo", "repository": {"url": url}})).await;
    api.wait_conversation(&conv, "finish", |c| c["execution_status"] == "finished").await;

    let (s, changes) = api.get(&format!("/api/v1/conversations/{conv}/changes")).await;
    assert_eq!(s, 200, "{changes}");
    assert_eq!(changes["repository"], true);
    let files = changes["files"].as_array().unwrap();
    let got: Vec<(&str, &str)> = files.iter().map(|f| (f["path"].as_str().unwrap(), f["status"].as_str().unwrap())).collect();
    assert_eq!(got, [("app.py", "modified"), ("docs/notes.md", "untracked")]);
    let diff = files[0]["diff"].as_str().unwrap();
    assert!(diff.contains("-print('hello')") && diff.contains("+print('goodbye')"), "{diff}");
    assert!(files[1]["diff"].as_str().unwrap().contains("+# Notes"));

    // Files: the workspace, a directory, a file; a bad path in words.
    let (s, root) = api.get(&format!("/api/v1/conversations/{conv}/files")).await;
    assert_eq!(s, 200, "{root}");
    let names: Vec<&str> = root["entries"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert!(names.starts_with(&[".git", "docs"]) && names.contains(&"app.py"), "directories first: {names:?}");
    let (_, file) = api.get(&format!("/api/v1/conversations/{conv}/files?path=docs/notes.md")).await;
    assert_eq!((file["kind"].as_str(), file["content"].as_str()), (Some("file"), Some("# Notes\n")));
    let (s, err) = api.get(&format!("/api/v1/conversations/{conv}/files?path=no/such/file")).await;
    // A missing file is not found (a path out of the workspace is refused: see user_config.rs).
    assert_eq!((s, err["error"]["code"].as_str()), (404, Some("not_found")), "{err}");

    // Another user sees nothing; a paused sandbox is not woken for a look.
    let (s, _) = h.api(BOB).get(&format!("/api/v1/conversations/{conv}/changes")).await;
    assert_eq!(s, 404);
    api.post(&format!("/api/v1/conversations/{conv}/pause"), json!({})).await;
    api.wait_conversation(&conv, "a paused sandbox", |c| c["sandbox_status"] == "PAUSED").await;
    let (s, err) = api.get(&format!("/api/v1/conversations/{conv}/files")).await;
    assert_eq!((s, err["error"]["code"].as_str()), (409, Some("sandbox_not_running")), "{err}");

    // No repository: the editor's own record of what it changed.
    llm.push([
        Reply::tool("file_editor", json!({"command": "create", "path": "notes.txt", "file_text": "one\ntwo\n", "security_risk": "low"})),
        Reply::tool(
            "file_editor",
            json!({"command": "str_replace", "path": "notes.txt", "old_str": "two", "new_str": "three", "security_risk": "low"}),
        ),
        Reply::finish("noted"),
    ]);
    let (plain, _) = api.start_ready(json!({"message": "take notes", "title": "beta plain"})).await;
    api.wait_conversation(&plain, "finish", |c| c["execution_status"] == "finished").await;
    let (_, changes) = api.get(&format!("/api/v1/conversations/{plain}/changes")).await;
    assert_eq!(changes["repository"], false);
    assert_eq!(changes["files"][0]["path"], "notes.txt");
    assert_eq!(changes["files"][0]["status"], "added");
    assert!(changes["files"][0]["diff"].as_str().unwrap().contains("+one\n+three\n"), "{changes}");

    // The list: searched by title, filtered by status, counted.
    let (_, page) = api.get("/api/v1/conversations?q=ALPHA").await;
    assert_eq!(page["count"], 1);
    assert_eq!(page["items"][0]["id"], conv.as_str());
    let (_, page) = api.get("/api/v1/conversations?status=finished").await;
    assert_eq!((page["count"].as_u64(), page["items"][0]["id"].as_str()), (Some(1), Some(plain.as_str())));
    let (_, page) = api.get("/api/v1/conversations?status=READY&limit=1").await;
    assert_eq!((page["count"].as_u64(), page["items"].as_array().unwrap().len()), (Some(2), 1));
    assert!(page["next_cursor"].is_string());
    let (s, err) = api.get("/api/v1/conversations?status=sleeping").await;
    assert_eq!((s, err["error"]["code"].as_str()), (400, Some("invalid_query")));
}

/// A body of `len` bytes sent in 1 MiB pieces, with no length declared up front.
fn unsized_body(len: usize) -> reqwest::Body {
    let pieces = (0..len.div_ceil(1 << 20)).map(move |i| {
        let n = (len - i * (1 << 20)).min(1 << 20);
        Ok::<_, std::io::Error>(vec![b'x'; n])
    });
    reqwest::Body::wrap_stream(futures::stream::iter(pieces))
}

#[tokio::test]
async fn files_go_up_and_down_and_the_workspace_comes_as_an_archive() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([
        Reply::tool("terminal", json!({"command": "mkdir -p data && echo kept > data/old.txt && ln -s /etc out", "security_risk": "low"})),
        Reply::finish("ready"),
    ]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let alice = h.api(ALICE);
    let (conv, _) = alice.start_ready(json!({"message": "make a data directory"})).await;
    alice.wait_finished(&conv, 1).await;
    let base = format!("{}/api/v1/conversations/{conv}", alice.base);
    let http = &alice.http;

    // Up: a 3 MiB binary file (larger than a JSON body may be), into an existing directory.
    let blob: Vec<u8> = (0..3 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let resp = http.put(format!("{base}/files?path=data/blob.bin")).bearer_auth(ALICE).body(blob.clone()).send().await.unwrap();
    assert_eq!(resp.status(), 201, "{}", resp.text().await.unwrap());
    let stored: serde_json::Value = resp.json().await.unwrap();
    assert_eq!((stored["path"].as_str(), stored["size"].as_u64()), (Some("data/blob.bin"), Some(blob.len() as u64)), "{stored}");
    // The agent's tools see it where the user put it.
    let (_, listing) = alice.get(&format!("/api/v1/conversations/{conv}/files?path=data")).await;
    assert!(listing.to_string().contains("blob.bin"), "{listing}");

    // Down: the same bytes, as an attachment named after the file.
    let resp = http.get(format!("{base}/files/raw?path=data/blob.bin")).bearer_auth(ALICE).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-disposition"], "attachment; filename=\"blob.bin\"");
    assert_eq!(resp.bytes().await.unwrap().as_ref(), blob.as_slice());

    // Over the limit: refused with 413 whether the size is declared or found on the way, and
    // the file that was there is untouched.
    let declared = http
        .put(format!("{base}/files?path=data/old.txt"))
        .bearer_auth(ALICE)
        .header("content-length", (101u64 << 20).to_string())
        .body(unsized_body(101 << 20))
        .send()
        .await;
    if let Ok(resp) = declared {
        assert_eq!(resp.status(), 413);
    }
    let resp = http.put(format!("{base}/files?path=data/old.txt")).bearer_auth(ALICE).body(unsized_body(101 << 20)).send().await.unwrap();
    assert_eq!(resp.status(), 413);
    let e: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(e["error"]["code"], "file_too_large", "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("100 MiB"), "{e}");
    let old = http.get(format!("{base}/files/raw?path=data/old.txt")).bearer_auth(ALICE).send().await.unwrap();
    assert_eq!(old.text().await.unwrap(), "kept\n");

    // Into folders that are not there yet: made, as `mkdir -p` would, and the file is where it
    // was asked to be.
    let resp = http.put(format!("{base}/files?path=reports/today/out.csv")).bearer_auth(ALICE).body("a,b\n").send().await.unwrap();
    assert_eq!(resp.status(), 201, "{}", resp.text().await.unwrap());
    let stored: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(stored["path"], "reports/today/out.csv", "{stored}");
    let got = http.get(format!("{base}/files/raw?path=reports/today/out.csv")).bearer_auth(ALICE).send().await.unwrap();
    assert_eq!(got.text().await.unwrap(), "a,b\n");

    // Paths are the workspace's only: out of it (also by making folders), under a file, a
    // directory; each refusal says what failed.
    for (path, status, code) in [
        ("../../etc/passwd", 400, "path_outside_workspace"),
        ("/etc/hosts", 400, "path_outside_workspace"),
        ("new/../../../etc/x.txt", 400, "path_outside_workspace"),
        ("out/made/x.txt", 400, "path_outside_workspace"),
        ("data/old.txt/x.txt", 400, "invalid_path"),
        ("data", 400, "invalid_path"),
    ] {
        let resp = http.put(format!("{base}/files?path={path}")).bearer_auth(ALICE).body("x").send().await.unwrap();
        let status_got = resp.status().as_u16();
        let e: serde_json::Value = resp.json().await.unwrap();
        assert_eq!((status_got, e["error"]["code"].as_str()), (status, Some(code)), "{path}: {e}");
    }
    let resp = http.get(format!("{base}/files/raw?path=../../etc/passwd")).bearer_auth(ALICE).send().await.unwrap();
    assert_eq!(resp.status(), 400);

    // A name no filesystem takes is refused in words, not failed in the sandbox.
    let long = "n".repeat(300);
    let resp = http.put(format!("{base}/files?path=data/{long}")).bearer_auth(ALICE).body("x").send().await.unwrap();
    assert_eq!(resp.status(), 400, "{}", resp.text().await.unwrap());

    // The whole workspace as a tar.gz, which tar reads back.
    let resp = http.get(format!("{base}/archive")).bearer_auth(ALICE).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/gzip");
    let scratch = tempfile::tempdir().unwrap();
    std::fs::write(scratch.path().join("w.tar.gz"), resp.bytes().await.unwrap()).unwrap();
    let out = std::process::Command::new("tar").args(["-xzf", "w.tar.gz"]).current_dir(scratch.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(scratch.path().join("data/blob.bin")).unwrap(), blob);
    assert_eq!(std::fs::read_to_string(scratch.path().join("data/old.txt")).unwrap(), "kept\n");
    // The checkpoint store is Halyard's: in the workspace, not in what the user downloads.
    let (_, c) = alice.get(&format!("/api/v1/conversations/{conv}")).await;
    assert!(h.workspace(c["sandbox_id"].as_str().unwrap()).join(".halyard/checkpoints/HEAD").exists(), "no checkpoint store");
    assert!(!scratch.path().join(".halyard").exists(), "the archive holds the checkpoint store");

    // Another user gets nothing of it, either way.
    let resp = http.get(format!("{base}/files/raw?path=data/old.txt")).bearer_auth(BOB).send().await.unwrap();
    assert_eq!(resp.status(), 404);
    let resp = http.put(format!("{base}/files?path=data/bob.txt")).bearer_auth(BOB).body("x").send().await.unwrap();
    assert_eq!(resp.status(), 404);
    assert_eq!(http.get(format!("{base}/archive")).bearer_auth(BOB).send().await.unwrap().status(), 404);
}

#[tokio::test]
async fn the_owner_types_in_a_terminal_of_their_own() {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest};
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::finish("ready")]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let alice = h.api(ALICE);
    let (conv, _) = alice.start_ready(json!({"message": "nothing much"})).await;
    alice.wait_finished(&conv, 1).await;
    let url = format!("{}/api/v1/conversations/{conv}/terminal/ws", alice.base.replacen("http", "ws", 1));
    let open = |key: &str| {
        let mut request = url.as_str().into_client_request().unwrap();
        request.headers_mut().insert("authorization", format!("Bearer {key}").parse().unwrap());
        tokio_tungstenite::connect_async(request)
    };

    // Another user cannot open it.
    let refused = open(BOB).await.unwrap_err();
    assert!(refused.to_string().contains("404"), "{refused}");
    // Nor can the owner's read-only key (a dashboard's, a CI job's): a shell acts.
    let (s, ro) = alice.post("/api/v1/me/keys", json!({"scope": "read_only", "name": "dashboard"})).await;
    assert_eq!(s, 201, "{ro}");
    let ro_key = ro["key"].as_str().unwrap().to_owned();
    match open(&ro_key).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status(), 403);
            let body: serde_json::Value = serde_json::from_slice(resp.body().as_deref().unwrap_or_default()).unwrap();
            assert_eq!(body["error"]["code"], "read_only_key", "{body}");
        }
        other => panic!("a read-only key opened the terminal: {:?}", other.map(|_| ())),
    }

    let (mut term, _) = open(ALICE).await.unwrap();
    term.send(Message::Text(r#"{"type": "resize", "cols": 100, "rows": 30}"#.into())).await.unwrap();
    // A real terminal: it has a tty, the size the client set, and a shell in the workspace.
    term.send(Message::Binary(b"tty; stty size; pwd; echo typed-$((6*7))\r".to_vec().into())).await.unwrap();
    let mut screen = String::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !(screen.contains("typed-42") && screen.contains("30 100")) {
        assert!(std::time::Instant::now() < deadline, "the terminal did not answer: {screen:?}");
        match tokio::time::timeout(std::time::Duration::from_secs(5), term.next()).await {
            Ok(Some(Ok(Message::Binary(b)))) => screen.push_str(&String::from_utf8_lossy(&b)),
            Ok(Some(Ok(Message::Text(t)))) => screen.push_str(t.as_str()),
            Ok(Some(Ok(_))) => {}
            other => panic!("the terminal closed: {other:?}; screen so far: {screen:?}"),
        }
    }
    assert!(screen.contains("/dev/pts/"), "no tty: {screen:?}");
    assert!(screen.contains("/workspace"), "not in the workspace: {screen:?}");
    // A full-screen program runs in it (top draws once and quits).
    term.send(Message::Binary(b"top -b -n 1 | head -3\r".to_vec().into())).await.unwrap();
    while !screen.contains("load average") {
        assert!(std::time::Instant::now() < deadline, "top did not run: {screen:?}");
        if let Ok(Some(Ok(Message::Binary(b)))) = tokio::time::timeout(std::time::Duration::from_secs(5), term.next()).await {
            screen.push_str(&String::from_utf8_lossy(&b));
        }
    }
    term.close(None).await.unwrap();

    // The log says it was opened, by whom; not what was typed.
    let events = alice.wait_events(&conv, "the record", |ev| ev.iter().any(|e| e["kind"] == "terminal_opened")).await;
    // Once: the read-only key's attempt left no trace.
    let opened: Vec<_> = events.iter().filter(|e| e["kind"] == "terminal_opened").collect();
    assert_eq!(opened.len(), 1, "{opened:?}");
    assert_eq!((opened[0]["by"].as_str(), opened[0]["source"].as_str()), (Some("alice"), Some("user")));
    assert!(!serde_json::Value::Array(events).to_string().contains("typed-"), "keystrokes reached the log");
}

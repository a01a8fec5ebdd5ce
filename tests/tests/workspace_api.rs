#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! What a client shows of a conversation beyond its events: the workspace's changes as diffs,
//! its files, and the conversation list searched and filtered.

use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use serde_json::json;

const ALICE: &str = "alice-secret-key";
const BOB: &str = "bob-secret-key";

fn git(dir: &std::path::Path, args: &[&str]) {
    let ok = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(dir)
        .status()
        .unwrap()
        .success();
    assert!(ok, "git {args:?}");
}

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

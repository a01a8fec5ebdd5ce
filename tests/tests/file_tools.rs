#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! OpenHands' file tools besides the editor, as a user checks them: `glob` and `grep` find files
//! by name and by content in the sandbox, and `apply_patch` (offered by an LLM profile whose tool
//! set is `gpt5`) adds, changes, moves and deletes files with one V4A patch, or none of them.

use halyard_tests::llm::tool_names;
use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, finished, init};
use reqwest::Method;
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";

fn results<'a>(events: &'a [Value], tool: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == "observation" && e["tool"] == tool).collect()
}

#[tokio::test]
async fn glob_and_grep_find_files_by_name_and_content() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([
        Reply::tool(
            "terminal",
            json!({"command": "mkdir -p docs src/deep .hidden && echo 'the needle is here' > docs/a.md && echo 'no match' > docs/b.md \
                   && echo 'NEEDLE too' > src/deep/c.txt && echo needle > .hidden/d.md && echo x > src/e.txt", "security_risk": "low"}),
        ),
        Reply::tool("glob", json!({"pattern": "**/*.txt"})),
        Reply::tool("grep", json!({"pattern": "needle", "include": "*.md"})),
        Reply::tool("grep", json!({"pattern": "needle", "path": "src"})),
        Reply::tool("glob", json!({"pattern": "*.rs"})),
        Reply::tool("grep", json!({"pattern": "("})),
        Reply::finish("found them"),
    ]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let alice = h.api(ALICE);
    let (conv, _) = alice.start_ready(json!({"message": "find the needle"})).await;
    let events = alice.wait_events(&conv, "the run", finished).await;
    let offered = tool_names(&llm.requests()[0]);
    assert!(offered.contains(&"glob".to_owned()) && offered.contains(&"grep".to_owned()), "{offered:?}");
    assert!(!offered.contains(&"apply_patch".to_owned()), "the default set edits with file_editor: {offered:?}");

    let globs = results(&events, "glob");
    let txt = globs[0]["content"].as_str().unwrap();
    assert!(txt.starts_with("Found 2 file(s) matching pattern '**/*.txt' in '"), "{txt}");
    assert!(txt.contains("/src/deep/c.txt") && txt.contains("/src/e.txt"), "{txt}");
    let none = globs[1]["content"].as_str().unwrap();
    assert!(none.starts_with("No files found matching pattern '*.rs'"), "{none}");

    let greps = results(&events, "grep");
    let md = greps[0]["content"].as_str().unwrap();
    assert!(md.starts_with("Found 1 file(s) containing pattern 'needle'") && md.contains("(filtered by '*.md')"), "{md}");
    assert!(md.contains("/docs/a.md") && !md.contains("b.md") && !md.contains(".hidden"), "hidden files are not searched: {md}");
    let src = greps[1]["content"].as_str().unwrap();
    assert!(src.contains("/src/deep/c.txt") && !src.contains("e.txt"), "case-insensitive, in `path` only: {src}");
    assert_eq!(greps[2]["is_error"], true);
    assert!(greps[2]["content"].as_str().unwrap().contains("Invalid regex pattern"), "{}", greps[2]);
    // Searching changes nothing: no confirmation is asked for it, whatever the policy.
    assert!(
        events
            .iter()
            .filter(|e| e["kind"] == "action" && (e["tool"] == "glob" || e["tool"] == "grep"))
            .all(|e| e.get("security_risk").is_none())
    );
}

#[tokio::test]
async fn apply_patch_of_a_gpt5_profile_changes_files_whole_or_not_at_all() {
    init();
    let llm = ScriptedLlm::start().await;
    let patch = "*** Begin Patch\n\
                 *** Add File: notes/todo.md\n+- write the tests\n+- ship it\n\
                 *** Update File: app.py\n*** Move to: main.py\n@@ def greet():\n-    print(\"Hi\")\n+    print(\"Hello, world!\")\n\
                 *** Delete File: obsolete.txt\n\
                 *** End Patch";
    let broken = "*** Begin Patch\n*** Add File: never.txt\n+x\n*** Update File: main.py\n-    print(\"not there\")\n+    y\n*** End Patch";
    llm.push([
        Reply::tool(
            "terminal",
            json!({"command": "printf 'def greet():\\n    print(\"Hi\")\\n' > app.py && echo old > obsolete.txt", "security_risk": "low"}),
        ),
        Reply::tool("apply_patch", json!({"patch": patch, "security_risk": "low"})),
        Reply::tool("apply_patch", json!({"patch": broken, "security_risk": "low"})),
        Reply::finish("patched"),
    ]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_LLM_PROFILE_ALLOW", "loopback"));
    let alice = h.api(ALICE);
    // A tool set that is no preset or names no tool is refused.
    let profile = |tools: Value| json!({"base_url": llm.base_url, "model": "gpt-5.1", "tools": tools});
    let (s, e) = alice.call(Method::PUT, "/api/v1/llm-profiles/gpt", Some(profile(json!("gpt6")))).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_field")), "{e}");
    let (s, e) = alice.call(Method::PUT, "/api/v1/llm-profiles/gpt", Some(profile(json!(["terminal", "teleport"])))).await;
    assert!(s == 400 && e["error"]["message"].as_str().unwrap().contains("teleport"), "{e}");
    let (s, p) = alice.call(Method::PUT, "/api/v1/llm-profiles/gpt", Some(profile(json!("gpt5")))).await;
    assert_eq!(s, 201, "{p}");
    assert_eq!(p["tools"], "gpt5");

    let (conv, _) = alice.start_ready(json!({"message": "patch it", "llm_profile": "gpt"})).await;
    let events = alice.wait_events(&conv, "the run", finished).await;
    let offered = tool_names(&llm.requests()[0]);
    assert!(offered.contains(&"apply_patch".to_owned()) && !offered.contains(&"file_editor".to_owned()), "{offered:?}");

    let patches = results(&events, "apply_patch");
    assert_eq!(patches[0]["is_error"], false, "{}", patches[0]);
    let said = patches[0]["content"].as_str().unwrap();
    assert!(said.contains("A notes/todo.md") && said.contains("M app.py -> main.py") && said.contains("D obsolete.txt"), "{said}");
    let read = |path: &str| {
        let alice = &alice;
        let url = format!("/api/v1/conversations/{conv}/files?path={path}");
        async move { alice.get(&url).await }
    };
    assert_eq!(read("notes/todo.md").await.1["content"], "- write the tests\n- ship it\n");
    assert_eq!(read("main.py").await.1["content"], "def greet():\n    print(\"Hello, world!\")\n");
    assert_eq!(read("app.py").await.0, 404, "moved");
    assert_eq!(read("obsolete.txt").await.0, 404, "deleted");
    // The second patch did not apply, and nothing of it was written.
    assert_eq!(patches[1]["is_error"], true);
    assert!(patches[1]["content"].as_str().unwrap().contains("not there"), "{}", patches[1]);
    assert_eq!(read("never.txt").await.0, 404);
    assert_eq!(read("main.py").await.1["content"], "def greet():\n    print(\"Hello, world!\")\n");
}

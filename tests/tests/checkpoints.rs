#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Checkpoints and restore in place: the workspace is kept after every action, and
//! `POST /conversations/{id}/restore` puts it back as it was at any event, as a user checks it:
//! the files read back as they were, files made since are gone, the log only grows (a
//! `workspace_restored` event), and a restore can itself be undone.

use std::time::Duration;

use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, git, init};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";
const BOB: &str = "bob-secret-key";

/// A file of the workspace as the API shows it (`None`: not there).
async fn file(api: &halyard_tests::harness::Api, conv: &str, path: &str) -> Option<String> {
    let (s, f) = api.get(&format!("/api/v1/conversations/{conv}/files?path={path}")).await;
    match s {
        200 => Some(f["content"].as_str().unwrap_or_default().to_owned()),
        404 => None,
        other => panic!("reading {path}: {other} {f}"),
    }
}

/// The seq of the observation of the `n`th action (from 0) whose arguments mention `what`.
fn observed(events: &[Value], what: &str) -> u64 {
    let call = events
        .iter()
        .find(|e| e["kind"] == "action" && e["arguments"].to_string().contains(what))
        .unwrap_or_else(|| panic!("no action mentions {what}"))["tool_call_id"]
        .clone();
    events.iter().find(|e| e["kind"] == "observation" && e["tool_call_id"] == call).unwrap()["seq"].as_u64().unwrap()
}

#[tokio::test]
async fn a_workspace_goes_back_to_any_event_and_the_log_only_grows() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([
        Reply::tool("file_editor", json!({"command": "create", "path": "notes.txt", "file_text": "one\n", "security_risk": "low"})),
        Reply::tool("terminal", json!({"command": "mkdir -p src && echo 'print(1)' > src/app.py", "security_risk": "low"})),
        Reply::finish("made two files"),
    ]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let alice = h.api(ALICE);
    let (conv, _) = alice.start_ready(json!({"message": "make files"})).await;
    let events = alice.wait_finished(&conv, 1).await;
    let after_notes = observed(&events, "notes.txt");
    let after_app = observed(&events, "src/app.py");
    assert!(after_notes < after_app);

    // A second run changes one file, removes one and makes another.
    llm.push([
        Reply::tool(
            "file_editor",
            json!({"command": "str_replace", "path": "notes.txt", "old_str": "one", "new_str": "three", "security_risk": "low"}),
        ),
        Reply::tool("terminal", json!({"command": "rm src/app.py && echo later > later.txt", "security_risk": "low"})),
        Reply::finish("changed them"),
    ]);
    alice.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "change them"})).await;
    let events = alice.wait_finished(&conv, 2).await;
    let before_restore = events.last().unwrap()["seq"].as_u64().unwrap();
    assert_eq!(file(&alice, &conv, "notes.txt").await.as_deref(), Some("three\n"));

    // Refused in words: no such event, another user's conversation.
    for at in [0, before_restore + 100] {
        let (s, err) = alice.post(&format!("/api/v1/conversations/{conv}/restore"), json!({"at_seq": at})).await;
        assert_eq!((s, err["error"]["code"].as_str()), (400, Some("invalid_field")), "{err}");
    }
    let (s, _) = h.api(BOB).post(&format!("/api/v1/conversations/{conv}/restore"), json!({"at_seq": after_notes})).await;
    assert_eq!(s, 404);

    // Back to just after the first file was made.
    let (s, accepted) = alice.post(&format!("/api/v1/conversations/{conv}/restore"), json!({"at_seq": after_notes})).await;
    assert_eq!(s, 202, "{accepted}");
    let events = alice.wait_events(&conv, "the restore", |ev| ev.iter().any(|e| e["kind"] == "workspace_restored")).await;
    let restored = events.iter().find(|e| e["kind"] == "workspace_restored").unwrap();
    assert_eq!(restored["at_seq"].as_u64(), Some(after_notes));
    assert_eq!(restored["checkpoint_seq"].as_u64(), Some(after_notes), "the checkpoint of that very action");
    assert_eq!(restored["id"].as_str(), accepted["event_id"].as_str());
    assert_eq!(file(&alice, &conv, "notes.txt").await.as_deref(), Some("one\n"));
    assert_eq!(file(&alice, &conv, "src/app.py").await, None, "made after that event");
    assert_eq!(file(&alice, &conv, "later.txt").await, None, "made after that event");
    // The log only grew: everything before is as it was.
    assert!(events.iter().take(before_restore as usize).zip(1..).all(|(e, seq)| e["seq"] == seq));
    assert_eq!(events.iter().filter(|e| e["kind"] == "workspace_restored").count(), 1);

    // The start, before any action: no files of the agent's at all.
    let (s, answer) = alice.post(&format!("/api/v1/conversations/{conv}/restore"), json!({"at_seq": 1})).await;
    assert_eq!(s, 202, "{answer}");
    alice.wait_events(&conv, "the second restore", |ev| ev.iter().filter(|e| e["kind"] == "workspace_restored").count() == 2).await;
    assert_eq!(file(&alice, &conv, "notes.txt").await, None);

    // Undone: the workspace as it was before the first restore comes back whole.
    let (s, answer) = alice.post(&format!("/api/v1/conversations/{conv}/restore"), json!({"at_seq": before_restore})).await;
    assert_eq!(s, 202, "{answer}");
    alice.wait_events(&conv, "the undo", |ev| ev.iter().filter(|e| e["kind"] == "workspace_restored").count() == 3).await;
    assert_eq!(file(&alice, &conv, "notes.txt").await.as_deref(), Some("three\n"));
    assert_eq!(file(&alice, &conv, "later.txt").await.as_deref(), Some("later\n"));
    assert_eq!(file(&alice, &conv, "src/app.py").await, None);

    // The model is told: its next request says the files were put back.
    llm.push([Reply::finish("noted")]);
    alice.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "what now?"})).await;
    alice.wait_finished(&conv, 3).await;
    let told = llm.requests().last().unwrap()["messages"].to_string();
    assert!(told.contains("put the workspace's files back as they were at event"), "{told}");

    // Not while the agent works in it.
    llm.push([Reply::tool("terminal", json!({"command": "sleep 30", "security_risk": "low"})), Reply::finish("slept")]);
    alice.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "sleep"})).await;
    alice.wait_conversation(&conv, "running", |c| c["state"] == "running").await;
    let (s, err) = alice.post(&format!("/api/v1/conversations/{conv}/restore"), json!({"at_seq": 1})).await;
    assert_eq!((s, err["error"]["code"].as_str()), (409, Some("conversation_running")), "{err}");
    alice.post(&format!("/api/v1/conversations/{conv}/interrupt"), json!({})).await;
    tokio::time::timeout(Duration::from_secs(30), alice.wait_conversation(&conv, "interrupted", |c| c["state"] == "idle")).await.unwrap();
}

/// What a hostile agent does to the checkpoint store in its workspace: a checkpoint of its own
/// (`notes.txt` saying "evil"), and every checkpoint's ref (and the branch) pointed at it.
const REPOINT: &str = "export GIT_DIR=.halyard/checkpoints GIT_WORK_TREE=. GIT_INDEX_FILE=/tmp/evil-index && \
    echo evil > notes.txt && git add -A . && t=$(git write-tree) && \
    c=$(git -c user.name=x -c user.email=x@x.invalid commit-tree $t -m 'seq 1') && \
    for r in $(git for-each-ref --format='%(refname)' refs/seq/); do git update-ref $r $c; done && \
    git update-ref refs/heads/main $c && echo damaged > notes.txt && echo repointed";

/// And then the objects themselves: the blob of "honest" rewritten with the one of "evil".
const REWRITE: &str = "export GIT_DIR=.halyard/checkpoints && h=$(printf 'honest\\n' | git hash-object --stdin) && \
    e=$(printf 'evil\\n' | git hash-object -w --stdin) && f=$GIT_DIR/objects/$(echo $h | cut -c1-2)/$(echo $h | cut -c3-) && \
    chmod u+w $f && cp $GIT_DIR/objects/$(echo $e | cut -c1-2)/$(echo $e | cut -c3-) $f && echo rewritten";

#[tokio::test]
async fn what_a_restore_brings_back_is_what_was_kept_not_what_the_agent_wrote_into_the_store() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([
        Reply::tool("file_editor", json!({"command": "create", "path": "notes.txt", "file_text": "honest\n", "security_risk": "low"})),
        Reply::finish("wrote notes"),
    ]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let alice = h.api(ALICE);
    let (conv, _) = alice.start_ready(json!({"message": "write notes"})).await;
    let events = alice.wait_finished(&conv, 1).await;
    let after_notes = observed(&events, "notes.txt");

    // The agent damages the file and repoints the store's refs at a checkpoint of its own.
    llm.push([Reply::tool("terminal", json!({"command": REPOINT, "security_risk": "low"})), Reply::finish("done")]);
    alice.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "go on"})).await;
    let events = alice.wait_finished(&conv, 2).await;
    let said = events.iter().rev().find(|e| e["kind"] == "observation" && e["tool"] == "terminal").unwrap();
    assert!(said["content"].as_str().unwrap().contains("repointed"), "{said}");
    assert_eq!(file(&alice, &conv, "notes.txt").await.as_deref(), Some("damaged\n"));

    // The user restores: what was kept at that event, not what the agent put in the store.
    let restore = |n: usize| {
        let alice = &alice;
        let conv = conv.clone();
        async move {
            let (s, answer) = alice.post(&format!("/api/v1/conversations/{conv}/restore"), json!({"at_seq": after_notes})).await;
            assert_eq!(s, 202, "{answer}");
            alice
                .wait_events(&conv, "the restore's answer", |ev| {
                    ev.iter().filter(|e| e["kind"] == "workspace_restored" || e["code"] == "restore_failed").count() == n
                })
                .await
        }
    };
    let events = restore(1).await;
    assert!(events.iter().any(|e| e["kind"] == "workspace_restored"), "restored");
    assert_eq!(file(&alice, &conv, "notes.txt").await.as_deref(), Some("honest\n"));

    // The agent rewrites the kept objects themselves: the restore is refused, in words, and
    // the workspace is left as it was.
    llm.push([Reply::tool("terminal", json!({"command": REWRITE, "security_risk": "low"})), Reply::finish("done")]);
    alice.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "go on again"})).await;
    let events = alice.wait_finished(&conv, 3).await;
    let said = events.iter().rev().find(|e| e["kind"] == "observation" && e["tool"] == "terminal").unwrap();
    assert!(said["content"].as_str().unwrap().contains("rewritten"), "{said}");
    let events = restore(2).await;
    let refused = events.iter().find(|e| e["code"] == "restore_failed").unwrap();
    assert!(refused["message"].as_str().unwrap().contains("changed from inside the sandbox"), "{refused}");
    assert_eq!(file(&alice, &conv, "notes.txt").await.as_deref(), Some("honest\n"));
}

/// An event as its content: what a copy must keep (its id, time and conversation are its own).
fn content(e: &Value) -> Value {
    let mut e = e.clone();
    for own in ["id", "timestamp", "timestamp_ms", "conversation_id"] {
        e.as_object_mut().unwrap().remove(own);
    }
    e
}

#[tokio::test]
async fn a_fork_has_the_log_up_to_its_event_and_the_workspace_as_it_was_then_and_runs_on() {
    init();
    // A repository, so the fork's workspace is a clone with the checkpoint laid over it.
    let repo = tempfile::tempdir().unwrap();
    std::fs::set_permissions(repo.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(repo.path().join("README.md"), "# demo\n").unwrap();
    std::fs::write(repo.path().join("old.txt"), "old\n").unwrap();
    git(repo.path(), &["init", "-q", "-b", "main"]);
    git(repo.path(), &["add", "."]);
    git(repo.path(), &["commit", "-qm", "init"]);

    let llm = ScriptedLlm::start().await;
    llm.push([
        Reply::tool("file_editor", json!({"command": "create", "path": "notes.txt", "file_text": "one\n", "security_risk": "low"})),
        Reply::tool("terminal", json!({"command": "rm old.txt && echo v1 > README.md", "security_risk": "low"})),
        Reply::finish("first run done"),
    ]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let alice = h.api(ALICE);
    let url = repo.path().to_string_lossy().to_string();
    let (source, _) = alice.start_ready(json!({"message": "make files", "repository": {"url": url}, "title": "Demo"})).await;
    let events = alice.wait_finished(&source, 1).await;
    let after_notes = observed(&events, "notes.txt");
    let fork_at = events.iter().find(|e| e["kind"] == "execution_status" && e["status"] == "finished").unwrap()["seq"].as_u64().unwrap();

    // A second run in the source changes what the fork must not see.
    llm.push([
        Reply::tool("terminal", json!({"command": "echo three > notes.txt && echo later > later.txt", "security_risk": "low"})),
        Reply::finish("second run done"),
    ]);
    alice.post(&format!("/api/v1/conversations/{source}/messages"), json!({"text": "change them"})).await;
    let source_events = alice.wait_finished(&source, 2).await;

    // Refused in words: no such event, another user's conversation.
    for at in [0, source_events.len() as u64 + 5] {
        let (s, err) = alice.post(&format!("/api/v1/conversations/{source}/fork"), json!({"at_seq": at})).await;
        assert_eq!((s, err["error"]["code"].as_str()), (400, Some("invalid_field")), "{err}");
    }
    let (s, _) = h.api(BOB).post(&format!("/api/v1/conversations/{source}/fork"), json!({"at_seq": fork_at})).await;
    assert_eq!(s, 404);

    let (s, task) = alice.post(&format!("/api/v1/conversations/{source}/fork"), json!({"at_seq": fork_at})).await;
    assert_eq!(s, 202, "{task}");
    let task = alice.wait_task(task["id"].as_str().unwrap(), &["READY"]).await;
    let fork = task["conversation_id"].as_str().unwrap().to_owned();
    assert_ne!(fork, source);
    let forked = alice.wait_events(&fork, "the fork's log", |ev| ev.len() as u64 > fork_at).await;

    // Its log: its own start naming the source, then the source's events 2..=fork_at as they
    // were, then a status saying it waits.
    assert_eq!(forked[0]["kind"], "conversation_started");
    assert_eq!(forked[0]["forked_from"]["conversation_id"].as_str(), Some(source.as_str()));
    assert_eq!(forked[0]["forked_from"]["at_seq"].as_u64(), Some(fork_at));
    assert_ne!(forked[0]["sandbox_id"], source_events[0]["sandbox_id"], "a sandbox of its own");
    for seq in 2..=fork_at as usize {
        assert_eq!(content(&forked[seq - 1]), content(&source_events[seq - 1]), "event {seq}");
        assert_ne!(forked[seq - 1]["id"], source_events[seq - 1]["id"]);
    }
    let after = &forked[fork_at as usize];
    assert_eq!((after["kind"].as_str(), after["status"].as_str()), (Some("execution_status"), Some("finished")), "{after}");
    assert!(after["reason"].as_str().unwrap_or_default().contains(&source), "{after}");
    let (_, view) = alice.get(&format!("/api/v1/conversations/{fork}")).await;
    assert_eq!(view["forked_from"]["conversation_id"].as_str(), Some(source.as_str()), "{view}");
    assert_eq!(view["title"].as_str(), Some("Demo (fork)"));

    // Its workspace: as the source's was at that event, the repository's git history included.
    assert_eq!(file(&alice, &fork, "notes.txt").await.as_deref(), Some("one\n"));
    assert_eq!(file(&alice, &fork, "README.md").await.as_deref(), Some("v1\n"));
    assert_eq!(file(&alice, &fork, "old.txt").await, None, "removed before the fork's event");
    assert_eq!(file(&alice, &fork, "later.txt").await, None, "made after the fork's event");
    let (s, changes) = alice.get(&format!("/api/v1/conversations/{fork}/changes")).await;
    assert_eq!(s, 200, "{changes}");
    let changed = changes.to_string();
    assert!(changed.contains("old.txt") && changed.contains("README.md"), "the clone's git sees what the agent did: {changed}");

    // It runs on from there: the model sees the source's first run, not its second.
    llm.push([
        Reply::tool("terminal", json!({"command": "cat notes.txt && echo forked > fork.txt", "security_risk": "low"})),
        Reply::finish("fork run done"),
    ]);
    let (s, _) = alice.post(&format!("/api/v1/conversations/{fork}/messages"), json!({"text": "go on in the fork"})).await;
    assert_eq!(s, 202);
    // (Its log has two finished runs already: the copied one and its own status.)
    let forked = alice.wait_finished(&fork, 3).await;
    let seen = llm.requests().last().unwrap()["messages"].to_string();
    assert!(seen.contains("make files") && seen.contains("first run done") && seen.contains("go on in the fork"), "{seen}");
    assert!(!seen.contains("change them"), "the source's later message reached the fork: {seen}");
    let out = forked.iter().rev().find(|e| e["kind"] == "observation").unwrap();
    assert!(out["content"].as_str().unwrap().contains("one"), "{out}");
    assert_eq!(file(&alice, &fork, "fork.txt").await.as_deref(), Some("forked\n"));

    // The source is untouched: its files and its log.
    assert_eq!(file(&alice, &source, "notes.txt").await.as_deref(), Some("three\n"));
    assert_eq!(file(&alice, &source, "fork.txt").await, None);
    let now = alice.events(&source).await;
    assert_eq!(now.len(), source_events.len());

    // The fork's earlier checkpoints came with it: it can go back to before the first file.
    let (s, answer) = alice.post(&format!("/api/v1/conversations/{fork}/restore"), json!({"at_seq": after_notes - 1})).await;
    assert_eq!(s, 202, "{answer}");
    alice.wait_events(&fork, "the fork's restore", |ev| ev.iter().any(|e| e["kind"] == "workspace_restored")).await;
    assert_eq!(file(&alice, &fork, "notes.txt").await, None);
    assert_eq!(file(&alice, &fork, "old.txt").await.as_deref(), Some("old\n"));
}

//! The checkpoint store's own tests: taking, restoring, bundling, tampering, and the watch.

use super::*;

#[tokio::test]
async fn a_late_request_for_an_earlier_seq_names_the_last_checkpoint_not_the_workspace_now() {
    let ws = tempfile::tempdir().unwrap();
    let c = Checkpoints::new(ws.path().to_path_buf());
    let first = c.take(1, None).await.unwrap();
    std::fs::write(ws.path().join("made.txt"), "by the first action\n").unwrap();
    let after = c.take(8, Some(&first.commit)).await.unwrap();
    assert!(after.changed);
    // The start task's early request for seq 1, arriving after the run's own.
    let late = c.take(1, None).await.unwrap();
    assert_eq!((late.commit.as_str(), late.changed), (after.commit.as_str(), false));
    // Seq 1 still brings back the workspace as it started.
    let back = c.restore(1, None).await.unwrap();
    assert_eq!((back.checkpoint_seq, back.commit.as_str()), (1, first.commit.as_str()));
    assert!(!ws.path().join("made.txt").exists());
}

#[tokio::test]
async fn a_checkpoint_keeps_what_changed_and_a_restore_brings_it_back() {
    let ws = tempfile::tempdir().unwrap();
    let c = Checkpoints::new(ws.path().to_path_buf());
    std::fs::write(ws.path().join("a.txt"), "one\n").unwrap();
    let first = c.take(1, None).await.unwrap();
    assert!(first.changed);
    assert!(!c.take(2, None).await.unwrap().changed, "nothing changed, nothing new");
    // Once the files are older than the file clock's tick, without git (the same answer).
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    c.take(3, None).await.unwrap();
    assert!(!c.take(4, None).await.unwrap().changed);
    std::fs::write(ws.path().join("a.txt"), "two\n").unwrap();
    std::fs::create_dir(ws.path().join("src")).unwrap();
    std::fs::write(ws.path().join("src/b.txt"), "new\n").unwrap();
    assert!(c.take(5, None).await.unwrap().changed);

    let back = c.restore(4, None).await.unwrap();
    assert_eq!((back.checkpoint_seq, back.commit.as_str()), (1, first.commit.as_str()));
    assert_eq!(std::fs::read_to_string(ws.path().join("a.txt")).unwrap(), "one\n");
    assert!(!ws.path().join("src/b.txt").exists(), "a file made after the checkpoint is gone");
    // What was undone can be had back.
    c.take(6, None).await.unwrap();
    c.restore(5, None).await.unwrap();
    assert_eq!(std::fs::read_to_string(ws.path().join("src/b.txt")).unwrap(), "new\n");
    assert!(matches!(c.restore(0, None).await, Err(ExecutorError::NotFound(_))));
}

#[tokio::test]
async fn a_store_changed_from_inside_the_sandbox_is_put_back_or_refused() {
    let ws = tempfile::tempdir().unwrap();
    let a = ws.path().join("a.txt");
    let c = Checkpoints::new(ws.path().to_path_buf());
    std::fs::write(&a, "one\n").unwrap();
    let first = c.take(1, None).await.unwrap();
    std::fs::write(&a, "two\n").unwrap();
    let head = c.take(2, Some(&first.commit)).await.unwrap().commit;

    // The agent makes a checkpoint of its own and points seq 1 (and main) at it.
    std::fs::write(&a, "evil\n").unwrap();
    c.git(&["add", "-A", "."], None).await.unwrap();
    let tree = c.git(&["write-tree"], None).await.unwrap();
    let evil = c.git(&["commit-tree", &tree, "-m", "seq 1", "-p", &first.commit], None).await.unwrap();
    let refs = format!("update {} {evil}\nupdate refs/heads/main {evil}\n", seq_ref(1));
    c.git(&["update-ref", "--stdin"], Some(&refs)).await.unwrap();
    c.restore(1, None).await.unwrap();
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "evil\n", "the store's own refs are the agent's to change");
    // From the kept head, seq 1 is what it was.
    let back = c.restore(1, Some(&head)).await.unwrap();
    assert_eq!((back.checkpoint_seq, back.commit.as_str()), (1, first.commit.as_str()));
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "one\n");

    // An executor started again follows the kept parent, not the store's main.
    c.git(&["update-ref", "refs/heads/main", &evil], None).await.unwrap();
    let again = Checkpoints::new(ws.path().to_path_buf());
    std::fs::write(&a, "three\n").unwrap();
    let third = again.take(3, Some(&head)).await.unwrap();
    assert_eq!(again.git(&["rev-parse", &format!("{}^", third.commit)], None).await.unwrap(), head);

    // The kept parent removed from the store, the agent's own chain under main: the next
    // checkpoint starts a chain of its own, so nothing of the agent's is ever under the head.
    let gone = tempfile::tempdir().unwrap();
    let g = Checkpoints::new(gone.path().to_path_buf());
    std::fs::write(gone.path().join("a.txt"), "one\n").unwrap();
    let kept = g.take(1, None).await.unwrap().commit;
    let object = g.dir.join("objects").join(&kept[..2]).join(&kept[2..]);
    std::fs::remove_file(&object).unwrap();
    std::fs::write(gone.path().join("a.txt"), "evil\n").unwrap();
    g.git(&["add", "-A", "."], None).await.unwrap();
    let tree = g.git(&["write-tree"], None).await.unwrap();
    let forged = g.git(&["commit-tree", &tree, "-m", "seq 1"], None).await.unwrap();
    g.git(&["update-ref", "refs/heads/main", &forged], None).await.unwrap();
    let fresh = Checkpoints::new(gone.path().to_path_buf());
    std::fs::write(gone.path().join("a.txt"), "two\n").unwrap();
    let next = fresh.take(2, Some(&kept)).await.unwrap();
    let parents = fresh.git(&["log", "--format=%P", "-1", &next.commit], None).await.unwrap();
    assert_eq!(parents, "", "an orphan, not a child of the agent's commit");
    let refused = fresh.restore(1, Some(&next.commit)).await.unwrap_err();
    assert!(matches!(refused, ExecutorError::NotFound(_)), "seq 1 is not in the kept chain: {refused:?}");

    // Objects rewritten in place: refused, and the workspace is left as it is.
    let blob = again.git(&["rev-parse", &format!("{}:a.txt", first.commit)], None).await.unwrap();
    let object = again.dir.join("objects").join(&blob[..2]).join(&blob[2..]);
    let mut perms = std::fs::metadata(&object).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o644);
    std::fs::set_permissions(&object, perms).unwrap();
    let evil_blob = again.git(&["hash-object", "-w", "--stdin"], Some("evil\n")).await.unwrap();
    let evil_object = again.dir.join("objects").join(&evil_blob[..2]).join(&evil_blob[2..]);
    std::fs::copy(&evil_object, &object).unwrap();
    let refused = again.restore(1, Some(&third.commit)).await.unwrap_err();
    assert!(matches!(&refused, ExecutorError::Tampered(m) if m.contains("changed from inside the sandbox")), "{refused:?}");
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "three\n");
}

#[tokio::test]
async fn a_file_kept_then_ignored_is_still_kept_when_it_changes() {
    let ws = tempfile::tempdir().unwrap();
    let c = Checkpoints::new(ws.path().to_path_buf());
    std::fs::write(ws.path().join("build.log"), "one\n").unwrap();
    c.take(1, None).await.unwrap();
    std::fs::write(ws.path().join(".gitignore"), "*.log\n").unwrap();
    assert!(c.take(2, None).await.unwrap().changed);
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    assert!(!c.take(3, None).await.unwrap().changed);
    // git still keeps build.log (it was kept before it was ignored): so must the walk.
    std::fs::write(ws.path().join("build.log"), "two\n").unwrap();
    assert!(c.take(4, None).await.unwrap().changed);
}

#[tokio::test]
async fn a_bundle_makes_another_workspace_as_a_checkpoint_left_it() {
    use tokio::io::AsyncReadExt;
    let source = tempfile::tempdir().unwrap();
    let from = Checkpoints::new(source.path().to_path_buf());
    assert!(matches!(from.bundle(3, None).await, Err(ExecutorError::NotFound(_))), "nothing taken yet");
    std::fs::write(source.path().join("a.txt"), "one\n").unwrap();
    from.take(2, None).await.unwrap();
    std::fs::write(source.path().join("a.txt"), "two\n").unwrap();
    std::fs::write(source.path().join("b.txt"), "b\n").unwrap();
    from.take(4, None).await.unwrap();
    std::fs::write(source.path().join("a.txt"), "three\n").unwrap();
    from.take(6, None).await.unwrap();

    let mut bytes = Vec::new();
    from.bundle(5, None).await.unwrap().read_to_end(&mut bytes).await.unwrap();
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &bytes).unwrap();

    // The new workspace holds something already (a fresh clone): kept where the
    // checkpoint has it, gone where it has not.
    let fork = tempfile::tempdir().unwrap();
    std::fs::write(fork.path().join("a.txt"), "cloned\n").unwrap();
    std::fs::write(fork.path().join("stale.txt"), "x\n").unwrap();
    let to = Checkpoints::new(fork.path().to_path_buf());
    let made = to.unbundle(5, file.path()).await.unwrap();
    assert_eq!(made.checkpoint_seq, 4);
    assert_eq!(std::fs::read_to_string(fork.path().join("a.txt")).unwrap(), "two\n");
    assert_eq!(std::fs::read_to_string(fork.path().join("b.txt")).unwrap(), "b\n");
    assert!(!fork.path().join("stale.txt").exists());
    // The checkpoint after 5 is not the fork's; the earlier ones are.
    to.restore(3, None).await.unwrap();
    assert_eq!(std::fs::read_to_string(fork.path().join("a.txt")).unwrap(), "one\n");
    assert!(to.restore(9, None).await.unwrap().checkpoint_seq == 4);
    // And it goes on from there: nothing changed, nothing new.
    assert!(!to.take(7, None).await.unwrap().changed);
    // The source is as it was.
    assert_eq!(std::fs::read_to_string(source.path().join("a.txt")).unwrap(), "three\n");
}

/// The tree a full look gives for the workspace as it is now (what a checkpoint must keep), in
/// a store of its own.
async fn full_tree(ws: &Path) -> String {
    let other = tempfile::tempdir().unwrap();
    let c = Checkpoints { dir: other.path().join("store"), ..Checkpoints::new(ws.to_path_buf()) };
    c.ensure().await.unwrap();
    c.git(&["add", "-A", "--ignore-errors", "."], None).await.unwrap();
    c.git(&["write-tree"], None).await.unwrap()
}

/// One change a step makes to the workspace.
type Change = Box<dyn Fn(&Path)>;

#[tokio::test]
async fn a_watched_workspace_hands_git_only_what_changed_and_keeps_every_kind_of_change() {
    let ws = tempfile::tempdir().unwrap();
    let p = ws.path();
    std::fs::create_dir_all(p.join("src/deep")).unwrap();
    for i in 0..50 {
        std::fs::write(p.join(format!("src/f{i}.rs")), format!("{i}\n")).unwrap();
    }
    std::fs::write(p.join("src/deep/d.rs"), "d\n").unwrap();
    std::fs::write(p.join(".gitignore"), "target/\n*.log\n").unwrap();
    let c = Checkpoints::new(p.to_path_buf());
    let first = c.take(1, None).await.unwrap();
    assert!(matches!(*c.watch.lock().unwrap(), Watching::On(_)), "the first checkpoint arms the watch");
    let mut head = first.commit;

    // Each step: a change of one kind, then a checkpoint whose tree must be the full look's.
    let steps: Vec<(&str, Change)> = vec![
        ("modified", Box::new(|p| std::fs::write(p.join("src/f3.rs"), "changed\n").unwrap())),
        ("created", Box::new(|p| std::fs::write(p.join("src/new.rs"), "new\n").unwrap())),
        ("removed", Box::new(|p| std::fs::remove_file(p.join("src/f4.rs")).unwrap())),
        ("renamed", Box::new(|p| std::fs::rename(p.join("src/f5.rs"), p.join("src/deep/five.rs")).unwrap())),
        (
            "made executable",
            Box::new(|p| {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(p.join("src/f6.rs"), std::fs::Permissions::from_mode(0o755)).unwrap()
            }),
        ),
        (
            "a new directory with files in it",
            Box::new(|p| {
                std::fs::create_dir_all(p.join("pkg/a/b")).unwrap();
                std::fs::write(p.join("pkg/a/b/x.rs"), "x\n").unwrap();
                std::fs::write(p.join("pkg/a/y.rs"), "y\n").unwrap();
            }),
        ),
        ("a file in that new directory", Box::new(|p| std::fs::write(p.join("pkg/a/b/z.rs"), "z\n").unwrap())),
        (
            "ignored output, and a temporary file made and gone (as `sed -i` does)",
            Box::new(|p| {
                std::fs::create_dir_all(p.join("target/debug")).unwrap();
                std::fs::write(p.join("target/debug/out"), "binary\n").unwrap();
                std::fs::write(p.join("build.log"), "log\n").unwrap();
                std::fs::write(p.join("src/sedtmp"), "tmp\n").unwrap();
                std::fs::rename(p.join("src/sedtmp"), p.join("src/f7.rs")).unwrap();
            }),
        ),
        ("a directory removed", Box::new(|p| std::fs::remove_dir_all(p.join("pkg")).unwrap())),
        ("a .gitignore changed", Box::new(|p| std::fs::write(p.join(".gitignore"), "target/\n").unwrap())),
        ("after the full look, a change again", Box::new(|p| std::fs::write(p.join("src/f8.rs"), "eight\n").unwrap())),
    ];
    for (i, (what, change)) in steps.iter().enumerate() {
        let looks = c.full_looks();
        change(p);
        let taken = c.take(2 + i as u64, Some(&head)).await.unwrap();
        assert!(taken.changed, "{what}: no new checkpoint");
        let tree = c.git(&["rev-parse", &format!("{}^{{tree}}", taken.commit)], None).await.unwrap();
        assert_eq!(tree, full_tree(p).await, "{what}: the checkpoint is not what a full look keeps");
        // Only a changed `.gitignore` makes the checkpoint look at everything.
        assert_eq!(c.full_looks() - looks, u64::from(what.contains(".gitignore")), "{what}");
        head = taken.commit;
    }
    assert!(!c.take(50, Some(&head)).await.unwrap().changed, "nothing changed, nothing new");
    // Ignored output stays out of every checkpoint.
    let listed = c.git(&["ls-tree", "-r", "--name-only", &head], None).await.unwrap();
    assert!(!listed.contains("target/") && listed.contains("build.log"), "{listed}");
}

#[tokio::test]
async fn a_workspace_with_a_nested_repository_is_not_watched_and_still_kept() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join("vendor/lib/.git")).unwrap();
    std::fs::write(ws.path().join("a.txt"), "a\n").unwrap();
    let c = Checkpoints::new(ws.path().to_path_buf());
    let first = c.take(1, None).await.unwrap();
    assert!(matches!(*c.watch.lock().unwrap(), Watching::Off));
    std::fs::write(ws.path().join("a.txt"), "b\n").unwrap();
    assert!(c.take(2, Some(&first.commit)).await.unwrap().changed);
}

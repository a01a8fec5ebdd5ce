#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Environments with process sandboxes: setup runs once, with its setup-only secret, and is kept
//! as a snapshot that the next start on the same key starts from (brought up to date with the
//! repository); a change to a cache-key file sets up again; a failed setup is a start error with
//! its output (secret masked) and no snapshot; a snapshot past the quota is refused in words;
//! a deleted snapshot's files go. And the same with a container, whose snapshot is an image.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use halyard_tests::docker::{docker, require_engine};
use halyard_tests::{Api, Halyard, HalyardOptions, Reply, ScriptedLlm, git, init, procs};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";
const SECRET: &str = "s3cr3t-npm-token-value";

fn make_repo() -> tempfile::TempDir {
    let repo = tempfile::tempdir().unwrap();
    let p = repo.path();
    // Readable by every user: an isolated process sandbox runs under a uid of its own.
    std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(p.join("README.md"), "# demo\n").unwrap();
    std::fs::write(p.join("deps.lock"), "left-pad 1.0\n").unwrap();
    git(p, &["init", "-q"]);
    git(p, &["add", "."]);
    git(p, &["commit", "-qm", "init"]);
    repo
}

fn commit(repo: &Path, file: &str, text: &str) {
    std::fs::write(repo.join(file), text).unwrap();
    git(repo, &["add", "."]);
    git(repo, &["commit", "-qm", file]);
}

/// Setup that shows it ran (a timestamp), that it had the secret (without writing it), and
/// writes to home as well as the workspace.
fn setup_env() -> Value {
    json!({
        "setup": [
            "date +%s%N > installed-at.txt",
            "if [ \"$NPM_TOKEN\" = \"$EXPECTED\" ]; then echo yes > had-secret.txt; fi",
            "mkdir -p \"$HOME/.cache/tool\" && cat deps.lock > \"$HOME/.cache/tool/installed\"",
        ],
        "post_start": ["echo started >> post-start.log"],
        "env": {"EXPECTED": SECRET},
        "setup_secrets": ["NPM_TOKEN"],
        "cache_key": ["deps.lock"],
    })
}

async fn start(api: &Api, env: &str, repo: &Path) -> (String, Value) {
    let url = repo.to_string_lossy();
    // The agent's shell gets none of the secrets: whatever of NPM_TOKEN is in the sandbox came
    // from setup.
    api.start_ready(json!({"message": "hi", "environment": env, "secrets": [], "repository": {"url": url}})).await
}

fn read(ws: &Path, file: &str) -> String {
    std::fs::read_to_string(ws.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// Every file under `dir` whose bytes hold `needle`.
fn files_holding(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let path = e.path();
            let Ok(m) = std::fs::symlink_metadata(&path) else { continue };
            if m.is_dir() {
                stack.push(path);
            } else if m.is_file() && std::fs::read(&path).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes())) {
                found.push(path);
            }
        }
    }
    found
}

/// The environments of the processes in the executor's process group.
fn sandbox_environments(workspace: &Path) -> String {
    let pid = procs::executor_pid(workspace).expect("the sandbox's executor runs");
    procs::group(pid)
        .iter()
        .filter_map(|p| std::fs::read(format!("/proc/{p}/environ")).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .collect()
}

/// `halyard <args>` as Alice, against `h`: its standard output (it must succeed).
fn cli(h: &Halyard, args: &[&str]) -> String {
    let home = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(halyard_tests::harness::halyard_bin())
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("HALYARD_URL", &h.http)
        .env("HALYARD_API_KEY", ALICE)
        .output()
        .unwrap();
    assert!(out.status.success(), "halyard {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn put(api: &Api, name: &str, body: Value) -> (u16, Value) {
    api.call(reqwest::Method::PUT, &format!("/api/v1/environments/{name}"), Some(body)).await
}

async fn snapshots(api: &Api) -> Value {
    let (s, list) = api.get("/api/v1/environments/snapshots").await;
    assert_eq!(s, 200, "{list}");
    list
}

#[tokio::test]
async fn setup_runs_once_and_later_starts_begin_from_its_snapshot() {
    init();
    let llm = ScriptedLlm::start().await;
    for _ in 0..4 {
        llm.push([Reply::finish("ok")]);
    }
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api(ALICE);
    let (s, v) = api.call(reqwest::Method::PUT, "/api/v1/secrets/NPM_TOKEN", Some(json!({"value": SECRET}))).await;
    assert!(s == 201 || s == 200, "{v}");
    let (s, v) = api.call(reqwest::Method::PUT, "/api/v1/environments/web", Some(setup_env())).await;
    assert_eq!(s, 201, "{v}");
    let (_, list) = api.get("/api/v1/environments").await;
    assert!(list["items"].as_array().unwrap().iter().any(|e| e["name"] == "web" && e["setup_secrets"][0] == "NPM_TOKEN"), "{list}");
    let repo = make_repo();

    // The first start sets up, and keeps the result.
    let (_, first) = start(&api, "web", repo.path()).await;
    let detail = first["detail"].as_str().unwrap();
    assert!(detail.contains("set up in") && detail.contains("kept"), "{first}");
    assert!(first["snapshot"].is_null(), "{first}");
    let ws1 = h.workspace(first["sandbox_id"].as_str().unwrap());
    assert_eq!(read(&ws1, "had-secret.txt"), "yes\n", "setup had the secret");
    assert_eq!(read(&ws1, "post-start.log"), "started\n");
    let installed = read(&ws1, "installed-at.txt");
    let list = snapshots(&api).await;
    let snap = &list["items"][0];
    assert_eq!(
        (snap["status"].as_str(), snap["environment"].as_str(), snap["kind"].as_str()),
        (Some("ready"), Some("web"), Some("process")),
        "{list}"
    );
    assert!(snap["size_bytes"].as_u64().unwrap() > 0 && list["used_bytes"] == snap["size_bytes"], "{list}");
    let log = snap["setup_log"].as_str().unwrap();
    assert!(log.contains("$ date +%s%N > installed-at.txt") && !log.contains(SECRET), "{log}");
    let snap_id = snap["id"].as_str().unwrap().to_owned();

    // The secret is nowhere the agent can look: not in its sandbox's files or processes, not in
    // the snapshot.
    let snap_dir = h.data.path().join("snapshots").join(&snap_id);
    assert!(snap_dir.join("workspace/installed-at.txt").is_file(), "the snapshot holds setup's results");
    assert!(snap_dir.join("home/.cache/tool/installed").is_file(), "and what setup left in home");
    assert!(!snap_dir.join("workspace/post-start.log").exists(), "post_start runs after the snapshot, on every start");
    assert_eq!(files_holding(&snap_dir, SECRET), Vec::<PathBuf>::new(), "the snapshot holds the secret");
    let root1 = ws1.parent().unwrap();
    assert_eq!(
        files_holding(root1, SECRET).iter().filter(|p| !p.ends_with("executor.log")).count(),
        0,
        "the sandbox's files hold the secret"
    );
    assert!(!sandbox_environments(&ws1).contains(SECRET), "a sandbox process has the secret in its environment");

    // The second start on the same key begins from the snapshot: setup does not run again.
    let (_, second) = start(&api, "web", repo.path()).await;
    assert_eq!(second["snapshot"], snap_id.as_str(), "{second}");
    assert!(second["detail"].as_str().unwrap().contains("setup skipped"), "{second}");
    let ws2 = h.workspace(second["sandbox_id"].as_str().unwrap());
    assert_eq!(read(&ws2, "installed-at.txt"), installed, "setup's results, not a new run");
    assert_eq!(read(&ws2, "post-start.log"), "started\n");
    assert!(!sandbox_environments(&ws2).contains(SECRET));

    // A new commit that leaves the lock file alone is fetched into the snapshot's workspace.
    commit(repo.path(), "feature.txt", "new work\n");
    let (_, third) = start(&api, "web", repo.path()).await;
    assert_eq!(third["snapshot"], snap_id.as_str(), "{third}");
    let ws3 = h.workspace(third["sandbox_id"].as_str().unwrap());
    assert_eq!(read(&ws3, "feature.txt"), "new work\n");
    assert_eq!(read(&ws3, "installed-at.txt"), installed);

    // A change to the lock file sets up again, and replaces the snapshot.
    commit(repo.path(), "deps.lock", "left-pad 2.0\n");
    let (_, fourth) = start(&api, "web", repo.path()).await;
    assert!(fourth["detail"].as_str().unwrap().contains("key changed"), "{fourth}");
    let ws4 = h.workspace(fourth["sandbox_id"].as_str().unwrap());
    assert_ne!(read(&ws4, "installed-at.txt"), installed, "setup ran again");
    assert_eq!(read(&ws4.parent().unwrap().join("home"), ".cache/tool/installed"), "left-pad 2.0\n");
    let list = snapshots(&api).await;
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "one snapshot per family: {list}");
    let new_id = items[0]["id"].as_str().unwrap().to_owned();
    assert_ne!(new_id, snap_id);
    assert!(!snap_dir.exists(), "the replaced snapshot's files are gone");

    // Listed and deleted from the command line, its files go, and the next start sets up again.
    let listed = cli(&h, &["environments", "snapshots"]);
    assert!(listed.contains(&new_id) && listed.contains("ready") && listed.contains("MiB used of 20480 MiB"), "{listed}");
    let deleted = cli(&h, &["environments", "delete", &new_id]);
    assert!(deleted.contains("sets up again"), "{deleted}");
    let gone = h.data.path().join("snapshots").join(&new_id);
    let deadline = Instant::now() + Duration::from_secs(20);
    while gone.exists() {
        assert!(Instant::now() < deadline, "the deleted snapshot's files stay");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(snapshots(&api).await["items"], json!([]));
}

#[tokio::test]
async fn failed_setup_is_a_start_error_and_quotas_refuse_in_words() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::finish("ok")]);
    llm.push([Reply::finish("ok")]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_SNAPSHOT_QUOTA_USER_MB", "1"));
    let api = h.api(ALICE);
    let (s, _) = api.call(reqwest::Method::PUT, "/api/v1/secrets/NPM_TOKEN", Some(json!({"value": SECRET}))).await;
    assert!(s == 201 || s == 200);
    let repo = make_repo();

    // Bad definitions and unknown names are refused before anything starts.
    let (s, v) = put(&api, "bad", json!({"cache_key": ["../../etc/passwd"]})).await;
    assert_eq!((s, v["error"]["code"].as_str()), (400, Some("invalid_field")), "{v}");
    let (s, v) = api.post("/api/v1/conversations", json!({"environment": "nope"})).await;
    assert_eq!((s, v["error"]["code"].as_str()), (400, Some("unknown_environment")), "{v}");
    let (s, v) = api.post("/api/v1/conversations", json!({"environment": "@acme/web"})).await;
    assert_eq!((s, v["error"]["code"].as_str()), (400, Some("unknown_environment")), "{v}");

    // A failing setup: its output in the error, the secret masked, no snapshot.
    let (s, _) = put(
        &api,
        "broken",
        json!({"setup": ["echo \"installing with $NPM_TOKEN\"; echo broken dependency >&2; exit 4"], "setup_secrets": ["NPM_TOKEN"]}),
    )
    .await;
    assert_eq!(s, 201);
    let url = repo.path().to_string_lossy();
    let (_, task) = api.post("/api/v1/conversations", json!({"environment": "broken", "repository": {"url": url}})).await;
    let task = api.wait_task(task["id"].as_str().unwrap(), &["READY", "ERROR"]).await;
    assert_eq!(task["status"], "ERROR", "{task}");
    let detail = task["detail"].as_str().unwrap();
    assert!(detail.contains("RUNNING_SETUP_SCRIPT") && detail.contains("exit code 4") && detail.contains("broken dependency"), "{detail}");
    assert!(!detail.contains(SECRET), "the secret is shown: {detail}");
    assert_eq!(snapshots(&api).await["items"], json!([]));

    // Setup that leaves more than the quota: the start goes on, the snapshot is refused in words.
    let (s, _) = put(&api, "big", json!({"setup": ["head -c 3000000 /dev/urandom > blob.bin"]})).await;
    assert_eq!(s, 201);
    let (_, task) = api.start_ready(json!({"environment": "big", "repository": {"url": url}})).await;
    let detail = task["detail"].as_str().unwrap();
    assert!(detail.contains("no snapshot") && detail.contains("quota of 1 MiB"), "{detail}");
    let list = snapshots(&api).await;
    assert_eq!(list["items"][0]["status"], "refused", "{list}");
    assert_eq!((list["used_bytes"].as_u64(), list["quota_bytes"].as_u64()), (Some(0), Some(1 << 20)), "{list}");
    // Nothing of it is left on disk, and the next start sets up again.
    let dir = h.data.path().join("snapshots");
    assert_eq!(std::fs::read_dir(&dir).map(|d| d.count()).unwrap_or(0), 0, "a refused snapshot's files stay");
    let (_, again) = api.start_ready(json!({"environment": "big", "repository": {"url": url}})).await;
    assert!(again["snapshot"].is_null() && again["detail"].as_str().unwrap().contains("set up in"), "{again}");
}

/// Halyard with Docker sandboxes (no spec pool), and a private git server of the bare
/// repositories under `repos` that Alice's git provider reaches with `token`.
async fn docker_with_repositories(llm: &ScriptedLlm, repos: &Path, token: &str) -> (Halyard, halyard_tests::GitServer) {
    docker_configured(llm, repos, token, None).await
}

/// [`docker_with_repositories`], with a configuration file (TOML: `HALYARD_CONFIG`).
async fn docker_configured(llm: &ScriptedLlm, repos: &Path, token: &str, config: Option<&Path>) -> (Halyard, halyard_tests::GitServer) {
    let server = halyard_tests::GitServer::start(repos.to_path_buf(), "x-access-token", token).await;
    let mut opts = HalyardOptions::new(&llm.base_url)
        .set("HALYARD_SANDBOX", "docker")
        .set("HALYARD_SANDBOX_POOL_SIZE", "0")
        .set("HALYARD_GIT_API_ALLOW", "loopback");
    if let Some(c) = config {
        opts = opts.set("HALYARD_CONFIG", &c.display().to_string());
    }
    let h = Halyard::start(opts);
    let provider = json!({"kind": "generic", "host": server.base.trim_start_matches("http://"), "token": token});
    assert_eq!(h.api(ALICE).call(reqwest::Method::PUT, "/api/v1/git-providers/local", Some(provider)).await.0, 201);
    (h, server)
}

/// The snapshot images of a deployment's snapshot `id`.
fn snapshot_images(id: &str) -> Vec<String> {
    let filter = format!("label=dev.halyard.snapshot={id}");
    docker(&["images", "-q", "--filter", &filter]).lines().map(str::to_owned).collect()
}

#[tokio::test]
async fn a_container_starts_from_its_environments_snapshot_image() {
    init();
    require_engine();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::finish("ok")]);
    llm.push([Reply::finish("ok")]);
    // A private repository behind git's own http-backend, cloned through the git proxy.
    let repos = tempfile::tempdir().unwrap();
    halyard_tests::bare_repository(repos.path(), "app.git", ("deps.lock", "left-pad 1.0\n"));
    let (h, server) = docker_with_repositories(&llm, repos.path(), "ghp_env-snapshot-token-7c1e").await;
    let api = h.api(ALICE);
    let (s, _) = api.call(reqwest::Method::PUT, "/api/v1/secrets/NPM_TOKEN", Some(json!({"value": SECRET}))).await;
    assert!(s == 201 || s == 200);
    let env = json!({
        "setup": [
            "date +%s%N > installed-at.txt",
            "if [ \"$NPM_TOKEN\" = \"$EXPECTED\" ]; then echo yes > had-secret.txt; fi",
            // Outside the workspace volume: in the container's own layer.
            "mkdir -p \"$HOME/.cache/tool\" && cat deps.lock > \"$HOME/.cache/tool/installed\"",
        ],
        "post_start": ["echo started >> post-start.log"],
        "env": {"EXPECTED": SECRET},
        "setup_secrets": ["NPM_TOKEN"],
        "cache_key": ["deps.lock"],
    });
    assert_eq!(put(&api, "web", env).await.0, 201);
    let body = json!({"message": "hi", "environment": "web", "secrets": [], "repository": {"url": format!("{}/app.git", server.base)}});
    let container = |task: &Value| format!("halyard-{}-{}", &h.deployment()[..12], task["sandbox_id"].as_str().unwrap());
    let cat = |c: &str, f: &str| docker(&["exec", c, "cat", f]);

    let (_, first) = api.start_ready(body.clone()).await;
    assert!(first["detail"].as_str().unwrap().contains("kept"), "{first}");
    let c1 = container(&first);
    assert_eq!(cat(&c1, "/workspace/had-secret.txt"), "yes");
    let installed = cat(&c1, "/workspace/installed-at.txt");
    let list = snapshots(&api).await;
    let snap = &list["items"][0];
    assert_eq!((snap["status"].as_str(), snap["kind"].as_str()), (Some("ready"), Some("docker")), "{list}");
    let id = snap["id"].as_str().unwrap().to_owned();
    assert_eq!(snapshot_images(&id).len(), 1, "one image holds the snapshot");

    // The snapshot (its image: what setup left outside the workspace; its workspace, a directory
    // of the host) holds setup's results, and neither the secret nor the session key.
    let image = snapshot_images(&id).remove(0);
    let look = "cat $HOME/.cache/tool/installed; env; \
                grep -rl \"$0\" / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev 2>/dev/null | head; ls /opt/halyard/run";
    let inside = docker(&["run", "--rm", "--network", "none", "--entrypoint", "sh", &image, "-c", look, SECRET]);
    assert!(inside.starts_with("left-pad 1.0"), "{inside}");
    assert_eq!(inside.matches(SECRET).count(), 0, "the snapshot's image holds the secret: {inside}");
    let workspace = h.data.path().join("snapshots").join(&id).join("workspace");
    assert_eq!(std::fs::read_to_string(workspace.join("installed-at.txt")).unwrap().trim(), installed);
    assert!(!workspace.join("post-start.log").exists(), "post_start's output is not in the snapshot");
    assert_eq!(files_holding(&workspace, SECRET), Vec::<PathBuf>::new(), "the snapshot's workspace holds the secret");

    // The next start's container comes from the snapshot: setup's results in the workspace and in
    // home, the repository fetched, post_start run again.
    let (_, second) = api.start_ready(body.clone()).await;
    assert_eq!(second["snapshot"], id.as_str(), "{second}");
    let c2 = container(&second);
    assert_eq!(cat(&c2, "/workspace/installed-at.txt"), installed);
    assert_eq!(cat(&c2, "/home/halyard/.cache/tool/installed"), "left-pad 1.0");
    assert_eq!(cat(&c2, "/workspace/post-start.log"), "started");
    assert_eq!(cat(&c2, "/workspace/deps.lock"), "left-pad 1.0");
    let environ = docker(&["exec", &c2, "sh", "-c", "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'"]);
    assert!(!environ.contains(SECRET), "a process of the sandbox has the secret");

    // A conversation's workspace is an overlay on the snapshot's: what it writes is its own.
    docker(&["exec", &c2, "sh", "-c", "echo mine > /workspace/installed-at.txt"]);
    assert_eq!(std::fs::read_to_string(workspace.join("installed-at.txt")).unwrap().trim(), installed, "the snapshot changed");
    let (_, third) = api.start_ready(body.clone()).await;
    assert_eq!(cat(&container(&third), "/workspace/installed-at.txt"), installed, "another conversation sees the first's change");
    let conv3 = third["conversation_id"].as_str().unwrap();
    assert_eq!(api.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{conv3}"), None).await.0, 202);

    // Deleted, its image and workspace go (once no sandbox runs on them).
    let conv2 = second["conversation_id"].as_str().unwrap();
    assert_eq!(api.call(reqwest::Method::DELETE, &format!("/api/v1/conversations/{conv2}"), None).await.0, 202);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !docker(&["ps", "-aq", "--filter", &format!("name={c2}")]).is_empty() {
        assert!(Instant::now() < deadline, "the deleted conversation's container stays");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (s, _) = api.call(reqwest::Method::DELETE, &format!("/api/v1/environments/snapshots/{id}"), None).await;
    assert_eq!(s, 204);
    let deadline = Instant::now() + Duration::from_secs(90);
    while !snapshot_images(&id).is_empty() || workspace.exists() {
        assert!(Instant::now() < deadline, "the deleted snapshot's image or workspace stays");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Commits `files` in the bare repository `root/name`'s source and pushes them to it.
fn push(root: &Path, name: &str, files: &[(&str, &str)]) {
    let src = root.join(format!("{name}.src"));
    for (file, text) in files {
        let path = src.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    git(&src, &["add", "."]);
    git(&src, &["commit", "-qm", "more"]);
    git(&src, &["push", "-q", root.join(name).to_str().unwrap(), "main"]);
}

#[tokio::test]
async fn a_repositorys_dev_container_is_built_set_up_once_and_started_from_its_snapshot() {
    init();
    require_engine();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::finish("ok")]);
    llm.push([Reply::finish("ok")]);
    let repos = tempfile::tempdir().unwrap();
    halyard_tests::bare_repository(repos.path(), "app.git", ("README.md", "the app\n"));
    let devcontainer = r#"{
        // The image: the project's Dockerfile, with an argument.
        "build": {"dockerfile": "Dockerfile", "args": {"GREETING": "hello"}},
        "remoteUser": "dev",
        "containerEnv": {"APP_MODE": "development"},
        "postCreateCommand": "date +%s%N > /workspace/created-at.txt && echo \"$APP_MODE\" > /workspace/mode.txt",
        "postStartCommand": ["sh", "-c", "echo started >> /workspace/post-start.log"],
    }"#;
    let dockerfile = "FROM halyard-base:bookworm\nARG GREETING\n\
                      RUN echo \"$GREETING from the dockerfile\" > /etc/devcontainer-marker && useradd -m -u 1001 dev\n";
    push(repos.path(), "app.git", &[(".devcontainer/devcontainer.json", devcontainer), (".devcontainer/Dockerfile", dockerfile)]);
    let (h, server) = docker_with_repositories(&llm, repos.path(), "ghp_devcontainer-token-41aa").await;
    let api = h.api(ALICE);
    let body = json!({"message": "hi", "repository": {"url": format!("{}/app.git", server.base)}});
    let container = |task: &Value| format!("halyard-{}-{}", &h.deployment()[..12], task["sandbox_id"].as_str().unwrap());
    let sh = |c: &str, script: &str| docker(&["exec", c, "sh", "-c", script]);

    // The first start builds the image, moves the sandbox onto it, runs postCreateCommand once
    // and keeps the result.
    let (_, first) = api.start_ready(body.clone()).await;
    let detail = first["detail"].as_str().unwrap();
    assert!(detail.contains("image ready") && detail.contains("set up in") && detail.contains("kept"), "{first}");
    let c1 = container(&first);
    assert_eq!(sh(&c1, "cat /etc/devcontainer-marker"), "hello from the dockerfile", "built from the repository's Dockerfile");
    assert_eq!(
        sh(&c1, "id -u; echo $APP_MODE; cat /workspace/mode.txt /workspace/post-start.log"),
        "1001\ndevelopment\ndevelopment\nstarted"
    );
    assert_eq!(sh(&c1, "cat /workspace/README.md"), "the app", "the clone stays when the sandbox moves onto the image");
    let created = sh(&c1, "cat /workspace/created-at.txt");
    let list = snapshots(&api).await;
    assert_eq!(list["items"][0]["environment"], ".devcontainer/devcontainer.json", "{list}");

    // The second starts from the snapshot: no build, no postCreateCommand, the same image and user.
    let (_, second) = api.start_ready(body.clone()).await;
    assert_eq!(second["snapshot"], list["items"][0]["id"], "{second}");
    let detail = second["detail"].as_str().unwrap();
    assert!(detail.contains("setup skipped") && !detail.contains("image ready"), "{second}");
    let c2 = container(&second);
    assert_eq!(sh(&c2, "cat /etc/devcontainer-marker; id -u; echo $APP_MODE"), "hello from the dockerfile\n1001\ndevelopment");
    assert_eq!(sh(&c2, "cat /workspace/created-at.txt"), created);
    assert_eq!(sh(&c2, "cat /workspace/post-start.log"), "started");

    // `features` need a registry: refused in words.
    push(
        repos.path(),
        "app.git",
        &[(
            ".devcontainer/devcontainer.json",
            r#"{"image": "halyard-base:bookworm", "features": {"ghcr.io/devcontainers/features/node:1": {}}}"#,
        )],
    );
    let (_, task) = api.post("/api/v1/conversations", body.clone()).await;
    let task = api.wait_task(task["id"].as_str().unwrap(), &["READY", "ERROR"]).await;
    let detail = task["detail"].as_str().unwrap_or_default();
    assert!(task["status"] == "ERROR" && detail.contains("features") && detail.contains("registry"), "{task}");

    // A named environment may build its containers from a Dockerfile of the repository too.
    push(repos.path(), "app.git", &[("ci/Dockerfile", "FROM halyard-base:bookworm\nRUN echo from ci > /etc/ci-marker\n")]);
    let env = json!({"dockerfile": "ci/Dockerfile", "setup": ["cat /etc/ci-marker > seen.txt"]});
    assert_eq!(put(&api, "ci", env).await.0, 201);
    let mut named = body.clone();
    named["environment"] = json!("ci");
    let (_, task) = api.start_ready(named).await;
    assert!(task["detail"].as_str().unwrap().contains("ci's image ready"), "{task}");
    assert_eq!(sh(&container(&task), "cat /workspace/seen.txt"), "from ci");
    let (s, v) = put(&api, "bad", json!({"image": "halyard-base:bookworm", "dockerfile": "ci/Dockerfile"})).await;
    assert_eq!((s, v["error"]["code"].as_str()), (400, Some("invalid_field")), "{v}");
}

#[tokio::test]
async fn an_environments_pool_serves_starts_without_setup_and_is_resized_at_run_time() {
    init();
    require_engine();
    let llm = ScriptedLlm::start().await;
    for _ in 0..3 {
        llm.push([Reply::finish("ok")]);
    }
    let repos = tempfile::tempdir().unwrap();
    halyard_tests::bare_repository(repos.path(), "app.git", ("deps.lock", "left-pad 1.0\n"));
    let (h, server) = docker_with_repositories(&llm, repos.path(), "ghp_env-pool-token-93d0").await;
    let api = h.api(ALICE);
    let env = json!({"setup": ["date +%s%N > installed-at.txt"], "cache_key": ["deps.lock"], "pool_size": 2});
    assert_eq!(put(&api, "web", env.clone()).await.0, 201);
    let body = json!({"message": "hi", "environment": "web", "repository": {"url": format!("{}/app.git", server.base)}});
    let (_, first) = api.start_ready(body.clone()).await;
    assert_eq!(first["from_pool"], false);
    let container = |task: &Value| format!("halyard-{}-{}", &h.deployment()[..12], task["sandbox_id"].as_str().unwrap());
    let installed = docker(&["exec", &container(&first), "cat", "/workspace/installed-at.txt"]);

    // The snapshot's pool fills to two.
    let pool_ready = || async { snapshots(&api).await["items"][0]["pool_ready"].as_u64().unwrap_or(0) };
    let deadline = Instant::now() + Duration::from_secs(60);
    while pool_ready().await < 2 {
        assert!(Instant::now() < deadline, "the pool did not fill: {}", snapshots(&api).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let id = snapshots(&api).await["items"][0]["id"].as_str().unwrap().to_owned();

    // Two starts at once each take one: running, set up, nothing run again.
    let (a, b) = tokio::join!(api.start_ready(body.clone()), api.start_ready(body.clone()));
    for (_, task) in [&a, &b] {
        assert_eq!((task["from_pool"].as_bool(), task["snapshot"].as_str()), (Some(true), Some(id.as_str())), "{task}");
        assert!(task["detail"].as_str().unwrap().contains("setup skipped"), "{task}");
        assert_eq!(docker(&["exec", &container(task), "cat", "/workspace/installed-at.txt"]), installed);
    }
    assert_ne!(a.1["sandbox_id"], b.1["sandbox_id"]);

    // Resized to nothing at run time: the pool's containers go.
    // (Containers taken from the pool keep its label; they are renamed for their sandbox.)
    let pooled = || {
        let names = docker(&["ps", "-a", "--format", "{{.Names}}", "--filter", &format!("label=dev.halyard.pool=snapshot-{id}")]);
        names.lines().filter(|n| n.contains("-pool-")).map(str::to_owned).collect::<Vec<_>>().join("\n")
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while pooled().lines().count() < 2 {
        assert!(Instant::now() < deadline, "the pool did not refill after the starts");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut resized = env.clone();
    resized["pool_size"] = json!(0);
    assert_eq!(put(&api, "web", resized).await.0, 200);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !pooled().is_empty() {
        assert!(Instant::now() < deadline, "the pool's containers stay after it was resized to 0");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(snapshots(&api).await["items"][0]["pool_size"], 0);
}

/// A TCP server on every address of the host that answers `host-reached` to anyone.
fn host_server() -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0u8; 256];
            let _ = conn.set_read_timeout(Some(Duration::from_millis(200)));
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(b"host-reached\n");
        }
    });
    port
}

/// Python (in the base image): connects to the container's default gateway (the host, on a
/// network with a way out) at `port` and prints what it answers, or the error.
fn reach_host(port: u16) -> String {
    format!(
        "python3 -c '\nimport socket,struct\ntry:\n gw=[l.split()[2] for l in open(\"/proc/net/route\").readlines()[1:] if l.split()[1]==\"00000000\"][0]\n \
         ip=socket.inet_ntoa(struct.pack(\"<L\", int(gw, 16)))\n s=socket.create_connection((ip, {port}), timeout=3)\n print(s.recv(64).decode().strip())\n\
         except Exception as e: print(\"Error\", type(e).__name__)'"
    )
}

/// The container's memory and process limits as it sees them (cgroup v2, else v1).
const MEMORY_MAX: &str = "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes";
const PIDS_MAX: &str = "cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max";

#[tokio::test]
async fn an_environment_sets_its_spec_setups_network_its_limits_and_its_forwarded_ports() {
    init();
    require_engine();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::finish("ok")]);
    llm.push([Reply::finish("ok")]);
    // The operator's specs: the default, and `offline` (no network at all) with its ceilings.
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        config.path(),
        "[[sandbox.specs]]\nname = \"default\"\n\n[[sandbox.specs]]\nname = \"offline\"\negress = \"none\"\nmemory_mb = 1024\npids_limit = 256\n",
    )
    .unwrap();
    let repos = tempfile::tempdir().unwrap();
    halyard_tests::bare_repository(repos.path(), "app.git", ("README.md", "the app\n"));
    let (h, server) = docker_configured(&llm, repos.path(), "ghp_env-shape-token-5d2b", Some(config.path())).await;
    let api = h.api(ALICE);
    let port = host_server();
    let container = |task: &Value| format!("halyard-{}-{}", &h.deployment()[..12], task["sandbox_id"].as_str().unwrap());
    let sh = |c: &str, script: &str| docker(&["exec", c, "sh", "-c", script]);

    // Beyond the spec's ceilings, or a class that is none: refused in words.
    let (s, v) = put(&api, "big", json!({"spec": "offline", "resources": {"memory_mb": 4096}})).await;
    assert_eq!((s, v["error"]["code"].as_str()), (400, Some("invalid_field")), "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("more than spec `offline` allows (1024)"), "{v}");
    let (s, v) = put(&api, "wide", json!({"setup_egress": "everywhere"})).await;
    assert!(s == 400 && v["error"]["message"].as_str().unwrap().contains("open, internet or none"), "{v}");
    let (s, v) = put(&api, "nospec", json!({"spec": "huge"})).await;
    assert!(s == 400 && v["error"]["message"].as_str().unwrap().contains("default, offline"), "{v}");

    // Setup installs from the host (the open network); the agent gets no network at all, half
    // the spec's memory, fewer processes, and the app on port 3000 as an app of its own.
    let env = json!({
        "spec": "offline",
        "setup_egress": "open",
        "setup": [format!("{} > reached.txt", reach_host(port))],
        "resources": {"memory_mb": 512, "pids_limit": 200},
        "forward_ports": [3000],
    });
    assert_eq!(put(&api, "offline-app", env).await.0, 201);
    let body = json!({"message": "hi", "environment": "offline-app", "repository": {"url": format!("{}/app.git", server.base)}});
    let (conv, first) = api.start_ready(body.clone()).await;
    assert!(first["detail"].as_str().unwrap().contains("set up in"), "{first}");
    let c1 = container(&first);
    assert_eq!(sh(&c1, "cat /workspace/reached.txt"), "host-reached", "setup ran on its own, wider network");
    let networks = docker(&["inspect", "-f", "{{range $n, $_ := .NetworkSettings.Networks}}{{$n}} {{end}}", &c1]);
    assert!(networks.trim().ends_with("-none") && !networks.contains("-open"), "the agent's network: {networks}");
    assert!(sh(&c1, &reach_host(port)).starts_with("Error"), "the agent reaches the host");
    assert_eq!(sh(&c1, &format!("{MEMORY_MAX}; {PIDS_MAX}")), format!("{}\n200", 512 << 20));
    let (_, sandbox) = api.get(&format!("/api/v1/sandboxes/{}", first["sandbox_id"].as_str().unwrap())).await;
    assert_eq!(sandbox["spec"], "offline", "{sandbox}");
    let names: Vec<&str> = sandbox["exposed_urls"].as_array().unwrap().iter().filter_map(|u| u["name"].as_str()).collect();
    assert!(names.contains(&"PORT_3000"), "{sandbox}");

    // The forwarded port, through the apps proxy on an origin of its own, to the sandbox's
    // loopback (where nothing else reaches on a network-less container).
    docker(&["exec", "-d", &c1, "sh", "-c", "cd /workspace && exec python3 -m http.server 3000 --bind 127.0.0.1"]);
    let (status, link) = api.post(&format!("/api/v1/conversations/{conv}/apps/PORT_3000"), json!({})).await;
    assert_eq!(status, 200, "{link}");
    let url = reqwest::Url::parse(link["url"].as_str().unwrap()).unwrap();
    let host = url.host_str().unwrap().to_owned();
    assert!(host.ends_with("-port-3000.localhost"), "{url}");
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let apps = format!("http://{}", h.apps);
    let opened = client.get(format!("{apps}{}?{}", url.path(), url.query().unwrap())).header("host", &host).send().await.unwrap();
    assert_eq!(opened.status(), 303);
    let cookie = opened.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    let mut page = String::new();
    for _ in 0..50 {
        let res = client.get(format!("{apps}/README.md")).header("host", &host).header("cookie", &cookie).send().await.unwrap();
        if res.status() == 200 {
            page = res.text().await.unwrap();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(page, "the app\n", "the app on the forwarded port");
    let (status, _) = h.api("bob-secret-key").post(&format!("/api/v1/conversations/{conv}/apps/PORT_3000"), json!({})).await;
    assert_eq!(status, 404, "another user opens Alice's app");

    // From the snapshot: on its own network from the start, with its limits and ports.
    let (_, second) = api.start_ready(body).await;
    assert!(second["detail"].as_str().unwrap().contains("setup skipped"), "{second}");
    let c2 = container(&second);
    assert_eq!(sh(&c2, &format!("cat /workspace/reached.txt; {MEMORY_MAX}")), format!("host-reached\n{}", 512 << 20));
    assert!(sh(&c2, &reach_host(port)).starts_with("Error"), "the agent reaches the host");
}

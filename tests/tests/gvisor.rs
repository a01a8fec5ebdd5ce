#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! gVisor, as an operator, an organization and a user ask for it: a spec's `runtime`, an
//! organization that requires it for all its conversations (a start in it that names a runc
//! spec is refused in words; one that names none gets a gVisor spec), and an environment that
//! asks for it. The agent's commands then meet gVisor's kernel (its `dmesg` says so; runc's
//! refuses), and hibernation and waking work under it as under runc. (The hostile-agent probes
//! under gVisor are in `security.rs`.)

use halyard_tests::docker::{docker, require_engine};
use halyard_tests::{Api, Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use reqwest::Method;
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";

fn terminal(command: &str) -> Reply {
    Reply::tool("terminal", json!({"command": command, "security_risk": "low"}))
}

/// Starts `body` (the agent runs `command`, then finishes); the conversation, its container and
/// what the command printed.
async fn run(llm: &ScriptedLlm, h: &Halyard, api: &Api, body: Value, command: &str) -> (String, String, String) {
    llm.push([terminal(command), Reply::finish("done")]);
    let (conv, task) = api.start_ready(body).await;
    let events = api.wait_finished(&conv, 1).await;
    let out =
        events.iter().find(|e| e["kind"] == "observation" && e["tool"] == "terminal").unwrap()["content"].as_str().unwrap().to_owned();
    let container = format!("halyard-{}-{}", &h.deployment()[..12], task["sandbox_id"].as_str().unwrap());
    (conv, container, out)
}

const KERNEL: &str = "dmesg 2>&1 | head -1; echo kept > kept.txt";

#[tokio::test]
async fn an_organization_requiring_gvisor_and_an_environment_asking_for_it_run_their_conversations_under_it() {
    init();
    require_engine();
    let llm = ScriptedLlm::start().await;
    let config = tempfile::NamedTempFile::new().unwrap();
    let specs = "[[sandbox.specs]]\nname = \"default\"\n\n[[sandbox.specs]]\nname = \"sandboxed\"\nruntime = \"gvisor\"\n";
    std::fs::write(config.path(), specs).unwrap();
    let h = Halyard::start(
        HalyardOptions::new(&llm.base_url)
            .set("HALYARD_SANDBOX", "docker")
            .set("HALYARD_SANDBOX_POOL_SIZE", "0")
            .set("HALYARD_SANDBOX_IDLE_STOP_SECS", "4")
            .set("HALYARD_CONFIG", &config.path().display().to_string()),
    );
    let api = h.api(ALICE);
    let (_, specs) = api.get("/api/v1/sandbox-specs").await;
    let runtimes: Vec<(&str, &str)> =
        specs["items"].as_array().unwrap().iter().map(|s| (s["name"].as_str().unwrap(), s["runtime"].as_str().unwrap())).collect();
    assert_eq!(runtimes, [("default", "runc"), ("sandboxed", "gvisor")], "{specs}");

    // By default: runc, the host's kernel (which keeps its log from the agent).
    let (_, container, out) = run(&llm, &h, &api, json!({"message": "where am I"}), KERNEL).await;
    assert!(out.contains("Operation not permitted") && !out.contains("gVisor"), "{out}");
    assert_eq!(docker(&["inspect", "-f", "{{.HostConfig.Runtime}}", &container]), "runc");

    // An organization that requires gVisor: a start in it naming a runc spec is refused in
    // words; one naming none runs under gVisor.
    assert_eq!(api.post("/api/v1/orgs", json!({"name": "acme"})).await.0, 201);
    let (s, e) = api.call(Method::PUT, "/api/v1/orgs/acme/settings", Some(json!({"sandbox_runtime": "kvm"}))).await;
    assert!(s == 400 && e["error"]["message"].as_str().unwrap().contains("runc or gvisor"), "{e}");
    let (s, settings) = api.call(Method::PUT, "/api/v1/orgs/acme/settings", Some(json!({"sandbox_runtime": "gvisor"}))).await;
    assert_eq!((s, settings["sandbox_runtime"].as_str()), (200, Some("gvisor")), "{settings}");
    let (s, e) = api.post("/api/v1/conversations", json!({"message": "x", "org": "acme", "sandbox_spec": "default"})).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("runtime_required")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("sandboxed"), "{e}");
    let (_, container, out) = run(&llm, &h, &api, json!({"message": "where am I", "org": "acme"}), KERNEL).await;
    assert!(out.contains("Starting gVisor"), "{out}");
    assert_eq!(docker(&["inspect", "-f", "{{.HostConfig.Runtime}}", &container]), "runsc");

    // An environment that asks for gVisor: the start that names it runs under it; one that
    // also names a runc spec contradicts itself and is refused when written.
    let (s, e) = api.call(Method::PUT, "/api/v1/environments/both", Some(json!({"runtime": "gvisor", "spec": "default"}))).await;
    assert!(s == 400 && e["error"]["message"].as_str().unwrap().contains("`runtime`"), "{e}");
    let (s, env) = api.call(Method::PUT, "/api/v1/environments/isolated", Some(json!({"runtime": "gvisor"}))).await;
    assert_eq!((s, env["runtime"].as_str()), (201, Some("gvisor")), "{env}");
    let (conv, container, out) = run(&llm, &h, &api, json!({"message": "where am I", "environment": "isolated"}), KERNEL).await;
    assert!(out.contains("Starting gVisor"), "{out}");
    assert_eq!(docker(&["inspect", "-f", "{{.HostConfig.Runtime}}", &container]), "runsc");

    // Hibernated (its container stopped) and woken by a message, still under gVisor, its
    // files kept.
    let (_, view) = api.get(&format!("/api/v1/conversations/{conv}")).await;
    let sandbox = view["sandbox_id"].as_str().unwrap().to_owned();
    api.wait_sandbox(&sandbox, "the idle sandbox to hibernate", |s| s["status"] == "HIBERNATED").await;
    assert_eq!(docker(&["inspect", "-f", "{{.State.Status}}", &container]), "exited");
    llm.push([terminal("cat kept.txt; dmesg 2>&1 | head -1"), Reply::finish("done")]);
    assert_eq!(api.post(&format!("/api/v1/conversations/{conv}/messages"), json!({"text": "again"})).await.0, 202);
    let events = api.wait_finished(&conv, 2).await;
    let out = events.iter().rev().find(|e| e["kind"] == "observation" && e["tool"] == "terminal").unwrap()["content"].as_str().unwrap();
    assert!(out.contains("kept") && out.contains("Starting gVisor"), "{out}");
    assert_eq!(docker(&["inspect", "-f", "{{.HostConfig.Runtime}}", &container]), "runsc");
}

/// Docker inside a sandbox (`docker = true` on a spec) needs gVisor's Docker-in-gVisor mode
/// (runsc from 2024-02 on). Where it cannot be had, Halyard refuses to start, saying why: under
/// runc (a privileged container), with process sandboxes, and under this engine's runsc when it
/// is older (Debian's is from 2022-12).
#[test]
fn docker_inside_a_sandbox_is_refused_in_words_where_the_runtime_cannot_run_it() {
    init();
    require_engine();
    let version = std::process::Command::new("runsc").arg("--version").output().expect("runsc installed");
    let version = String::from_utf8_lossy(&version.stdout).into_owned();
    let release: String = version.split(['~', '-']).nth(1).unwrap_or_default().chars().take_while(char::is_ascii_digit).collect();
    let gvisor_words = if release.as_str() < "20240201" {
        format!("runsc has from 2024-02 on; this engine's `runsc` is from {}-{}-{}", &release[..4], &release[4..6], &release[6..])
    } else {
        "does not set up dockerd in its sandboxes yet".to_owned()
    };
    let cases = [
        ("docker", "gvisor", gvisor_words.as_str()),
        ("docker", "runc", "`docker = true` needs `runtime = \"gvisor\"`: under runc dockerd needs a privileged container"),
        ("process", "gvisor", "`docker = true` needs container sandboxes under gVisor; this deployment runs process sandboxes"),
    ];
    for (kind, runtime, words) in cases {
        let config = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(config.path(), format!("[[sandbox.specs]]\nname = \"builder\"\nruntime = \"{runtime}\"\ndocker = true\n")).unwrap();
        let opts = HalyardOptions::new("http://127.0.0.1:9")
            .set("HALYARD_SANDBOX", kind)
            .set("HALYARD_SANDBOX_DEFAULT_SPEC", "builder")
            .set("HALYARD_CONFIG", &config.path().display().to_string());
        let log = Halyard::start_refused(opts);
        assert!(log.contains("spec builder: ") && log.contains(words), "{kind} {runtime}: {log}");
    }
}

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! The executor's VS Code on the code-server that `infra/install-code-server.sh` installs:
//! reached only with the session key, started by the first request, serving its workbench on
//! the workspace through `/vscode/…`, and stopped (its processes gone) once unused.

mod common;

use std::time::Duration;

use halyard_executor::ExecutorConfig;
use halyard_protocol::executor::SESSION_KEY_HEADER;

const KEY: &str = "vscode-test-key-0123456789abcdef0123456789";

async fn executor(workspace: &std::path::Path, idle: Duration) -> String {
    common::serve(ExecutorConfig { vscode_idle: idle, ..common::config(workspace, KEY) }).await
}

/// Processes whose command line names code-server and `dir`.
fn code_servers_for(dir: &std::path::Path) -> usize {
    let dir = dir.to_string_lossy();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains("code-server") && c.contains(dir.as_ref()))
        .count()
}

async fn vscode_running(http: &reqwest::Client, base: &str) -> bool {
    let health: serde_json::Value = http.get(format!("{base}/health")).send().await.unwrap().json().await.unwrap();
    health["vscode"].as_bool().unwrap()
}

#[tokio::test]
async fn vscode_starts_on_demand_serves_the_workspace_and_stops_when_unused() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello.py"), "print('hi')\n").unwrap();
    let base = executor(dir.path(), Duration::from_secs(2)).await;
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();

    let refused = http.get(format!("{base}/vscode/")).send().await.unwrap();
    assert_eq!(refused.status(), 401, "no session key, no VS Code");
    assert!(!vscode_running(&http, &base).await, "nothing started for a refused request");

    let started =
        http.post(format!("{base}/vscode")).header(SESSION_KEY_HEADER, KEY).timeout(Duration::from_secs(90)).send().await.unwrap();
    assert_eq!(started.status(), 200, "{:?}", started.text().await);
    assert!(vscode_running(&http, &base).await);
    assert!(code_servers_for(dir.path()) >= 1, "code-server runs on the workspace");

    // The workbench, as the apps proxy asks for it: under /vscode, with the public host.
    let host = "0123-vscode.localhost:3001";
    let get = |path: &str| {
        http.get(format!("{base}/vscode{path}"))
            .header(SESSION_KEY_HEADER, KEY)
            .header("host", host)
            .header("x-forwarded-host", host)
            // As a browser asks for a page: compressed if it may be.
            .header("accept", "text/html,application/xhtml+xml")
            .header("accept-encoding", "gzip, deflate, br")
            .timeout(Duration::from_secs(60))
            .send()
    };
    let root = get("/").await.unwrap();
    let mut page = root;
    if page.status().is_redirection() {
        let to = page.headers()["location"].to_str().unwrap().to_owned();
        assert!(to.contains("folder="), "code-server opens the workspace folder: {to}");
        let to = to.trim_start_matches('.').trim_start_matches(&format!("http://{host}")).to_owned();
        page = get(if to.starts_with('/') { to.clone() } else { format!("/{to}") }.as_str()).await.unwrap();
    }
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains("workbench"), "the workbench page: {}", &html[..html.len().min(400)]);
    // With Halyard's storage script first (for browsers that refuse storage to its iframe).
    let head = html.find("<head>").unwrap();
    assert!(html[head..].starts_with("<head><script src=\"./_halyard/storage.js\"></script>"), "{}", &html[..html.len().min(600)]);
    let script = get("/_halyard/storage.js").await.unwrap();
    assert_eq!(script.headers()["content-type"], "text/javascript; charset=utf-8");
    assert!(script.text().await.unwrap().contains("localStorage"));

    // Unused for longer than its idle time: stopped, all of it.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(!vscode_running(&http, &base).await, "stopped when unused");
    let mut left = code_servers_for(dir.path());
    for _ in 0..20 {
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        left = code_servers_for(dir.path());
    }
    assert_eq!(left, 0, "no code-server process is left");

    // And the next request starts it again.
    let again = get("/").await.unwrap();
    assert!(again.status().is_success() || again.status().is_redirection(), "{}", again.status());
    assert!(vscode_running(&http, &base).await);
}

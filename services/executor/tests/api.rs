#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! The executor's HTTP API on a real port: the session key (and its hand-over to a warm-pool
//! sandbox's new owner), and the idle time the supervisor's idle pause reads.

mod common;

use std::time::Duration;

use serde_json::{Value, json};

const KEY: &str = "pool-slot-key-0123456789abcdef0123456789";
const NEW_KEY: &str = "sandbox-key-fedcba9876543210fedcba98765432";

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

async fn start(workspace: &std::path::Path) -> String {
    common::serve(common::config(workspace, KEY)).await
}

async fn exec(http: &reqwest::Client, base: &str, key: &str, command: &str) -> (u16, Value) {
    let resp = http
        .post(format!("{base}/shell/exec"))
        .header(halyard_protocol::executor::SESSION_KEY_HEADER, key)
        .json(&json!({"command": command, "timeout_secs": 10}))
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn the_key_can_be_handed_over_and_the_old_one_stops_working() {
    let dir = tempfile::tempdir().unwrap();
    let base = start(dir.path()).await;
    let http = client();
    assert_eq!(exec(&http, &base, KEY, "echo hi").await.0, 200);
    let rotate = |key: &'static str, new: &'static str| {
        let http = http.clone();
        let base = base.clone();
        async move {
            http.post(format!("{base}/session-key"))
                .header(halyard_protocol::executor::SESSION_KEY_HEADER, key)
                .json(&json!({"key": new}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(rotate("wrong-key", NEW_KEY).await, 401, "only the current key may rotate");
    assert_eq!(rotate(KEY, "short").await, 400, "a short key is refused");
    assert_eq!(rotate(KEY, NEW_KEY).await, 204);
    assert_eq!(exec(&http, &base, KEY, "echo hi").await.0, 401, "the old key is dead");
    let (status, out) = exec(&http, &base, NEW_KEY, "echo hi").await;
    assert_eq!(status, 200, "{out}");
    assert!(out["output"].as_str().unwrap().starts_with("hi"));
}

#[tokio::test]
async fn idle_time_is_zero_while_a_command_runs_and_grows_after() {
    let dir = tempfile::tempdir().unwrap();
    let base = start(dir.path()).await;
    let http = client();
    let health = || {
        let http = http.clone();
        let base = base.clone();
        async move { http.get(format!("{base}/health")).send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let running = {
        let (http, base) = (http.clone(), base.clone());
        tokio::spawn(async move { exec(&http, &base, KEY, "sleep 1").await })
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(health().await["idle_ms"], 0, "a running command is activity");
    assert_eq!(running.await.unwrap().0, 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle = health().await["idle_ms"].as_u64().unwrap();
    assert!(idle >= 250, "idle {idle} ms after the command ended");
}

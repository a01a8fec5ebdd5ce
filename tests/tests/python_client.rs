#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! A client in another language (Python, with nats-py and msgpack) follows a conversation's
//! events from NATS and decodes them, using only what `protocol/README.md` documents.

use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use serde_json::{Value, json};

#[tokio::test]
async fn python_decodes_events_from_nats() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([Reply::tool("terminal", json!({"command": "echo from-python-test"})), Reply::finish("ok")]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let api = h.api("alice-secret-key");
    let (conv, _) = api.start_ready(json!({"message": "hi from rust"})).await;
    let events = api.wait_finished(&conv, 1).await;

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../protocol/examples/follow_events.py");
    // As an external program would: with the read-only role's credentials.
    let (user, password) = h.nats_credentials("reader");
    let out = tokio::process::Command::new("python3")
        .arg(script)
        .args(["--nats", &h.nats, "--user", &user, "--password", &password])
        .args(["--conversation", &conv, "--until-seq", &events.len().to_string(), "--idle-timeout", "20"])
        .output()
        .await
        .expect("run python3");
    assert!(
        out.status.success(),
        "the Python client failed (needs `pip install nats-py msgpack`): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decoded: Vec<Value> = String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("json line")).collect();
    assert_eq!(decoded.len(), events.len());
    for (py, http) in decoded.iter().zip(&events) {
        assert_eq!(py["seq"], http["seq"]);
        assert_eq!(py["id"], http["id"]);
        assert_eq!(py["conversation_id"], conv.as_str());
        assert_eq!(py["body"]["kind"], http["kind"]);
        assert_eq!(py["envelope_kind"], format!("event.{}", http["kind"].as_str().unwrap()));
        assert_eq!(py["source"], http["source"]);
    }
    let user = decoded.iter().find(|e| e["body"]["kind"] == "user_message").unwrap();
    assert_eq!(user["body"]["text"], "hi from rust");
    let obs = decoded.iter().find(|e| e["body"]["kind"] == "observation").unwrap();
    assert!(obs["body"]["content"].as_str().unwrap().contains("from-python-test"));
}

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! The model side as a user checks it: several tool calls of one answer that only read run at
//! once (timed by an MCP server of the Python SDK that says when each call started and ended),
//! one that changes something runs alone; a profile whose provider fails hands the call to its
//! fallbacks; and a profile lists the models its provider offers.

use std::time::Duration;

use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use reqwest::Method;
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";

fn finished(ev: &[Value]) -> bool {
    ev.iter().any(|e| e["kind"] == "execution_status" && (e["status"] == "finished" || e["status"] == "error"))
}

/// `tests/servers/mcp_clock.py` on a free port.
struct ClockServer {
    url: String,
    child: std::process::Child,
}

impl ClockServer {
    async fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/servers/mcp_clock.py");
        let child = std::process::Command::new("python3")
            .args([script, &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("python3 runs the MCP clock server (tests/install-deps.sh installs the `mcp` package)");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(std::time::Instant::now() < deadline, "the MCP clock server did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Self { url: format!("http://127.0.0.1:{port}/mcp"), child }
    }
}

impl Drop for ClockServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn calls_that_only_read_overlap_and_one_that_changes_runs_alone() {
    init();
    let clock = ClockServer::start().await;
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_MCP_ALLOW", "loopback"));
    let alice = h.api(ALICE);
    let (s, v) = alice.call(Method::PUT, "/api/v1/mcp-servers/clock", Some(json!({"transport": "http", "url": clock.url}))).await;
    assert_eq!(s, 201, "{v}");
    let look = |name: &str, seconds: f64| ("clock__look".to_owned(), json!({"name": name, "seconds": seconds}));
    llm.push([
        Reply::Tools(
            Some("Three looks, a mark, a look, and a search.".into()),
            vec![
                look("a", 1.0),
                look("b", 1.0),
                look("c", 1.0),
                ("clock__mark".into(), json!({"name": "d", "seconds": 0.5, "security_risk": "low"})),
                look("e", 0.3),
                ("grep".into(), json!({"pattern": "needle"})),
            ],
        ),
        Reply::finish("looked"),
    ]);
    let (conv, _) = alice.start_ready(json!({"message": "look around"})).await;
    let events = alice.wait_events(&conv, "the run", finished).await;
    let all = Value::Array(events.clone()).to_string();
    assert!(all.contains("\"finished\""), "{all}");

    // Observations come in the calls' order, whatever order the calls ended in.
    let observed: Vec<&Value> = events.iter().filter(|e| e["kind"] == "observation" && e["tool"] != "finish").collect();
    let tools: Vec<&str> = observed.iter().map(|e| e["tool"].as_str().unwrap()).collect();
    assert_eq!(tools, ["clock__look", "clock__look", "clock__look", "clock__mark", "clock__look", "grep"], "{all}");
    // Each clock answer: `<tool> <name> <start> <end>`.
    let times: Vec<(String, f64, f64)> = observed[..5]
        .iter()
        .map(|e| {
            let words: Vec<&str> = e["content"].as_str().unwrap().split_whitespace().collect();
            assert_eq!(words.len(), 4, "{e}");
            (words[1].to_owned(), words[2].parse().unwrap(), words[3].parse().unwrap())
        })
        .collect();
    let names: Vec<&str> = times.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names, ["a", "b", "c", "d", "e"]);
    let (reads, mark, after) = (&times[..3], &times[3], &times[4]);
    // The three looks overlapped: each began before any of them ended.
    let last_start = reads.iter().map(|t| t.1).fold(f64::MIN, f64::max);
    let first_end = reads.iter().map(|t| t.2).fold(f64::MAX, f64::min);
    assert!(last_start < first_end, "the three reading calls ran one after another: {times:?}");
    // The mark ran alone: after the looks before it, before the look after it.
    let reads_end = reads.iter().map(|t| t.2).fold(f64::MIN, f64::max);
    assert!(mark.1 >= reads_end, "the changing call overlapped the reads before it: {times:?}");
    assert!(after.1 >= mark.2, "the read after the changing call began before it ended: {times:?}");
}

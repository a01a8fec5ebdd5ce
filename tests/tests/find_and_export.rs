#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Found, not scrolled (issue 22): a conversation's events filtered by kind, source and text,
//! counted with the same filters and fetched one by one; the conversation list searched and
//! counted; and the whole conversation exported as JSON lines and as a Markdown transcript.

use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";
const BOB: &str = "bob-secret-key";

fn seqs(page: &Value) -> Vec<u64> {
    page["items"].as_array().unwrap().iter().map(|e| e["seq"].as_u64().unwrap()).collect()
}

#[tokio::test]
async fn events_are_found_counted_and_exported() {
    init();
    let llm = ScriptedLlm::start().await;
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let alice = h.api(ALICE);
    llm.push([
        Reply::tool("terminal", json!({"command": "echo zebra-crossing", "security_risk": "low"})),
        Reply::tool("terminal", json!({"command": "echo '```fenced```'; exit 3", "security_risk": "low"})),
        Reply::finish("All done with the Zebra."),
    ]);
    let (conv, _) = alice.start_ready(json!({"message": "find the zebra", "title": "Zebra hunt"})).await;
    let events = alice.wait_finished(&conv, 1).await;
    let base = format!("/api/v1/conversations/{conv}");
    let expect = |pred: &dyn Fn(&Value) -> bool| events.iter().filter(|e| pred(e)).map(|e| e["seq"].as_u64().unwrap()).collect::<Vec<_>>();

    // By kind (one or several), by source, by words in any case, and all together.
    let (s, page) = alice.get(&format!("{base}/events?kind=observation")).await;
    assert_eq!(s, 200, "{page}");
    let observations = expect(&|e| e["kind"] == "observation");
    assert_eq!((seqs(&page), page["has_more"].as_bool()), (observations.clone(), Some(false)));
    assert_eq!(expect(&|e| e["kind"] == "observation" && e["tool"] == "terminal").len(), 2);
    let (_, page) = alice.get(&format!("{base}/events?kind=action,observation")).await;
    assert_eq!(seqs(&page), expect(&|e| e["kind"] == "observation" || e["kind"] == "action"));
    let (_, page) = alice.get(&format!("{base}/events?source=user")).await;
    assert_eq!(seqs(&page), expect(&|e| e["source"] == "user"));
    assert!(!seqs(&page).is_empty());
    let (_, page) = alice.get(&format!("{base}/events?q=ZEBRA")).await;
    let zebra = expect(&|e| e.to_string().to_lowercase().contains("zebra"));
    assert_eq!(seqs(&page), zebra);
    assert!(zebra.len() >= 4, "the message, the command, its output and the answer: {zebra:?}");
    let (_, page) = alice.get(&format!("{base}/events?q=zebra%20crossing&kind=observation&source=environment,agent")).await;
    assert_eq!(seqs(&page), vec![observations[0]], "{page}");
    // A page of a filtered list says where the next begins, and the next page begins there.
    let (_, first) = alice.get(&format!("{base}/events?q=zebra&limit=2")).await;
    assert_eq!((seqs(&first), first["has_more"].as_bool()), (zebra[..2].to_vec(), Some(true)));
    let (_, rest) = alice.get(&format!("{base}/events?q=zebra&after_seq={}", first["next_after_seq"])).await;
    assert_eq!(seqs(&rest), zebra[2..].to_vec());

    // Counted with the same filters.
    assert_eq!(alice.get(&format!("{base}/events/count?kind=observation")).await.1, json!({"count": observations.len()}));
    assert_eq!(alice.get(&format!("{base}/events/count?q=zebra")).await.1, json!({"count": zebra.len()}));
    assert_eq!(alice.get(&format!("{base}/events/count")).await.1, json!({"count": events.len()}));
    // Bad filters are refused in words.
    let (s, e) = alice.get(&format!("{base}/events?source=robot")).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_query")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("user, agent"), "{e}");

    // One event by its seq; one that does not exist, and a seq that is not one.
    let (s, one) = alice.get(&format!("{base}/events/{}", observations[0])).await;
    assert_eq!(s, 200, "{one}");
    assert_eq!(one, events[observations[0] as usize - 1]);
    assert_eq!(alice.get(&format!("{base}/events/{}", events.len() + 5)).await.0, 404);
    assert_eq!(alice.get(&format!("{base}/events/zero")).await.0, 400);
    // Another user finds nothing of it.
    let bob = h.api(BOB);
    assert_eq!(bob.get(&format!("{base}/events/1")).await.0, 404);
    assert_eq!(bob.get(&format!("{base}/events/count")).await.0, 404);
    assert_eq!(bob.get(&format!("{base}/export")).await.0, 404);

    // The list searched by title or first message, filtered by status, and counted.
    let (other, _) = alice.start_ready(json!({"message": "something else", "title": "Other"})).await;
    // The scripted model just answers it: the run ends idle, waiting for the user.
    alice.wait_events(&other, "the second run", |ev| ev.iter().any(|e| e["status"] == "idle")).await;
    assert_eq!(alice.get("/api/v1/conversations/count").await.1, json!({"count": 2}));
    assert_eq!(alice.get("/api/v1/conversations/count?q=zebra").await.1, json!({"count": 1}));
    assert_eq!(alice.get("/api/v1/conversations/count?q=hunt").await.1, json!({"count": 1}));
    assert_eq!(alice.get("/api/v1/conversations/count?status=finished").await.1, json!({"count": 1}));
    assert_eq!(alice.get("/api/v1/conversations/count?status=idle").await.1, json!({"count": 1}));
    assert_eq!(alice.get("/api/v1/conversations/count?status=running").await.1, json!({"count": 0}));
    assert_eq!(bob.get("/api/v1/conversations/count").await.1, json!({"count": 0}));
    let (_, listed) = alice.get("/api/v1/conversations?q=ZEBRA").await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed["items"][0]["id"], conv.as_str());
    assert_eq!(alice.get("/api/v1/conversations/count?status=sleeping").await.0, 400);

    // Exported: every event, in order, one JSON object a line, as the API serves them.
    let resp = alice.http.get(format!("{}{base}/export?format=jsonl", alice.base)).bearer_auth(ALICE).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
    assert!(resp.headers()["content-disposition"].to_str().unwrap().contains(&format!("conversation-{conv}.jsonl")));
    let lines: Vec<Value> = resp.text().await.unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines, events);
    // The default format is jsonl; another is refused in words.
    let (s, _) = alice.get(&format!("{base}/export")).await;
    assert_eq!(s, 200);
    let (s, e) = alice.get(&format!("{base}/export?format=pdf")).await;
    assert_eq!((s, e["error"]["code"].as_str()), (400, Some("invalid_query")), "{e}");

    // A transcript a person reads: the title, who said what, the commands and their output,
    // and a fence that the output's own backticks cannot close.
    let (s, md) = alice.get(&format!("{base}/export?format=md")).await;
    let md = md.as_str().unwrap().to_owned();
    assert_eq!(s, 200, "{md}");
    assert!(md.starts_with("# Zebra hunt\n"), "{md}");
    let user = md.find("## User").expect("the user's message");
    let command = md.find("echo zebra-crossing").expect("the command");
    let output = md.rfind("zebra-crossing").expect("its output");
    let answer = md.find("All done with the Zebra.").expect("the answer");
    assert!(user < command && command < output && output < answer, "{md}");
    assert!(md.contains("exit code 3"), "{md}");
    assert!(md.contains("````\necho '```fenced```'; exit 3\n````"), "{md}");
    assert!(md.contains("````\n```fenced```\n"), "{md}");
    // The finish shows as the agent's answer, once.
    assert_eq!(md.matches("All done with the Zebra.").count(), 1, "{md}");
    assert!(md.contains("*Status: finished*"), "{md}");
}

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! The agent's Python cells (`execute_ipython_cell`), as a user checks them: a variable kept
//! from one cell to the next, printing, an error's traceback, a matplotlib plot kept outside
//! the log (the event names it; the owner gets the PNG; the model sees it as an image), in a
//! process sandbox and in a container; and a cell interrupted at its timeout, the kernel still
//! there after.

use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, finished, init};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";

fn cell(code: &str) -> Reply {
    Reply::tool("execute_ipython_cell", json!({"code": code, "security_risk": "low"}))
}

async fn cells_in(opts: HalyardOptions, llm: &ScriptedLlm) {
    llm.push([
        cell("x = 6 * 7\nprint('x is', x)"),
        cell("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()"),
        cell("print(x + 1)"),
        cell("1 / 0"),
        cell("y = 1"),
        Reply::finish("computed"),
    ]);
    let h = Halyard::start(opts);
    let alice = h.api(ALICE);
    let (conv, _) = alice.start_ready(json!({"message": "compute and plot"})).await;
    let events = alice.wait_events(&conv, "the run", finished).await;
    let cells: Vec<&Value> = events.iter().filter(|e| e["kind"] == "observation" && e["tool"] == "execute_ipython_cell").collect();
    assert_eq!(cells.len(), 5, "{events:#?}");
    let text = |i: usize| cells[i]["content"].as_str().unwrap_or_default();
    assert!(text(0).starts_with("[A new Python kernel was started") && text(0).ends_with("x is 42"), "{}", text(0));
    assert!(text(1).ends_with("[1 image displayed]"), "{}", text(1));
    assert_eq!(text(2), "43", "the kernel kept x");
    assert!(cells[3]["is_error"] == true && text(3).contains("ZeroDivisionError"), "{}", cells[3]);
    assert_eq!(text(4), "[Code executed successfully with no output]");

    // The plot is kept outside the log, served to the owner, and shown to the model.
    let id = cells[1]["image_ids"][0].as_str().expect("an image id");
    let resp =
        alice.http.get(format!("{}/api/v1/conversations/{conv}/images/{id}", alice.base)).bearer_auth(&alice.key).send().await.unwrap();
    assert_eq!((resp.status().as_u16(), resp.headers()["content-type"].to_str().unwrap().to_owned()), (200, "image/png".to_owned()));
    assert!(resp.bytes().await.unwrap().starts_with(b"\x89PNG"));
    let other = h.api("bob-secret-key");
    assert_eq!(other.get(&format!("/api/v1/conversations/{conv}/images/{id}")).await.0, 404);
    assert!(!serde_json::to_string(&events).unwrap().contains("iVBORw0KGgo"), "a PNG in the log");
    let after_plot = llm.requests()[2]["messages"].to_string();
    assert!(after_plot.contains("data:image/png;base64,iVBORw0KGgo"), "the model sees the plot");
}

#[tokio::test]
async fn python_cells_keep_state_and_plot_in_a_process_sandbox() {
    init();
    let llm = ScriptedLlm::start().await;
    cells_in(HalyardOptions::new(&llm.base_url), &llm).await;
}

#[tokio::test]
async fn python_cells_keep_state_and_plot_in_a_container() {
    init();
    halyard_tests::docker::require_engine();
    let llm = ScriptedLlm::start().await;
    cells_in(HalyardOptions::new(&llm.base_url).set("HALYARD_SANDBOX", "docker").set("HALYARD_SANDBOX_POOL_SIZE", "0"), &llm).await;
}

#[tokio::test]
async fn a_cell_past_its_timeout_is_interrupted_and_the_kernel_goes_on() {
    init();
    let llm = ScriptedLlm::start().await;
    llm.push([
        cell("n = 7"),
        cell("import time\nprint('working', flush=True)\ntime.sleep(60)"),
        cell("print(n * 6)"),
        Reply::finish("done"),
    ]);
    let h = Halyard::start(HalyardOptions::new(&llm.base_url).set("HALYARD_CELL_TIMEOUT_SECS", "2"));
    let alice = h.api(ALICE);
    let (conv, _) = alice.start_ready(json!({"message": "wait a while"})).await;
    let events = alice.wait_events(&conv, "the run", finished).await;
    let cells: Vec<&Value> = events.iter().filter(|e| e["kind"] == "observation" && e["tool"] == "execute_ipython_cell").collect();
    let slow = cells[1]["content"].as_str().unwrap();
    assert!(cells[1]["is_error"] == true, "{}", cells[1]);
    assert!(slow.contains("working") && slow.contains("KeyboardInterrupt"), "{slow}");
    assert!(slow.ends_with("[The cell ran longer than 2 seconds and was interrupted.]"), "{slow}");
    assert_eq!(cells[2]["content"], "42", "the kernel kept n through the interrupt");
}

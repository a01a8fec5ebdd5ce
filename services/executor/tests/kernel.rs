#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! The executor's Python kernel on Debian's ipykernel: a variable kept between cells, printing,
//! an error's traceback, a matplotlib plot as a PNG, the shell's working directory, a cell
//! interrupted at its timeout with the kernel still there after.

mod common;

use std::time::Duration;

use serde_json::{Value, json};

const KEY: &str = "kernel-test-key-0123456789abcdef0123456789";

async fn executor(workspace: &std::path::Path) -> String {
    common::serve(common::config(workspace, KEY)).await
}

async fn post(http: &reqwest::Client, base: &str, path: &str, body: Value) -> Value {
    let resp = http
        .post(format!("{base}{path}"))
        .header(halyard_protocol::executor::SESSION_KEY_HEADER, KEY)
        .json(&body)
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{path}");
    resp.json().await.unwrap()
}

#[tokio::test]
async fn cells_keep_their_state_print_raise_plot_and_time_out() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let base = executor(dir.path()).await;
    let http = reqwest::Client::new();
    let cell = |code: &str, timeout: f64| post(&http, &base, "/ipython", json!({"code": code, "timeout_secs": timeout}));

    let first = cell("x = 6 * 7\nprint('x is', x)", 60.0).await;
    assert_eq!(
        (first["output"].as_str(), first["new_kernel"].as_bool(), first["error"].as_bool()),
        (Some("x is 42\n"), Some(true), Some(false)),
        "{first}"
    );
    let second = cell("x + 1", 60.0).await;
    assert_eq!((second["output"].as_str(), second["new_kernel"].as_bool()), (Some("43\n"), Some(false)), "the kernel kept x: {second}");

    let raised = cell("1 / 0", 60.0).await;
    let text = raised["output"].as_str().unwrap();
    assert!(raised["error"] == true && text.contains("ZeroDivisionError") && !text.contains('\u{1b}'), "{raised}");

    let plot = cell("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()", 60.0).await;
    let png = plot["images"][0].as_str().unwrap_or_else(|| panic!("no plot: {plot}"));
    assert!(png.starts_with("iVBORw0KGgo"), "a PNG in base64");

    // The kernel works where the shell is.
    post(&http, &base, "/shell/exec", json!({"command": "mkdir -p sub && cd sub", "timeout_secs": 10})).await;
    let cwd = cell("import os; print(os.getcwd())", 60.0).await;
    assert!(cwd["output"].as_str().unwrap().trim_end().ends_with("/sub"), "{cwd}");

    let slow = cell("import time\nprint('started', flush=True)\ntime.sleep(30)", 2.0).await;
    assert_eq!(slow["timed_out"], true, "{slow}");
    assert!(
        slow["output"].as_str().unwrap().contains("started") && slow["output"].as_str().unwrap().contains("KeyboardInterrupt"),
        "{slow}"
    );
    let after = cell("print(x)", 60.0).await;
    assert_eq!(
        (after["output"].as_str(), after["new_kernel"].as_bool()),
        (Some("42\n"), Some(false)),
        "the kernel survived the interrupt: {after}"
    );
    let quiet = cell("y = 1", 60.0).await;
    assert_eq!(quiet["output"], "");

    // The user's interrupt reaches a running cell, whose result says so at once.
    let slow = cell("import time\ntime.sleep(60)", 60.0);
    let interrupt = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        post(&http, &base, "/shell/interrupt", json!({})).await
    };
    let began = std::time::Instant::now();
    let (stopped, _) = tokio::join!(slow, interrupt);
    assert!(stopped["error"] == true && stopped["output"].as_str().unwrap().contains("KeyboardInterrupt"), "{stopped}");
    assert!(began.elapsed() < Duration::from_secs(30), "the cell stopped at the interrupt, not its timeout");
    assert_eq!(cell("print(x)", 60.0).await["output"], "42\n", "the kernel goes on");
}

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! The chaos test, short form (`load --suite chaos` runs the long one): fifty conversations with
//! webhook deliveries through a three-node JetStream and two replicas of every service, while
//! an agent runner, a gateway, the sandbox supervisor, a dispatcher and a NATS node are each
//! killed with SIGKILL once, in a random order, and started again. `tests/src/chaos.rs` checks
//! every promise (finished runs, contiguous logs, every webhook event in each conversation's
//! order, metrics that agree) and prints what it killed and when.

use halyard_tests::chaos::{self, ChaosOptions};
use halyard_tests::init;

// Restarting a process blocks its thread until the process is ready: the scripted LLM and the
// webhook receivers go on on the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_conversations_survive_a_sigkill_of_every_kind_of_process() {
    init();
    let opts = ChaosOptions::short();
    let report = chaos::run(opts.clone()).await;
    assert_eq!(report.kills.len(), 5, "{report:?}");
    for kind in ["agent runner", "gateway", "sandbox supervisor", "dispatcher", "NATS node"] {
        assert!(report.kills.iter().any(|k| k.what.starts_with(kind)), "{kind} was never killed: {report:?}");
    }
    assert!(report.events >= opts.conversations * (2 * opts.steps + 2), "{report:?}");
    assert_eq!(report.deliveries, report.events, "{report:?}");
}

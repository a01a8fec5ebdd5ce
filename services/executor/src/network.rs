//! The sandbox's way out as its supervisor last said (`POST /network`): the variables that
//! name the egress proxy (`HTTP_PROXY` and the like) for a sandbox held to an outbound policy,
//! none otherwise. Every shell exports them before its next command ([`crate::shell`]), so a
//! sandbox moved onto another network mid-life (setup's policy, then the agent's) has its
//! tools follow without a restart. They only help well-behaved tools: the network itself is
//! what keeps a sandbox from going around the proxy.

use std::collections::BTreeMap;
use std::sync::RwLock;

/// The variables now, and how many times they were set (a shell compares it with what it
/// exported last).
static CURRENT: RwLock<(u64, BTreeMap<String, String>)> = RwLock::new((0, BTreeMap::new()));

/// Replaces the variables.
pub fn set(vars: BTreeMap<String, String>) {
    let mut now = CURRENT.write().unwrap_or_else(|p| p.into_inner());
    if now.1 != vars {
        *now = (now.0 + 1, vars);
    }
}

/// The variables now, and their generation.
pub fn current() -> (u64, BTreeMap<String, String>) {
    CURRENT.read().unwrap_or_else(|p| p.into_inner()).clone()
}

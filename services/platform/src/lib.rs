//! Shared plumbing for every Halyard service: configuration ([`config`]), telemetry
//! ([`telemetry`]), NATS bootstrap and the embedded nats-server ([`nats`]), who may do what on
//! the bus ([`bus_auth`]), bus helpers that
//! every service uses the same way ([`bus`]), graceful shutdown ([`shutdown`]), and the two
//! HTTP clients more than one service needs: the LLM client ([`llm`], with the Anthropic wire,
//! fallback chains and model lists in it, and token counting in [`tokens`]) and the executor client
//! ([`executor_client`]); reading skill files ([`skills`]); and a bucket's entries kept in memory
//! and followed ([`kv_mirror`]); cron schedules in time zones ([`schedule`]).
//!
//! Nothing here knows what a service does; services never depend on each other, only on this
//! crate and on `halyard-protocol`.

pub mod bus;
pub mod bus_auth;
pub mod config;
pub mod derived;
pub mod environments;
pub mod error;
pub mod executor_client;
pub mod fault;
pub mod forge;
pub mod git_proxy;
pub mod http_relay;
pub mod images;
pub mod keys;
pub mod kv_lease;
pub mod kv_mirror;
pub mod llm;
pub mod mcp_oauth;
pub mod membership;
pub mod memory;
pub mod nats;
pub mod net;
pub mod netaddr;
pub mod outbound;
pub mod plugins;
pub mod redact;
pub mod relay;
pub mod results;
pub mod route;
pub mod schedule;
pub mod settings;
pub mod shutdown;
pub mod skills;
pub mod snapshots;
pub mod start_queue;
pub mod telemetry;
pub mod tokens;
pub mod user_secrets;
pub mod vault;

pub use config::Config;
pub use error::{BusError, BusErrorKind};
pub use shutdown::{Shutdown, ShutdownTrigger};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// Microseconds since the Unix epoch (an order finer than milliseconds: starts asked for one
/// after another).
pub fn now_us() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or(0)
}

/// Milliseconds since the Unix epoch of an RFC 3339 time (`2026-11-27T03:00:00Z`, any offset).
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    s.parse::<jiff::Timestamp>().ok().map(|t| t.as_millisecond())
}

/// Sends `sig` to a process (a negative `pid` is a process group). Returns whether it was
/// delivered.
#[allow(unsafe_code)]
pub fn signal(pid: i32, sig: i32) -> bool {
    // SAFETY: kill(2) takes two integers and touches no memory of ours.
    unsafe { libc::kill(pid, sig) == 0 }
}

/// Sets the file-mode creation mask of this process (and of the children it starts from now on).
#[allow(unsafe_code)]
pub fn set_umask(mask: u32) {
    // SAFETY: umask(2) takes an integer and cannot fail.
    unsafe {
        libc::umask(mask as libc::mode_t);
    }
}

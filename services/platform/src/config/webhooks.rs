//! The webhook dispatcher's settings: where deliveries may go, retries, timeouts.

use serde::{Deserialize, Serialize};

use crate::settings::set;
use crate::settings::{Setting, network_classes, number};

/// Webhook delivery.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhookConfig {
    /// Destinations otherwise refused that are allowed: any of `loopback`, `private`,
    /// `link-local`.
    pub allow: Vec<String>,
    /// Attempts per delivery before it is parked.
    pub max_attempts: u32,
    /// First retry delay; doubles each attempt, with jitter.
    pub retry_base_ms: u64,
    /// Longest retry delay.
    pub retry_max_ms: u64,
    /// Timeout of one delivery request.
    pub timeout_secs: u64,
    /// A subscription failing without a single success for this long is disabled.
    pub disable_after_secs: u64,
    /// No subscription enabled for this long: the fan-out stops taking events (a dispatcher
    /// that just lost its last subscription waits, so that one lagging behind the others never
    /// stops the fan-out for a subscription they already know).
    pub fanout_idle_secs: u64,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            max_attempts: 8,
            retry_base_ms: 1000,
            retry_max_ms: 300_000,
            timeout_secs: 10,
            disable_after_secs: 3 * 24 * 3600,
            fanout_idle_secs: 60,
        }
    }
}

/// `HALYARD_*` settings of webhook deliveries.
pub(crate) const SETTINGS: &[Setting<WebhookConfig>] = &[
    set!("WEBHOOK_ALLOW", "(none)", "destination classes webhooks may reach: `loopback`, `private`, `link-local`", |c, v| c.allow =
        network_classes(v)?),
    set!("WEBHOOK_MAX_ATTEMPTS", "`8`", "attempts before a delivery is parked; first retry delay", |c, v| c.max_attempts =
        number(v, "a count")?),
    set!("WEBHOOK_RETRY_BASE_MS", "`1000`", "attempts before a delivery is parked; first retry delay", |c, v| c.retry_base_ms =
        number(v, "milliseconds")?),
    set!("WEBHOOK_RETRY_MAX_MS", "`300000`", "the longest wait between a delivery's attempts", |c, v| c.retry_max_ms =
        number(v, "milliseconds")?),
    set!("WEBHOOK_TIMEOUT_SECS", "`10`", "timeout of one delivery", |c, v| c.timeout_secs = number(v, "seconds")?),
    set!("WEBHOOK_DISABLE_AFTER_SECS", "`259200`", "continuous failure that disables a subscription", |c, v| c.disable_after_secs =
        number(v, "seconds")?),
    set!(
        "WEBHOOK_FANOUT_IDLE_SECS",
        "`60`",
        "no webhook subscription enabled for this long: the fan-out stops taking events until one is",
        |c, v| c.fanout_idle_secs = number(v, "seconds")?
    ),
];

//! The automation service's settings.

use serde::{Deserialize, Serialize};

use crate::settings::set;
use crate::settings::{Setting, number};

/// The automation service.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AutomationConfig {
    /// A schedule's tick missed while no automation service ran is run once at start-up if it
    /// is at most this old (`HALYARD_AUTOMATION_TICK_GRACE_SECS`); older ones are skipped, and
    /// never more than the latest of them runs.
    pub tick_grace_secs: u64,
}

impl Default for AutomationConfig {
    fn default() -> Self {
        Self { tick_grace_secs: 900 }
    }
}

/// `HALYARD_*` settings of the automation service.
pub(crate) const SETTINGS: &[Setting<AutomationConfig>] = &[set!(
    "AUTOMATION_TICK_GRACE_SECS",
    "`900`",
    "a schedule's tick missed while no automation service ran is run once at start-up if it is at most this old",
    |c, v| c.tick_grace_secs = number(v, "seconds")?
)];

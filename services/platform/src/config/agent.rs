//! The agent runner's settings: runs' limits, leases, timeouts, what counts as stuck, helpers.

use serde::{Deserialize, Serialize};

use crate::settings::set;
use crate::settings::{Setting, number};

/// The agent loop.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// LLM steps in one run before it ends with an error.
    pub max_iterations: u32,
    /// A run lease not renewed for this long is taken over by another runner (takeover time).
    pub lease_ttl_ms: u64,
    /// Idle conversation actors are evicted after this long (rehydrated on demand).
    pub idle_evict_secs: u64,
    /// Default per-command timeout for the `terminal` tool.
    pub command_timeout_secs: f64,
    /// How long a Python cell may run before it is interrupted.
    pub cell_timeout_secs: f64,
    /// Stuck detection (0 turns a pattern off): the same action with the same observation this
    /// many times in a row...
    pub stuck_repeats: usize,
    /// ...the same action failing with the same error...
    pub stuck_errors: usize,
    /// ...only `think` calls...
    pub stuck_monologue: usize,
    /// ...two actions alternating, this many times each.
    pub stuck_alternations: usize,
    /// Default limits of a conversation's LLM use, for conversations that name none (0: none).
    pub max_budget_usd: f64,
    pub max_tokens: u64,
    /// How deep helpers may go: a conversation of its own is at depth 0, its helpers at 1; the
    /// `delegate` tool is offered only below this depth (0: no delegation at all).
    pub max_delegation_depth: u32,
    /// Most helpers one `delegate` call may start.
    pub max_delegates: usize,
    /// Where third-party agents are installed, as sandboxes see it (`infra/install-agents.sh`
    /// fills it; process sandboxes read the host's, the base image holds a copy).
    pub agents_dir: String,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            max_iterations: 50,
            lease_ttl_ms: 2_000,
            idle_evict_secs: 300,
            command_timeout_secs: 30.0,
            cell_timeout_secs: 120.0,
            stuck_repeats: 4,
            stuck_errors: 3,
            stuck_monologue: 8,
            stuck_alternations: 3,
            max_budget_usd: 0.0,
            max_tokens: 0,
            max_delegation_depth: 2,
            max_delegates: 4,
            agents_dir: "/opt/halyard-agents".into(),
        }
    }
}

/// `HALYARD_*` settings of the agent runner.
pub(crate) const SETTINGS: &[Setting<AgentConfig>] = &[
    set!("MAX_ITERATIONS", "`50`", "LLM steps per run", |c, v| c.max_iterations = number(v, "a count")?),
    set!(
        "LEASE_TTL_MS",
        "`2000`",
        "a run whose agent runner stopped renewing its lease this long is taken over by another runner (renewed every quarter of it)",
        |c, v| c.lease_ttl_ms = number(v, "milliseconds")?
    ),
    set!(
        "IDLE_EVICT_SECS",
        "`300`",
        "idle conversations leave memory: the agent runner's runs, the gateway's views, the webhook fan-out's lanes",
        |c, v| c.idle_evict_secs = number(v, "seconds")?
    ),
    set!("COMMAND_TIMEOUT_SECS", "`30`", "default timeout of one terminal command", |c, v| c.command_timeout_secs = number(v, "seconds")?),
    set!("CELL_TIMEOUT_SECS", "`120`", "a Python cell (`execute_ipython_cell`) running longer is interrupted", |c, v| c
        .cell_timeout_secs =
        number(v, "seconds")?),
    set!(
        "MAX_BUDGET_USD",
        "(none)",
        "default limits of a conversation's LLM use; `POST /conversations` takes `max_budget_usd` and `max_tokens`",
        |c, v| c.max_budget_usd = number(v, "US dollars, like 2.5")?
    ),
    set!(
        "MAX_TOKENS",
        "(none)",
        "default limits of a conversation's LLM use; `POST /conversations` takes `max_budget_usd` and `max_tokens`",
        |c, v| c.max_tokens = number(v, "a count")?
    ),
    set!(
        "STUCK_REPEATS",
        "`4`",
        "a run ends as `stuck` after the same action and result this many times, the same error, only `think` calls, two actions alternating (0: off)",
        |c, v| c.stuck_repeats = number(v, "a count")?
    ),
    set!(
        "STUCK_ERRORS",
        "`3`",
        "a run ends as `stuck` after the same action and result this many times, the same error, only `think` calls, two actions alternating (0: off)",
        |c, v| c.stuck_errors = number(v, "a count")?
    ),
    set!(
        "STUCK_MONOLOGUE",
        "`8`",
        "a run ends as `stuck` after the same action and result this many times, the same error, only `think` calls, two actions alternating (0: off)",
        |c, v| c.stuck_monologue = number(v, "a count")?
    ),
    set!(
        "STUCK_ALTERNATIONS",
        "`3`",
        "a run ends as `stuck` after the same action and result this many times, the same error, only `think` calls, two actions alternating (0: off)",
        |c, v| c.stuck_alternations = number(v, "a count")?
    ),
    set!(
        "MAX_DELEGATION_DEPTH",
        "`2`",
        "how deep helpers may go (a conversation of its own is at 0; `delegate` is offered below this depth; 0: no helpers) and how many one `delegate` call may start",
        |c, v| c.max_delegation_depth = number(v, "a depth, like 2")?
    ),
    set!(
        "MAX_DELEGATES",
        "`4`",
        "how deep helpers may go (a conversation of its own is at 0; `delegate` is offered below this depth; 0: no helpers) and how many one `delegate` call may start",
        |c, v| c.max_delegates = number(v, "a count")?
    ),
    set!(
        "AGENTS_DIR",
        "`/opt/halyard-agents`",
        "where third-party agents are installed, as sandboxes see it (`infra/install-agents.sh` fills it; process sandboxes read the host's, the base image holds a copy)",
        |c, v| c.agents_dir = v.to_owned()
    ),
];

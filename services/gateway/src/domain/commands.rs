//! Commands and questions to the agent runners, over the bus.

use std::time::Duration;

use halyard_platform::{bus, telemetry};
use halyard_protocol::command::AgentCommand;
use halyard_protocol::{ConversationId, Envelope, subjects};

use crate::http::error::ApiError;
use crate::state::AppState;

/// Sends a command to the agent runner of conversation `id`; its envelope id.
pub async fn agent_command(state: &AppState, id: ConversationId, cmd: AgentCommand) -> Result<String, ApiError> {
    let mut env = Envelope::new(cmd, halyard_platform::now_ms());
    env.trace = Some(telemetry::new_trace());
    bus::publish(&state.js, subjects::agent_command(id), &env).await?;
    Ok(env.id.to_string())
}

/// Asks whoever answers `subject` (agent runners, in a queue group) `question` and waits up to
/// `patience` for the answer; 503 when none answers (in time). What the question is about (`a
/// question`, `an MCP server test`) goes into the log line and the message.
pub async fn request<Q: halyard_protocol::envelope::Payload, A: serde::de::DeserializeOwned>(
    state: &AppState,
    subject: String,
    question: Q,
    patience: Duration,
    about: &str,
) -> Result<A, ApiError> {
    let bytes = halyard_protocol::encode(&Envelope::new(question, halyard_platform::now_ms())).map_err(ApiError::internal)?;
    let reply = tokio::time::timeout(patience, state.nats.request(subject, bytes.into()))
        .await
        .map_err(|_| ApiError::unavailable(format!("no agent runner answered {about} in time; try again")))?
        .map_err(|e| {
            tracing::warn!(error = %e, %about, "request to agent runners failed");
            ApiError::unavailable(format!("no agent runner is answering {about} now; try again"))
        })?;
    Ok(halyard_protocol::decode::<A>(&reply.payload).map_err(ApiError::internal)?.payload)
}

//! What a provider offers: OpenAI-compatible servers' `GET {base}/models` (`{"data": [{"id",
//! "owned_by"}]}`) and Anthropic's `GET /v1/models` (`{"data": [{"id", "display_name"}],
//! "has_more", "last_id"}`, a page at a time), for a model picker.

use halyard_protocol::user::ModelInfo;
use serde_json::Value;
use std::time::Duration;

use super::{LlmClient, LlmError, transport};

/// Pages of Anthropic's list read at most (1,000 models each).
const MAX_PAGES: usize = 10;

impl LlmClient {
    /// The models the server lists, sorted by id.
    pub async fn models(&self) -> Result<Vec<ModelInfo>, LlmError> {
        let base = self.config.base_url.trim_end_matches('/');
        let anthropic = self.config.provider == "anthropic";
        let mut out: Vec<ModelInfo> = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut params = Vec::new();
            if anthropic {
                params.push(("limit", "1000"));
                if let Some(after) = &after {
                    params.push(("after_id", after.as_str()));
                }
            }
            let url = crate::net::with_query(&format!("{base}/models"), &params)
                .map_err(|e| LlmError::Transport(format!("{base}/models: {e}")))?;
            let request = self.authorized(self.http.get(url).timeout(Duration::from_secs(self.config.timeout_secs.min(30))));
            let response = request.send().await.map_err(transport)?;
            if !response.status().is_success() {
                return Err(self.refusal(response).await);
            }
            let page: Value = response.json().await.map_err(transport)?;
            let Some(Value::Array(data)) = page.get("data") else {
                return Err(LlmError::Malformed("the model list has no `data` array".into()));
            };
            out.extend(data.iter().filter_map(|m| {
                Some(ModelInfo {
                    id: m.get("id")?.as_str()?.to_owned(),
                    display_name: m.get("display_name").and_then(Value::as_str).map(str::to_owned),
                })
            }));
            // Only Anthropic's list comes in pages.
            let more = anthropic && page.get("has_more").and_then(Value::as_bool).unwrap_or(false);
            match page.get("last_id").and_then(Value::as_str) {
                Some(last) if more => after = Some(last.to_owned()),
                _ => break,
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out.dedup_by(|a, b| a.id == b.id);
        Ok(out)
    }
}

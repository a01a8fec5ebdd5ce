//! What a provider offers: OpenAI-compatible servers' `GET {base}/models` (`{"data": [{"id",
//! "owned_by"}]}`) and Anthropic's `GET /v1/models` (`{"data": [{"id", "display_name"}],
//! "has_more", "last_id"}`, a page at a time), and Gemini's `GET /v1beta/models` (`{"models":
//! [{"name": "models/…", "displayName", "supportedGenerationMethods"}], "nextPageToken"}`, the
//! ones that generate content), for a model picker.

use halyard_protocol::user::ModelInfo;
use serde_json::Value;
use std::time::Duration;

use super::client::LlmClient;
use super::message::{LlmError, transport};

/// Pages of Anthropic's list read at most (1,000 models each).
const MAX_PAGES: usize = 10;

impl LlmClient {
    /// The models the server lists, sorted by id.
    pub async fn models(&self) -> Result<Vec<ModelInfo>, LlmError> {
        let base = self.config.base_url.trim_end_matches('/');
        let wire = self.config.provider.as_str();
        let mut out: Vec<ModelInfo> = Vec::new();
        // Where the next page starts (Anthropic's `after_id`, Gemini's `pageToken`).
        let mut next: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut params = Vec::new();
            match wire {
                "anthropic" => params.push(("limit", "1000")),
                super::gemini::PROVIDER => params.push(("pageSize", "1000")),
                _ => {}
            }
            if let Some(next) = &next {
                params.push((if wire == "anthropic" { "after_id" } else { "pageToken" }, next.as_str()));
            }
            let url = crate::net::with_query(&format!("{base}/models"), &params)
                .map_err(|e| LlmError::Transport(format!("{base}/models: {e}")))?;
            let request = self.authorized(self.http.get(url).timeout(Duration::from_secs(self.config.timeout_secs.min(30))));
            let response = request.send().await.map_err(transport)?;
            if !response.status().is_success() {
                return Err(self.refusal(response).await);
            }
            let page: Value = response.json().await.map_err(transport)?;
            next = if wire == super::gemini::PROVIDER { gemini_page(&page, &mut out)? } else { page_of(&page, wire, &mut out)? };
            if next.is_none() {
                break;
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out.dedup_by(|a, b| a.id == b.id);
        Ok(out)
    }
}

/// Reads an OpenAI or Anthropic page into `out`; where the next starts (only Anthropic's list
/// comes in pages).
fn page_of(page: &Value, wire: &str, out: &mut Vec<ModelInfo>) -> Result<Option<String>, LlmError> {
    let Some(Value::Array(data)) = page.get("data") else {
        return Err(LlmError::Malformed("the model list has no `data` array".into()));
    };
    out.extend(data.iter().filter_map(|m| {
        Some(ModelInfo {
            id: m.get("id")?.as_str()?.to_owned(),
            display_name: m.get("display_name").and_then(Value::as_str).map(str::to_owned),
        })
    }));
    let more = wire == "anthropic" && page.get("has_more").and_then(Value::as_bool).unwrap_or(false);
    Ok(page.get("last_id").and_then(Value::as_str).filter(|_| more).map(str::to_owned))
}

/// Reads a Gemini page into `out` (the models that generate content, without `models/`); its
/// next page's token.
fn gemini_page(page: &Value, out: &mut Vec<ModelInfo>) -> Result<Option<String>, LlmError> {
    let Some(Value::Array(models)) = page.get("models") else {
        return Err(LlmError::Malformed("the model list has no `models` array".into()));
    };
    out.extend(models.iter().filter_map(|m| {
        let generates = m["supportedGenerationMethods"].as_array().is_none_or(|ms| ms.iter().any(|x| x == "generateContent"));
        let name = m.get("name")?.as_str()?;
        generates.then(|| ModelInfo {
            id: name.strip_prefix("models/").unwrap_or(name).to_owned(),
            display_name: m.get("displayName").and_then(Value::as_str).map(str::to_owned),
        })
    }));
    Ok(page.get("nextPageToken").and_then(Value::as_str).filter(|t| !t.is_empty()).map(str::to_owned))
}

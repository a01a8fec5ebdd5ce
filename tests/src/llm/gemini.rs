//! The scripted LLM's Gemini API, as Google's `generativelanguage.googleapis.com/v1beta` answers:
//! `POST /v1beta/models/{model}:generateContent`, `:streamGenerateContent?alt=sse` (one whole
//! `GenerateContentResponse` a server-sent event, the text in pieces, each call whole, the
//! stream ending with the body) and `:countTokens`; `GET /v1beta/models` a page of two at a time
//! (`pageToken`, `nextPageToken`). Strict as Google is: the key in `x-goog-api-key` (or `?key=`),
//! a function call's turn answered by a function response right after it, or 400. Calls come
//! without ids, as the API gives them.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Inner, Request, Wire, answered, next_answer, stream_events};

/// What `GET /v1beta/models` lists: (name, display name, generation methods).
pub const GEMINI_MODELS: &[(&str, &str, &[&str])] = &[
    ("models/gemini-scripted-flash", "Gemini Scripted Flash", &["generateContent", "countTokens"]),
    ("models/gemini-scripted-pro", "Gemini Scripted Pro", &["generateContent", "countTokens"]),
    ("models/text-embedding-scripted", "Text Embedding Scripted", &["embedContent"]),
];

/// An error as Google writes it: `{"error": {"code", "message", "status"}}`.
pub(super) fn error(status: StatusCode, message: &str) -> Response {
    let name = match status.as_u16() {
        400 => "INVALID_ARGUMENT",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        _ => "INTERNAL",
    };
    (status, Json(json!({"error": {"code": status.as_u16(), "message": message, "status": name}}))).into_response()
}

/// Google's refusal of a call without a key.
fn unkeyed(headers: &HeaderMap, query: &std::collections::HashMap<String, String>) -> Option<Response> {
    if headers.get("x-goog-api-key").is_some() || query.contains_key("key") {
        return None;
    }
    let message = "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.";
    Some(error(StatusCode::FORBIDDEN, message))
}

/// What the API says of a history whose function call turn is not answered right after it (none:
/// it is right).
fn turn_refusal(body: &Value) -> Option<String> {
    let contents = body["contents"].as_array()?;
    if contents.is_empty() {
        return Some("* GenerateContentRequest.contents: contents is not specified".into());
    }
    contents.iter().enumerate().find_map(|(i, c)| {
        let calls = c["parts"].as_array()?.iter().filter(|p| p.get("functionCall").is_some()).count();
        let answered = contents
            .get(i + 1)
            .and_then(|n| n["parts"].as_array())
            .map_or(0, |ps| ps.iter().filter(|p| p.get("functionResponse").is_some()).count());
        (calls > 0 && c["role"] == "model" && answered != calls && i + 1 < contents.len()).then(|| {
            "Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn."
                .to_owned()
        })
    })
}

/// `POST /v1beta/models/{model}:{method}`.
pub(super) async fn generate(
    State(inner): State<Arc<Inner>>,
    Path(call): Path<String>,
    Query(query): Query<std::collections::HashMap<String, String>>,
    headers: HeaderMap,
    request: Request,
) -> Response {
    inner.paths.lock().expect("lock").push(format!("/v1beta/models/{call}"));
    if let Some(refused) = unkeyed(&headers, &query) {
        return refused;
    }
    let Some((model, method)) = call.rsplit_once(':') else {
        return error(StatusCode::NOT_FOUND, &format!("models/{call} is not found for API version v1beta"));
    };
    let (body, arrived) = (&request.0, request.2);
    if let Some(message) = turn_refusal(body) {
        return error(StatusCode::BAD_REQUEST, &message);
    }
    match method {
        "countTokens" => {
            let total = (super::history_len(&request.1) as u64).div_ceil(4);
            return Json(json!({"totalTokens": total, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": total}]})).into_response();
        }
        "generateContent" | "streamGenerateContent" => {}
        other => return error(StatusCode::NOT_FOUND, &format!("unknown method {other} for models/{model}")),
    }
    let stream = method == "streamGenerateContent";
    if stream && query.get("alt").map(String::as_str) != Some("sse") {
        // (Without `alt=sse` Google streams a JSON array; no client here asks for that.)
        return error(StatusCode::BAD_REQUEST, "this scripted server streams server-sent events only: ask with ?alt=sse");
    }
    let (n, content, calls, (prompt, completion, cached), thinking, pace) = match next_answer(&inner, headers, &request, Wire::Gemini).await
    {
        Ok(a) => a,
        Err(response) => return response,
    };
    let thoughts_asked = body["generationConfig"]["thinkingConfig"]["includeThoughts"] == true;
    let signature = thinking.as_deref().map(super::signature);
    let mut parts: Vec<Value> = Vec::new();
    if let Some(text) = thinking.as_deref().filter(|_| thoughts_asked) {
        parts.push(json!({"text": text, "thought": true}));
    }
    if let Some(text) = &content {
        parts.push(json!({"text": text}));
    }
    for (_, name, args) in &calls {
        let args: Value = serde_json::from_str(args).unwrap_or(json!({}));
        parts.push(json!({"functionCall": {"name": name, "args": args}}));
    }
    if let (Some(sig), Some(first)) = (&signature, parts.iter_mut().find(|p| p.get("thought").is_none())) {
        first["thoughtSignature"] = sig.clone().into();
    }
    let usage = json!({"promptTokenCount": prompt, "cachedContentTokenCount": cached, "candidatesTokenCount": completion,
        "totalTokenCount": prompt + completion});
    let version = model.to_owned();
    let whole = json!({"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": usage, "modelVersion": version, "responseId": format!("resp-{n}")});
    if !stream {
        return answered(&inner, arrived, Json(whole).into_response());
    }
    answered(&inner, arrived, stream_events(&inner, pieces(&whole), pace))
}

/// A response as Gemini streams it: the text a few characters an event, every other part whole
/// in an event of its own, the finish reason and the whole usage on the last.
fn pieces(whole: &Value) -> Vec<(String, Option<String>)> {
    let chunk = |parts: Vec<Value>, last: bool| {
        let mut c = json!({"candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}],
            "modelVersion": whole["modelVersion"], "responseId": whole["responseId"]});
        c["usageMetadata"] =
            if last { whole["usageMetadata"].clone() } else { json!({"promptTokenCount": whole["usageMetadata"]["promptTokenCount"]}) };
        if last {
            c["candidates"][0]["finishReason"] = "STOP".into();
        }
        c
    };
    let parts = whole["candidates"][0]["content"]["parts"].as_array().cloned().unwrap_or_default();
    let mut chunks: Vec<(Value, Option<String>)> = Vec::new();
    for part in &parts {
        match part["text"].as_str().filter(|_| part.get("thought").is_none()) {
            Some(text) => {
                let chars: Vec<char> = text.chars().collect();
                for (i, piece) in chars.chunks(7).enumerate() {
                    let piece: String = piece.iter().collect();
                    let mut p = json!({"text": piece});
                    if let (0, Some(sig)) = (i, part.get("thoughtSignature")) {
                        p["thoughtSignature"] = sig.clone();
                    }
                    chunks.push((chunk(vec![p], false), Some(piece)));
                }
            }
            None => chunks.push((chunk(vec![part.clone()], false), None)),
        }
    }
    // The finish reason and usage ride on the last piece (an empty text when there was none).
    match chunks.last_mut() {
        Some((c, _)) => {
            c["candidates"][0]["finishReason"] = "STOP".into();
            c["usageMetadata"] = whole["usageMetadata"].clone();
        }
        None => chunks.push((chunk(vec![json!({"text": ""})], true), None)),
    }
    chunks.into_iter().map(|(c, piece)| (format!("data: {c}\r\n\r\n"), piece)).collect()
}

/// `GET /v1beta/models`: two a page, `nextPageToken` naming where the next starts.
pub(super) async fn models(headers: HeaderMap, Query(query): Query<std::collections::HashMap<String, String>>) -> Response {
    if let Some(refused) = unkeyed(&headers, &query) {
        return refused;
    }
    let start = query.get("pageToken").and_then(|t| t.parse::<usize>().ok()).unwrap_or(0);
    let page: Vec<Value> = GEMINI_MODELS
        .iter()
        .skip(start)
        .take(2)
        .map(|(name, display, methods)| json!({"name": name, "displayName": display, "version": "001", "supportedGenerationMethods": methods}))
        .collect();
    let mut body = json!({"models": page});
    if start + 2 < GEMINI_MODELS.len() {
        body["nextPageToken"] = (start + 2).to_string().into();
    }
    Json(body).into_response()
}

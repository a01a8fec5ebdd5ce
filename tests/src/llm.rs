//! A scripted LLM: an HTTP server speaking OpenAI's `POST /v1/chat/completions`, OpenAI's
//! `POST /v1/responses`, Anthropic's `POST /v1/messages` and Gemini's `POST
//! /v1beta/models/{model}:generateContent` ([`gemini`]) (plain and streamed, each as its
//! provider writes it),
//! answering from one script of [`Reply`]s, and recording every request it gets; its `GET
//! /v1/models` lists [`OPENAI_MODELS`] or, asked as Anthropic asks, [`ANTHROPIC_MODELS`] a page
//! of two at a time. Its Gemini base URL is [`ScriptedLlm::gemini_base`].

pub mod gemini;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::FromRequest;
use axum::extract::Query;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// One scripted answer.
#[derive(Clone, Debug)]
pub enum Reply {
    /// Tool calls `(name, arguments)`, with optional content (the "thought").
    Tools(Option<String>, Vec<(String, Value)>),
    /// A plain assistant message.
    Text(String),
    /// An HTTP error status with a body.
    Status(u16),
    /// Wait, then answer.
    Delay(Duration, Box<Reply>),
    /// Never answer until [`ScriptedLlm::release`] (simulates a run cut off mid-call).
    Hang,
    /// HTTP 400: the prompt is longer than the context window (in the provider's words).
    ContextTooLong,
    /// The answer streamed one server-sent event at a time, this long apart (when the request
    /// asks for a stream); when each piece of text went out is kept ([`ScriptedLlm::pieces`]).
    Paced(Duration, Box<Reply>),
    /// The model's reasoning, then the answer: on Anthropic's wire a signed `thinking` block and
    /// a `redacted_thinking` one (streamed as `thinking_delta` and `signature_delta`), on
    /// OpenAI's `reasoning_content`.
    Thinking(String, Box<Reply>),
}

impl Reply {
    pub fn tool(name: &str, args: Value) -> Self {
        Reply::Tools(None, vec![(name.into(), args)])
    }
    pub fn finish(message: &str) -> Self {
        Reply::tool("finish", json!({"message": message}))
    }
}

/// The names of the tools a chat request offers, in order.
pub fn tool_names(request: &Value) -> Vec<String> {
    request["tools"].as_array().into_iter().flatten().filter_map(|t| t["function"]["name"].as_str().map(str::to_owned)).collect()
}

/// The names of the tools an Anthropic or Responses API request offers (flat: `{name, ...}`),
/// in order.
pub fn flat_tool_names(request: &Value) -> Vec<String> {
    request["tools"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str().map(str::to_owned)).collect()
}

type Fallback = Box<dyn Fn(&Value) -> Reply + Send + Sync>;

struct Inner {
    script: Mutex<VecDeque<Reply>>,
    /// Each request's headers and body as it came (parsed again when asked for: copying every
    /// growing history as it arrives was a fifth of this server's time in the step benchmark).
    requests: Mutex<Vec<(HeaderMap, Bytes)>>,
    fallback: Mutex<Option<Fallback>>,
    release: Notify,
    counter: Mutex<u64>,
    /// The usage reported for each answer: (prompt, completion, cached) tokens.
    usages: Mutex<Vec<(u64, u64, u64)>>,
    /// When each answered request arrived and when its answer was ready.
    timings: Mutex<Vec<(Instant, Instant)>>,
    /// Each piece of text a paced stream sent, and when.
    pieces: Mutex<Vec<(String, Instant)>>,
    /// The path of every call of the Gemini API (its model and method are there).
    paths: Mutex<Vec<String>>,
}

/// The scripted server. Cheap to clone.
#[derive(Clone)]
pub struct ScriptedLlm {
    inner: Arc<Inner>,
    pub base_url: String,
}

impl ScriptedLlm {
    /// Starts on a free loopback port.
    pub async fn start() -> Self {
        Self::start_at("127.0.0.1").await
    }

    /// Starts on a free port of every address of this host, for an agent in a container to
    /// call (OpenHands' agent server calls its LLM itself), at the host's address on its
    /// network; [`ScriptedLlm::base_url`] is still the loopback one.
    pub async fn start_for_containers() -> Self {
        Self::start_at("0.0.0.0").await
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.base_url.rsplit(':').next().and_then(|p| p.trim_end_matches("/v1").parse().ok()).expect("port")
    }

    async fn start_at(ip: &str) -> Self {
        let inner = Arc::new(Inner {
            script: Mutex::new(VecDeque::new()),
            requests: Mutex::new(Vec::new()),
            fallback: Mutex::new(None),
            release: Notify::new(),
            counter: Mutex::new(0),
            usages: Mutex::new(Vec::new()),
            timings: Mutex::new(Vec::new()),
            pieces: Mutex::new(Vec::new()),
            paths: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(complete))
            .route("/v1/messages", post(messages))
            .route("/v1/responses", post(responses))
            .route("/v1/models", get(models))
            .route("/v1beta/models", get(gemini::models))
            .route("/v1beta/models/{call}", post(gemini::generate))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.expect("bind scripted llm");
        let addr = std::net::SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), listener.local_addr().expect("addr").port());
        // A provider's edge sends each piece of a streamed answer as it is written; with Nagle's
        // algorithm on, a piece waited here for the client's delayed acknowledgement of the one
        // before (up to 40 ms), which the cold suite saw as stalls of one LLM call in a few.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { inner, base_url: format!("http://{addr}/v1") }
    }

    /// The base URL of its Gemini API (a `gemini` profile's).
    pub fn gemini_base(&self) -> String {
        format!("{}beta", self.base_url)
    }

    /// Appends replies to the script.
    pub fn push(&self, replies: impl IntoIterator<Item = Reply>) {
        self.inner.script.lock().expect("lock").extend(replies);
    }

    /// What to answer once the script is empty (default: a plain "done" message).
    pub fn fallback(&self, f: impl Fn(&Value) -> Reply + Send + Sync + 'static) {
        *self.inner.fallback.lock().expect("lock") = Some(Box::new(f));
    }

    /// Lets every hanging request go (they answer with an error).
    pub fn release(&self) {
        self.inner.release.notify_waiters();
    }

    /// Every request body received so far.
    pub fn requests(&self) -> Vec<Value> {
        let raw: Vec<Bytes> = self.inner.requests.lock().expect("lock").iter().map(|(_, b)| b.clone()).collect();
        raw.iter().map(|b| serde_json::from_slice(b).expect("a recorded request is JSON")).collect()
    }

    /// Waits (up to 30 s) until the server has been asked `n` times in all.
    pub async fn wait_requests(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let count = || self.inner.requests.lock().expect("lock").len();
        while count() < n {
            assert!(Instant::now() < deadline, "the LLM got {} requests, expected {n}", count());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The token usage reported with every answer so far: (prompt, completion, cached).
    pub fn usages(&self) -> Vec<(u64, u64, u64)> {
        self.inner.usages.lock().expect("lock").clone()
    }

    /// For every answered request, in order: when it arrived and when its answer was ready (the
    /// time between one answer and the next request is the client's own).
    pub fn timings(&self) -> Vec<(Instant, Instant)> {
        self.inner.timings.lock().expect("lock").clone()
    }

    /// Each piece of text paced streams sent ([`Reply::Paced`]), and when it went out.
    pub fn pieces(&self) -> Vec<(String, Instant)> {
        self.inner.pieces.lock().expect("lock").clone()
    }

    /// The path of every call of its Gemini API so far (`/v1beta/models/{model}:{method}`).
    pub fn paths(&self) -> Vec<String> {
        self.inner.paths.lock().expect("lock").clone()
    }

    /// Every request's `Authorization` header.
    pub fn auth_headers(&self) -> Vec<Option<String>> {
        self.headers("authorization")
    }

    /// Every request's header `name`.
    pub fn headers(&self, name: &str) -> Vec<Option<String>> {
        self.inner
            .requests
            .lock()
            .expect("lock")
            .iter()
            .map(|(h, _)| h.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned))
            .collect()
    }
}

/// A request's body, parsed and as it came. A body that is not JSON is refused as the
/// providers refuse it: 400 with an `invalid_request_error`.
/// The instant is when the body had arrived, before it was parsed.
struct Request(Value, Bytes, Instant);

impl<S: Send + Sync> FromRequest<S> for Request {
    type Rejection = Response;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Response> {
        let raw = Bytes::from_request(req, state).await.map_err(IntoResponse::into_response)?;
        let arrived = Instant::now();
        match serde_json::from_slice(&raw) {
            Ok(value) => Ok(Request(value, raw, arrived)),
            Err(e) => {
                let error = json!({"error": {"message": format!("We could not parse the JSON body of your request: {e}"), "type": "invalid_request_error"}});
                Err((StatusCode::BAD_REQUEST, Json(error)).into_response())
            }
        }
    }
}

/// The length of a request's history (`messages`, the Responses API's `input`, Gemini's
/// `contents`) as it was
/// sent, the basis of the usage this server reports.
fn history_len(raw: &[u8]) -> usize {
    #[derive(serde::Deserialize)]
    struct History<'a> {
        #[serde(borrow)]
        messages: Option<&'a serde_json::value::RawValue>,
        #[serde(borrow)]
        input: Option<&'a serde_json::value::RawValue>,
        #[serde(borrow)]
        contents: Option<&'a serde_json::value::RawValue>,
    }
    serde_json::from_slice::<History>(raw).ok().and_then(|h| h.messages.or(h.input).or(h.contents)).map_or(0, |v| v.get().len())
}

/// What the script says to answer: `(n, content, calls as (id, name, arguments), usage as
/// (prompt, completion, cached))`, or an error response already made.
type Answer = (u64, Option<String>, Vec<(String, String, String)>, (u64, u64, u64), Option<String>, Option<Duration>);

/// The signature this server gives a thinking block's text (and checks when it comes back).
pub fn signature(text: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    format!("EqsB{:016x}", h.finish())
}

/// What Anthropic's API says of a request with thinking on whose last assistant turn, with tool
/// use, does not start with its thinking exactly as given (none: the request is right).
fn thinking_refusal(body: &Value) -> Option<String> {
    body.get("thinking")?;
    let messages = body["messages"].as_array()?;
    let (i, last) = messages.iter().enumerate().rev().find(|(_, m)| m["role"] == "assistant")?;
    let blocks = last["content"].as_array()?;
    if !blocks.iter().any(|b| b["type"] == "tool_use") {
        return None;
    }
    let first = blocks.first()?;
    if first["type"] != "thinking" && first["type"] != "redacted_thinking" {
        return Some(format!(
            "messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{}`. When `thinking` is enabled, a final \
             `assistant` message must start with a thinking block.",
            first["type"].as_str().unwrap_or_default()
        ));
    }
    blocks.iter().filter(|b| b["type"] == "thinking").find_map(|b| {
        (b["signature"].as_str() != Some(signature(b["thinking"].as_str().unwrap_or_default()).as_str()))
            .then(|| format!("messages.{i}.content: Invalid `signature` in `thinking` block"))
    })
}

/// Records when an answered request arrived and when its answer was ready.
fn answered(inner: &Inner, arrived: Instant, response: Response) -> Response {
    inner.timings.lock().expect("lock").push((arrived, Instant::now()));
    response
}

/// Whose words a scripted error is in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wire {
    OpenAi,
    Anthropic,
    Gemini,
}

async fn next_answer(inner: &Inner, headers: HeaderMap, Request(body, raw, _): &Request, wire: Wire) -> Result<Answer, Response> {
    let anthropic = wire == Wire::Anthropic;
    inner.requests.lock().expect("lock").push((headers, raw.clone()));
    let next = inner.script.lock().expect("lock").pop_front();
    let mut reply = match next {
        Some(r) => r,
        None => match inner.fallback.lock().expect("lock").as_ref() {
            Some(f) => f(body),
            None => Reply::Text("done".into()),
        },
    };
    if anthropic {
        if let Some(message) = thinking_refusal(body) {
            let error = json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}});
            return Err((StatusCode::BAD_REQUEST, Json(error)).into_response());
        }
    }
    let mut thinking = None;
    let mut pace = None;
    loop {
        match reply {
            Reply::Thinking(text, r) => {
                thinking = Some(text);
                reply = *r;
            }
            Reply::Paced(d, r) => {
                pace = Some(d);
                reply = *r;
            }
            Reply::Delay(d, r) => {
                tokio::time::sleep(d).await;
                reply = *r;
            }
            Reply::Hang => {
                inner.release.notified().await;
                return Err((StatusCode::SERVICE_UNAVAILABLE, "released").into_response());
            }
            Reply::Status(code) => {
                let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                if wire == Wire::Gemini {
                    return Err(gemini::error(status, "scripted failure"));
                }
                return Err((status, Json(json!({"error": {"message": "scripted failure", "type": "server_error"}}))).into_response());
            }
            Reply::ContextTooLong => {
                if wire == Wire::Gemini {
                    let message = "The input token count (250000) exceeds the maximum number of tokens allowed (1048576).";
                    return Err(gemini::error(StatusCode::BAD_REQUEST, message));
                }
                let body = if anthropic {
                    json!({"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 250000 tokens > 200000 maximum"}})
                } else {
                    json!({"error": {"message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 250000 tokens.",
                        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})
                };
                return Err((StatusCode::BAD_REQUEST, Json(body)).into_response());
            }
            _ => break,
        }
    }
    let n = {
        let mut c = inner.counter.lock().expect("lock");
        *c += 1;
        *c
    };
    let (content, calls) = match reply {
        Reply::Text(t) => (Some(t), Vec::new()),
        Reply::Tools(content, calls) => {
            let prefix = if anthropic { "toolu" } else { "call" };
            (
                content,
                calls.into_iter().enumerate().map(|(i, (name, args))| (format!("{prefix}_{n}_{i}"), name, args.to_string())).collect(),
            )
        }
        _ => (None, Vec::new()),
    };
    // Usage as a provider reports it: a prompt that grows with the conversation, a quarter of it
    // from the prompt cache.
    let prompt = (history_len(raw) as u64).div_ceil(4);
    let answer = content.as_deref().map_or(0, str::len) + calls.iter().map(|(_, name, args)| name.len() + args.len()).sum::<usize>();
    let usage = (prompt, (answer as u64).div_ceil(4).max(1), prompt / 4);
    inner.usages.lock().expect("lock").push(usage);
    Ok((n, content, calls, usage, thinking, pace))
}

/// `POST /v1/messages`, as Anthropic answers it.
async fn messages(State(inner): State<Arc<Inner>>, headers: HeaderMap, request: Request) -> Response {
    let (body, arrived) = (&request.0, request.2);
    if headers.get("anthropic-version").is_none() || body.get("max_tokens").and_then(Value::as_u64).is_none() {
        let error = json!({"type": "error", "error": {"type": "invalid_request_error", "message": "anthropic-version and max_tokens are required"}});
        return (StatusCode::BAD_REQUEST, Json(error)).into_response();
    }
    let (n, content, calls, (prompt, completion, cached), thinking, pace) =
        match next_answer(&inner, headers, &request, Wire::Anthropic).await {
            Ok(a) => a,
            Err(response) => return response,
        };
    let mut blocks: Vec<Value> = Vec::new();
    if let Some(text) = &thinking {
        blocks.push(json!({"type": "thinking", "thinking": text, "signature": signature(text)}));
        blocks.push(json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"}));
    }
    if let Some(text) = &content {
        blocks.push(json!({"type": "text", "text": text}));
    }
    for (id, name, args) in &calls {
        let input: Value = serde_json::from_str(args).unwrap_or(json!({}));
        blocks.push(json!({"type": "tool_use", "id": id, "name": name, "input": input}));
    }
    let stop = if calls.is_empty() { "end_turn" } else { "tool_use" };
    let usage = json!({"input_tokens": prompt - cached, "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0, "output_tokens": completion});
    if !body.get("stream").and_then(Value::as_bool).unwrap_or(false) {
        let response = Json(json!({"id": format!("msg_{n}"), "type": "message", "role": "assistant", "model": body["model"],
            "content": blocks, "stop_reason": stop, "usage": usage}))
        .into_response();
        return answered(&inner, arrived, response);
    }
    let mut events: Vec<Value> = vec![json!({"type": "message_start", "message": {"id": format!("msg_{n}"), "type": "message",
        "role": "assistant", "content": [], "model": body["model"], "usage": {"input_tokens": prompt - cached,
        "cache_read_input_tokens": cached, "output_tokens": 1}}})];
    for (i, block) in blocks.iter().enumerate() {
        if block["type"] == "thinking" {
            events.push(json!({"type": "content_block_start", "index": i, "content_block": {"type": "thinking", "thinking": ""}}));
            let chars: Vec<char> = block["thinking"].as_str().unwrap_or_default().chars().collect();
            for piece in chars.chunks(7) {
                events.push(json!({"type": "content_block_delta", "index": i, "delta": {"type": "thinking_delta", "thinking": piece.iter().collect::<String>()}}));
            }
            events.push(
                json!({"type": "content_block_delta", "index": i, "delta": {"type": "signature_delta", "signature": block["signature"]}}),
            );
        } else if block["type"] == "redacted_thinking" {
            events.push(json!({"type": "content_block_start", "index": i, "content_block": block}));
        } else if block["type"] == "text" {
            events.push(json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}));
            let chars: Vec<char> = block["text"].as_str().unwrap_or_default().chars().collect();
            for piece in chars.chunks(7) {
                events.push(json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": piece.iter().collect::<String>()}}));
            }
        } else {
            events.push(json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}}));
            let chars: Vec<char> = block["input"].to_string().chars().collect();
            for piece in chars.chunks(9) {
                events.push(json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": piece.iter().collect::<String>()}}));
            }
        }
        events.push(json!({"type": "content_block_stop", "index": i}));
        if i == 0 {
            events.push(json!({"type": "ping"}));
        }
    }
    events.push(
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": completion}}),
    );
    events.push(json!({"type": "message_stop"}));
    let events: Vec<(String, Option<String>)> = events
        .into_iter()
        .map(|e| {
            let piece = (e["delta"]["type"] == "text_delta").then(|| e["delta"]["text"].as_str().unwrap_or_default().to_owned());
            (format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or_default()), piece)
        })
        .collect();
    answered(&inner, arrived, stream_events(&inner, events, pace))
}

/// A stream's events as the body: all at once in small chunks, or one event at a time `pace`
/// apart, noting when each piece of text went out.
fn stream_events(inner: &Arc<Inner>, events: Vec<(String, Option<String>)>, pace: Option<Duration>) -> Response {
    let Some(pace) = pace else { return stream_body(events.into_iter().map(|(e, _)| e).collect()) };
    let inner = inner.clone();
    let body = Body::from_stream(futures::stream::unfold(events.into_iter(), move |mut events| {
        let inner = inner.clone();
        async move {
            let (event, piece) = events.next()?;
            tokio::time::sleep(pace).await;
            if let Some(piece) = piece {
                inner.pieces.lock().expect("lock").push((piece, Instant::now()));
            }
            Some((Ok::<_, Infallible>(event.into_bytes()), events))
        }
    }));
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn stream_body(text: String) -> Response {
    let body =
        Body::from_stream(futures::stream::iter(text.into_bytes().chunks(64).map(|c| Ok::<_, Infallible>(c.to_vec())).collect::<Vec<_>>()));
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

async fn complete(State(inner): State<Arc<Inner>>, headers: HeaderMap, request: Request) -> Response {
    let (body, arrived) = (&request.0, request.2);
    let (n, content, calls, (prompt, completion, cached), thinking, pace) = match next_answer(&inner, headers, &request, Wire::OpenAi).await
    {
        Ok(a) => a,
        Err(response) => return response,
    };
    let usage = json!({
        "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    });
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    // Streams carry usage only when asked (`stream_options.include_usage`), as OpenAI's do.
    let stream_usage = body["stream_options"]["include_usage"].as_bool().unwrap_or(false).then(|| usage.clone());
    let response = if stream {
        stream_events(&inner, sse(n, content, calls, stream_usage, thinking), pace)
    } else {
        plain(n, content, calls, usage, thinking)
    };
    answered(&inner, arrived, response)
}

fn plain(n: u64, content: Option<String>, calls: Vec<(String, String, String)>, usage: Value, thinking: Option<String>) -> Response {
    let tool_calls: Vec<Value> =
        calls.iter().map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})).collect();
    let mut message = json!({"role": "assistant", "content": content});
    if let Some(text) = thinking {
        message["reasoning_content"] = text.into();
    }
    if !tool_calls.is_empty() {
        message["tool_calls"] = Value::Array(tool_calls);
    }
    let finish = if calls.is_empty() { "stop" } else { "tool_calls" };
    Json(json!({
        "id": format!("chatcmpl-{n}"), "object": "chat.completion", "created": 0, "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage
    }))
    .into_response()
}

/// Server-sent events, with content and arguments split into small fragments as real
/// servers do.
fn sse(
    n: u64,
    content: Option<String>,
    calls: Vec<(String, String, String)>,
    usage: Option<Value>,
    thinking: Option<String>,
) -> Vec<(String, Option<String>)> {
    let mut chunks: Vec<Value> = vec![json!({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})];
    if let Some(text) = thinking {
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(7) {
            chunks.push(json!({"choices": [{"index": 0, "delta": {"reasoning_content": piece.iter().collect::<String>()}}]}));
        }
    }
    if let Some(text) = content {
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(7) {
            chunks.push(json!({"choices": [{"index": 0, "delta": {"content": piece.iter().collect::<String>()}}]}));
        }
    }
    for (i, (id, name, args)) in calls.iter().enumerate() {
        chunks.push(json!({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": i, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]}}]}));
        let chars: Vec<char> = args.chars().collect();
        for piece in chars.chunks(9) {
            chunks.push(json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": i, "function": {"arguments": piece.iter().collect::<String>()}}]}}]}));
        }
    }
    let finish = if calls.is_empty() { "stop" } else { "tool_calls" };
    chunks.push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}));
    if let Some(usage) = usage {
        chunks.push(json!({"choices": [], "usage": usage}));
    }
    let mut events: Vec<(String, Option<String>)> = chunks
        .into_iter()
        .map(|mut c| {
            c["id"] = json!(format!("chatcmpl-{n}"));
            c["object"] = json!("chat.completion.chunk");
            let piece = c["choices"][0]["delta"]["content"].as_str().map(str::to_owned);
            (format!("data: {c}\n\n"), piece)
        })
        .collect();
    events.push(("data: [DONE]\n\n".to_owned(), None));
    events
}

/// What `GET /v1/models` lists to an OpenAI client.
pub const OPENAI_MODELS: &[&str] = &["scripted-large", "scripted-small"];
/// What it lists to an Anthropic client: (id, display name).
pub const ANTHROPIC_MODELS: &[(&str, &str)] = &[
    ("claude-scripted-haiku", "Claude Scripted Haiku"),
    ("claude-scripted-opus", "Claude Scripted Opus"),
    ("claude-scripted-sonnet", "Claude Scripted Sonnet"),
];

/// `GET /v1/models`, as each provider answers it: OpenAI's one list, or Anthropic's pages
/// (`after_id`, `has_more`, `last_id`; two a page here so that a client must follow them), each
/// wanting its own key header. Strict, as some servers are: a stray empty query string (`?` with
/// nothing after it) is a path it does not know.
async fn models(uri: axum::http::Uri, headers: HeaderMap, Query(q): Query<std::collections::HashMap<String, String>>) -> Response {
    if uri.query() == Some("") {
        let error = json!({"error": {"message": format!("Invalid URL (GET {uri})"), "type": "invalid_request_error", "code": "not_found"}});
        return (StatusCode::NOT_FOUND, Json(error)).into_response();
    }
    if headers.get("anthropic-version").is_some() {
        if headers.get("x-api-key").is_none() {
            let error = json!({"type": "error", "error": {"type": "authentication_error", "message": "x-api-key header is required"}});
            return (StatusCode::UNAUTHORIZED, Json(error)).into_response();
        }
        let start = q.get("after_id").and_then(|after| ANTHROPIC_MODELS.iter().position(|(id, _)| id == after)).map_or(0, |i| i + 1);
        let page: Vec<&(&str, &str)> = ANTHROPIC_MODELS.iter().skip(start).take(2).collect();
        let data: Vec<Value> = page
            .iter()
            .map(|(id, name)| json!({"type": "model", "id": id, "display_name": name, "created_at": "2026-01-01T00:00:00Z"}))
            .collect();
        let has_more = start + page.len() < ANTHROPIC_MODELS.len();
        let first = page.first().map(|m| m.0);
        let last = page.last().map(|m| m.0);
        return Json(json!({"data": data, "has_more": has_more, "first_id": first, "last_id": last})).into_response();
    }
    let data: Vec<Value> =
        OPENAI_MODELS.iter().map(|id| json!({"id": id, "object": "model", "created": 0, "owned_by": "scripted"})).collect();
    Json(json!({"object": "list", "data": data})).into_response()
}

/// What OpenAI's Responses API says of a request whose `function_call` item has no
/// `function_call_output` after it (none: the request is right).
fn responses_refusal(body: &Value) -> Option<String> {
    let items = body["input"].as_array()?;
    items.iter().enumerate().filter(|(_, i)| i["type"] == "function_call").find_map(|(at, call)| {
        let id = call["call_id"].as_str().unwrap_or_default();
        let answered = items[at..].iter().any(|i| i["type"] == "function_call_output" && i["call_id"] == id);
        (!answered).then(|| format!("No tool output found for function call {id}."))
    })
}

/// `POST /v1/responses`, as OpenAI's Responses API answers it.
async fn responses(State(inner): State<Arc<Inner>>, headers: HeaderMap, request: Request) -> Response {
    let (body, arrived) = (&request.0, request.2);
    if let Some(message) = responses_refusal(body) {
        let error = json!({"error": {"message": message, "type": "invalid_request_error", "param": "input", "code": null}});
        return (StatusCode::BAD_REQUEST, Json(error)).into_response();
    }
    // The history in chat terms, for the scripted replies that read it.
    let (n, content, calls, (prompt, completion, cached), thinking, pace) = match next_answer(&inner, headers, &request, Wire::OpenAi).await
    {
        Ok(a) => a,
        Err(response) => return response,
    };
    let mut output: Vec<Value> = Vec::new();
    if let Some(text) = &thinking {
        output.push(json!({"type": "reasoning", "id": format!("rs_{n}"), "summary": [{"type": "summary_text", "text": text}]}));
    }
    if let Some(text) = &content {
        output.push(json!({"type": "message", "id": format!("msg_{n}"), "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}));
    }
    for (id, name, args) in &calls {
        output.push(json!({"type": "function_call", "id": format!("fc_{id}"), "call_id": id, "name": name, "arguments": args, "status": "completed"}));
    }
    let usage = json!({"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached}, "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": prompt + completion});
    let response = json!({"id": format!("resp_{n}"), "object": "response", "status": "completed", "model": body["model"],
        "output": output, "usage": usage});
    if !body.get("stream").and_then(Value::as_bool).unwrap_or(false) {
        return answered(&inner, arrived, Json(response).into_response());
    }
    let mut events: Vec<(Value, Option<String>)> =
        vec![(json!({"type": "response.created", "response": {"id": format!("resp_{n}"), "status": "in_progress", "output": []}}), None)];
    for (i, item) in output.iter().enumerate() {
        let mut added = item.clone();
        match item["type"].as_str() {
            Some("message") => {
                added["content"] = json!([]);
                events.push((json!({"type": "response.output_item.added", "output_index": i, "item": added}), None));
                let chars: Vec<char> = item["content"][0]["text"].as_str().unwrap_or_default().chars().collect();
                for piece in chars.chunks(7) {
                    let piece: String = piece.iter().collect();
                    events.push((
                        json!({"type": "response.output_text.delta", "item_id": item["id"], "output_index": i, "content_index": 0, "delta": piece}),
                        Some(piece),
                    ));
                }
                events.push((
                    json!({"type": "response.output_text.done", "item_id": item["id"], "output_index": i, "content_index": 0,
                    "text": item["content"][0]["text"]}),
                    None,
                ));
            }
            Some("function_call") => {
                added["arguments"] = json!("");
                events.push((json!({"type": "response.output_item.added", "output_index": i, "item": added}), None));
                let chars: Vec<char> = item["arguments"].as_str().unwrap_or_default().chars().collect();
                for piece in chars.chunks(9) {
                    events.push((
                        json!({"type": "response.function_call_arguments.delta", "item_id": item["id"], "output_index": i,
                            "delta": piece.iter().collect::<String>()}),
                        None,
                    ));
                }
                events.push((
                    json!({"type": "response.function_call_arguments.done", "item_id": item["id"], "output_index": i,
                    "arguments": item["arguments"]}),
                    None,
                ));
            }
            _ => {
                let text = item["summary"][0]["text"].clone();
                events.push((json!({"type": "response.output_item.added", "output_index": i, "item": {"type": "reasoning", "id": item["id"], "summary": []}}), None));
                events.push((json!({"type": "response.reasoning_summary_text.delta", "item_id": item["id"], "output_index": i, "summary_index": 0, "delta": text}), None));
            }
        }
        events.push((json!({"type": "response.output_item.done", "output_index": i, "item": item}), None));
    }
    events.push((json!({"type": "response.completed", "response": response}), None));
    let events: Vec<(String, Option<String>)> = events
        .into_iter()
        .enumerate()
        .map(|(seq, (mut e, piece))| {
            e["sequence_number"] = json!(seq);
            (format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or_default()), piece)
        })
        .collect();
    answered(&inner, arrived, stream_events(&inner, events, pace))
}

/// The messages of a chat-completions request from its last user message on: that message,
/// then what the agent did about it (a `tool` message among them: a tool has answered).
pub fn latest_turn(request: &Value) -> &[Value] {
    let messages = request["messages"].as_array().map(Vec::as_slice).unwrap_or_default();
    &messages[messages.iter().rposition(|m| m["role"] == "user").unwrap_or(0)..]
}

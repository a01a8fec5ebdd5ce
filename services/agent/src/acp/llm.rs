//! The outer half of a third-party agent's LLM relay: the agent in the sandbox calls its
//! provider's API at the executor's loopback listener with a per-run token; the call reaches
//! this runner over the executor's `GET /llm/relay` socket ([`halyard_platform::relay`]) and is
//! made here, to the conversation's LLM profile (its fallbacks after it), with the profile's
//! real key and model (or the subscription login the owner handed to the agent's kind, in
//! place of the key). The owner's secrets are masked in what is sent; the budget is checked
//! before and the call recorded (an `llm_call` event, counted in usage, budgets and the
//! organization's spending) after, before the agent sees the end of the answer. Requests for
//! `<relay>/mcp`, with the same token, go to the conversation's MCP server ([`super::mcp`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use halyard_platform::llm::fallback::LlmChain;
use halyard_platform::llm::passthrough::{UsageReader, error_body, route};
use halyard_platform::relay::{self, Answer, Refusal};
use halyard_protocol::TraceContext;
use serde_json::Value;
use tokio::sync::Mutex;

use crate::ctx::Ctx;
use crate::log::Log;

/// Largest request body an agent may send (a long conversation with images).
const MAX_BODY: usize = 64 << 20;
/// Answer headers passed back to the agent.
const ANSWER_HEADERS: [&str; 4] = ["content-type", "retry-after", "request-id", "x-request-id"];

/// What the relay of one run needs.
pub struct Relay {
    pub ctx: Arc<Ctx>,
    pub log: Arc<Mutex<Log>>,
    pub trace: Option<TraceContext>,
    pub chain: LlmChain,
    /// The token the agent's calls carry.
    pub token: String,
    /// Set when a call was refused because a budget is spent: the run ends.
    pub spent: Arc<AtomicBool>,
    /// The conversation's MCP tools, served at `<relay>/mcp` ([`super::mcp`]).
    pub mcp: Option<super::mcp::Server>,
    /// The subscription login the owner handed to this agent's kind, opened: sent to the
    /// profile's server in place of its key (a fallback's calls carry the fallback's key).
    pub login: Option<String>,
}

impl Relay {
    /// The relay's request handler.
    pub fn handler(self) -> relay::Handler {
        let this = Arc::new(self);
        Arc::new(move |request| {
            let this = this.clone();
            Box::pin(async move { this.answer(request).await }) as BoxFuture<'static, Result<Answer, Refusal>>
        })
    }

    async fn answer(self: Arc<Self>, request: relay::Request) -> Result<Answer, Refusal> {
        let wire = self.chain.primary().wire().to_owned();
        let refuse =
            |status: u16, kind: &str, message: &str| Refusal::Answer(json_answer(status, &error_body(&wire, status, kind, message)));
        let presented = request.headers.iter().find_map(|(name, value)| match name.to_ascii_lowercase().as_str() {
            "x-api-key" | "x-goog-api-key" => Some(value.clone()),
            "authorization" => value.strip_prefix("Bearer ").map(str::to_owned),
            _ => None,
        });
        if presented.as_deref() != Some(self.token.as_str()) {
            return Err(refuse(401, "authentication_error", "this relay answers its own agent's calls only"));
        }
        // The conversation's MCP tools share the listener (and the token).
        if let Some(server) = self.mcp.clone().filter(|_| request.target.trim_matches('/') == super::mcp::PATH) {
            let relay::Request { method, headers, body, .. } = request;
            let body = read(body).await.map_err(|m| refuse(413, "request_too_large", m))?;
            return Ok(server.answer(&method, &headers, body.into()).await);
        }
        let call = route(&wire, &request.method, &request.target).map_err(|m| refuse(404, "not_found_error", &m))?;
        let body = read(request.body).await.map_err(|m| refuse(413, "request_too_large", m))?;
        if let Some(why) = self.refusal().await {
            self.spent.store(true, Ordering::SeqCst);
            return Err(refuse(402, "budget_exceeded", &why));
        }
        // The owner's secrets never reach the provider: masked in the text the agent sends.
        let redactor = self.log.lock().await.redactor();
        let text = String::from_utf8_lossy(&body);
        let body: Value = match serde_json::from_str(&redactor.redact(&text)) {
            Ok(v) => v,
            Err(e) => return Err(refuse(400, "invalid_request_error", &format!("the body is no JSON: {e}"))),
        };
        let stream = call.stream.unwrap_or_else(|| body.get("stream").and_then(Value::as_bool).unwrap_or(false));
        let asked = Instant::now();
        // The profile, then each fallback that speaks the same wire, until one answers (each
        // with its own model, which Gemini names in the path).
        let mut last = None;
        for (i, link) in self.chain.links().iter().filter(|l| l.client.wire() == wire).enumerate() {
            let login = self.login.as_deref().filter(|_| i == 0);
            match link.client.pass_through(body.clone(), &request.headers, &call, login).await {
                Ok(r) if r.status().as_u16() == 429 || r.status().is_server_error() => last = Some(Ok(r)),
                Ok(r) => return Ok(self.clone().relayed(r, link.clone(), &wire, stream, asked, call.counted)),
                Err(e) => last = Some(Err(e)),
            }
        }
        match last {
            Some(Ok(r)) => Ok(plain_answer(r)),
            Some(Err(e)) => Err(refuse(502, "api_error", &format!("the LLM could not be reached: {e}"))),
            None => Err(refuse(500, "api_error", "the conversation has no LLM")),
        }
    }

    /// Why no further call may be made (a budget is spent), if so.
    async fn refusal(&self) -> Option<String> {
        let price = self.chain.primary().price().cloned();
        let (org, owner, over) = {
            let log = self.log.lock().await;
            let over = crate::budget::exceeded(&log.history, 0, price.as_ref());
            let started = log.history.started.as_ref();
            (started.and_then(|s| s.org.clone()), started.map(|s| s.owner.clone()), over)
        };
        if over.is_some() {
            return over;
        }
        let (org, owner) = (org?, owner?);
        crate::org_budget::refused(&self.ctx, &org, &owner).await.ok().flatten()
    }

    /// The provider's answer on its way to the agent: its usage read as it passes, and the call
    /// recorded before the last piece goes out (so the log has it before the agent goes on). A
    /// stream's pieces pass at once up to its closing event (holding each back until the next
    /// came delayed every piece by the gap between two).
    fn relayed(
        self: Arc<Self>,
        response: reqwest::Response,
        link: halyard_platform::llm::fallback::Link,
        wire: &str,
        stream: bool,
        asked: Instant,
        counted: bool,
    ) -> Answer {
        let status = response.status().as_u16();
        let headers = answer_headers(&response);
        if status >= 400 || !counted {
            return Answer { status, headers, body: response.bytes_stream().map(|c| c.map_err(|e| e.to_string())).boxed() };
        }
        let reader = UsageReader::new(wire, stream);
        let upstream = response.bytes_stream().boxed();
        // (upstream, the chunk held back, the usage reader, done)
        let state = (upstream, None::<bytes::Bytes>, Some(reader), false);
        let body = futures::stream::unfold(state, move |(mut upstream, mut held, mut reader, done)| {
            let (this, link) = (self.clone(), link.clone());
            async move {
                if done {
                    return None;
                }
                loop {
                    match upstream.next().await {
                        Some(Ok(chunk)) => {
                            let ending = reader.as_mut().is_some_and(|r| {
                                r.feed(&chunk);
                                r.ending()
                            });
                            // A stream's pieces go on as they come; from its closing event on
                            // they wait for the call's record. A whole answer keeps back its
                            // last piece.
                            if stream && !ending && held.is_none() {
                                return Some((Ok(chunk), (upstream, held, reader, false)));
                            }
                            if stream {
                                held = Some(match held.take() {
                                    Some(h) => [h, chunk].concat().into(),
                                    None => chunk,
                                });
                            } else if let Some(previous) = held.replace(chunk) {
                                return Some((Ok(previous), (upstream, held, reader, false)));
                            }
                        }
                        Some(Err(e)) => return Some((Err(e.to_string()), (upstream, None, None, true))),
                        None => {
                            if let Some(r) = reader.take() {
                                this.record(&link, r.finish(), asked.elapsed()).await;
                            }
                            let last = held.take()?;
                            return Some((Ok(last), (upstream, None, None, true)));
                        }
                    }
                }
            }
        });
        Answer { status, headers, body: body.boxed() }
    }

    /// Appends the `llm_call` of one relayed call (tokens as the provider reported them).
    async fn record(&self, link: &halyard_platform::llm::fallback::Link, usage: Option<halyard_platform::llm::Usage>, latency: Duration) {
        let body = crate::llm_calls::of(link, usage.unwrap_or_default(), latency);
        crate::llm_calls::record(&self.ctx, &self.log, self.trace.clone(), body).await;
    }
}

/// A request's whole body, up to [`MAX_BODY`].
async fn read(body: tokio::sync::mpsc::Receiver<bytes::Bytes>) -> Result<Vec<u8>, &'static str> {
    let mut out = Vec::new();
    let mut chunks = relay::stream_of(body);
    while let Some(chunk) = chunks.next().await {
        out.extend_from_slice(&chunk);
        if out.len() > MAX_BODY {
            return Err("the request is over 64 MiB");
        }
    }
    Ok(out)
}

fn answer_headers(response: &reqwest::Response) -> Vec<(String, String)> {
    ANSWER_HEADERS.iter().filter_map(|name| Some(((*name).to_owned(), response.headers().get(*name)?.to_str().ok()?.to_owned()))).collect()
}

/// A server's answer passed on as it is (an error the agent reads and may retry).
fn plain_answer(response: reqwest::Response) -> Answer {
    let (status, headers) = (response.status().as_u16(), answer_headers(&response));
    Answer { status, headers, body: response.bytes_stream().map(|c| c.map_err(|e| e.to_string())).boxed() }
}

fn json_answer(status: u16, body: &Value) -> Answer {
    let bytes = bytes::Bytes::from(body.to_string());
    Answer {
        status,
        headers: vec![("content-type".into(), "application/json".into())],
        body: futures::stream::once(async move { Ok(bytes) }).boxed(),
    }
}

//! Following one turn of a third-party agent: each line it writes is dealt with (recorded,
//! answered) and then acknowledged, so a line this runner did not deal with is handed to the
//! next one. A permission request that waits for the user is left unacknowledged: the run that
//! the user's Confirm or Reject starts is handed it again, and answers it.

use std::sync::atomic::Ordering;

use halyard_protocol::event::{EventBody, EventSource, ExecutionStatus, SecurityRisk};
use serde_json::{Value, json};

use super::{Incoming, Step, Turn};
use crate::run_loop::{Run, RunOutcome};

/// What dealing with one line came to.
enum Dealt {
    /// Go on (the line is acknowledged).
    Next,
    /// The turn ended so (the line is acknowledged).
    Ended(RunOutcome),
    /// The run stops here, the line left for the next run.
    Leave(RunOutcome),
}

impl Turn<'_> {
    pub(super) async fn follow(&mut self) -> RunOutcome {
        loop {
            let incoming = tokio::select! {
                _ = Run::until_set(self.run.cancel.clone()) => return RunOutcome::Paused,
                _ = Run::until_set(self.run.interrupt.clone()), if !self.interrupted => {
                    self.interrupt().await;
                    continue;
                }
                incoming = self.conn.next() => incoming,
            };
            let (seq, message) = match incoming {
                Incoming::Line(seq, message) => (seq, message),
                Incoming::Exited(why) => return self.run.fail("agent_exited", format!("The agent stopped: {why}")).await,
                Incoming::Closed => return self.run.fail("agent_unavailable", "The sandbox closed the agent's socket".into()).await,
            };
            let dealt = match self.deal(&message).await {
                Ok(d) => d,
                Err(e) => return self.run.fail("agent_unavailable", e).await,
            };
            match dealt {
                Dealt::Next => {}
                Dealt::Ended(outcome) => {
                    let _ = self.conn.ack(seq).await;
                    return outcome;
                }
                Dealt::Leave(outcome) => return outcome,
            }
            let _ = self.conn.ack(seq).await;
            if self.spent.load(Ordering::SeqCst) && !self.interrupted {
                self.interrupt().await;
            }
        }
    }

    /// The turn is cancelled: the agent is told, and the commands its terminals run stop.
    async fn interrupt(&mut self) {
        self.interrupted = true;
        self.cancel_turn().await;
        self.terminals.interrupt_all(self.exec).await;
    }

    async fn cancel_turn(&mut self) {
        let cancel = json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": self.conn.session}});
        let _ = self.conn.send(&cancel).await;
    }

    async fn deal(&mut self, message: &Value) -> Result<Dealt, String> {
        let method = message.get("method").and_then(Value::as_str);
        let id = message.get("id");
        match (method, id) {
            (Some("session/update"), None) => {
                let mut update = message.pointer("/params/update").cloned().unwrap_or(Value::Null);
                self.terminals.inline(&mut update);
                let steps = {
                    let log = self.run.log.lock().await;
                    let pending = |id: &str| log.history.pending.iter().any(|p| p.tool_call_id == id);
                    self.updates.apply(&update, &pending)
                };
                self.steps(steps).await?;
                Ok(Dealt::Next)
            }
            (Some(method), Some(id)) => self.request(method, id.clone(), message.get("params").cloned().unwrap_or(Value::Null)).await,
            (None, Some(id)) if id.as_str() == Some(self.prompt_id.as_str()) => Ok(Dealt::Ended(self.end(message).await)),
            _ => Ok(Dealt::Next),
        }
    }

    /// Carries out what an update came to.
    async fn steps(&mut self, steps: Vec<Step>) -> Result<(), String> {
        // The seq of the last event these steps appended: an observation's checkpoint is taken
        // at it, not at the log's end, where the relay may have put an LLM call meanwhile (a
        // restore at the observation would then find the checkpoint before it).
        let mut appended = None;
        for step in steps {
            match step {
                Step::Delta(text) => {
                    if self.deltas.is_none() {
                        let (conversation, after, redactor) = {
                            let log = self.run.log.lock().await;
                            (log.conversation(), log.history.last_seq, log.redactor())
                        };
                        self.deltas = Some(crate::run_loop::streaming::publish(&self.run.ctx, conversation, after, redactor));
                    }
                    if let Some((tx, _)) = &self.deltas {
                        let _ = tx.send(Some(text));
                    }
                }
                Step::Append(body) => {
                    if matches!(body, EventBody::AgentMessage { .. }) {
                        // The pieces go out before the whole answer is in the log.
                        if let Some((tx, publishing)) = self.deltas.take() {
                            drop(tx);
                            let _ = publishing.await;
                        }
                    }
                    appended = Some(self.run.append_seq(EventSource::Agent, body).await.ok_or("the log could not be written")?);
                }
                Step::Observed { changes } => {
                    if changes {
                        let seq = match appended {
                            Some(seq) => seq,
                            None => self.run.log.lock().await.history.last_seq,
                        };
                        self.run.checkpoint_behind(self.exec, seq).await;
                    }
                }
            }
        }
        Ok(())
    }

    /// Answers a request of the agent's.
    async fn request(&mut self, method: &str, id: Value, params: Value) -> Result<Dealt, String> {
        let answer = match method {
            "session/request_permission" => match self.permission(&params).await? {
                Some(outcome) => Ok(json!({"outcome": outcome})),
                None => return Ok(Dealt::Leave(RunOutcome::AwaitingConfirmation)),
            },
            "fs/read_text_file" => self.read_file(&params).await,
            "fs/write_text_file" => self.write_file(&params).await,
            "terminal/create" => self.terminals.create(self.exec, &params, &self.run.env).await,
            "terminal/output" => self.terminals.output(self.exec, &params).await,
            "terminal/kill" => self.terminals.kill(self.exec, &params).await,
            "terminal/release" => self.terminals.release(self.exec, &params).await,
            "terminal/wait_for_exit" => match self.wait_for_exit(&params).await {
                Some(answer) => answer,
                None => return Ok(Dealt::Leave(RunOutcome::Paused)),
            },
            other => Err((-32601, format!("Halyard does not offer `{other}`"))),
        };
        let reply = match answer {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err((code, message)) => json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
        };
        self.conn.send(&reply).await?;
        Ok(Dealt::Next)
    }

    /// Waits for a terminal's command to end, seeing an interrupt (which stops it) and a
    /// stopped run (`None`: the request is left for the next run) while it runs.
    async fn wait_for_exit(&mut self, params: &Value) -> Option<Result<Value, (i64, String)>> {
        loop {
            if *self.run.cancel.borrow() {
                return None;
            }
            if *self.run.interrupt.borrow() && !self.interrupted {
                self.interrupt().await;
            }
            match self.terminals.wait_slice(self.exec, params).await {
                Ok(None) => {}
                done => return done.transpose(),
            }
        }
    }

    /// The answer to a permission request (`None`: it waits for the user). The conversation's
    /// confirmation policy decides as for Halyard's own actions; the user's Confirm allows the
    /// call once, their Reject refuses it.
    async fn permission(&mut self, params: &Value) -> Result<Option<Value>, String> {
        let call = params.get("toolCall").cloned().unwrap_or(Value::Null);
        let Some(call_id) = call.get("toolCallId").and_then(Value::as_str).map(str::to_owned) else {
            return Ok(Some(json!({"outcome": "cancelled"})));
        };
        let options = params.get("options").and_then(Value::as_array).cloned().unwrap_or_default();
        let option = |kinds: &[&str]| {
            kinds
                .iter()
                .find_map(|k| options.iter().find(|o| o.get("kind").and_then(Value::as_str) == Some(k)))
                .and_then(|o| o.get("optionId").cloned())
        };
        if self.interrupted {
            return Ok(Some(json!({"outcome": "cancelled"})));
        }
        let flushed = self.updates.flush();
        self.steps(flushed).await?;
        // An action recorded by an earlier run is the one the user's Confirm was about.
        let confirmed = self.run.confirmed && self.run.log.lock().await.history.pending.iter().any(|p| p.tool_call_id == call_id);
        let risk = {
            let log = self.run.log.lock().await;
            let pending = |id: &str| log.history.pending.iter().any(|p| p.tool_call_id == id);
            let action = self.updates.action(&call_id, Some(&call), &pending);
            drop(log);
            let risk = self.updates.risk(&call_id, &self.workspace);
            if let Some(EventBody::Action { tool_call_id, tool, arguments, thought, .. }) = action {
                let body = EventBody::Action { tool_call_id, tool, arguments, thought, security_risk: risk };
                if !self.run.append(EventSource::Agent, body).await {
                    return Err("the log could not be written".into());
                }
            }
            risk
        };
        let (policy, rejected) = {
            let log = self.run.log.lock().await;
            (log.history.policy, log.history.rejected.contains(&call_id))
        };
        let allow = || option(&["allow_once", "allow_always"]).map(|id| json!({"outcome": "selected", "optionId": id}));
        let reject = || option(&["reject_once", "reject_always"]).map(|id| json!({"outcome": "selected", "optionId": id}));
        if rejected {
            return Ok(Some(reject().unwrap_or(json!({"outcome": "cancelled"}))));
        }
        let tool = self.updates.tool(&call_id);
        if confirmed || !crate::tools::risk::needs_confirmation(policy, &tool, risk.or(Some(SecurityRisk::Medium))) {
            return Ok(Some(allow().unwrap_or(json!({"outcome": "cancelled"}))));
        }
        self.run.status(ExecutionStatus::WaitingForConfirmation, None).await;
        Ok(None)
    }

    async fn read_file(&self, params: &Value) -> Result<Value, (i64, String)> {
        let path = params.get("path").and_then(Value::as_str).ok_or((-32602, "`path` is required".to_owned()))?;
        let response = self.exec.download(path).await.map_err(|e| (-32002, e.to_string()))?;
        let text = response.text().await.map_err(|e| (-32603, e.to_string()))?;
        let line = params.get("line").and_then(Value::as_u64).unwrap_or(1).max(1) as usize;
        let limit = params.get("limit").and_then(Value::as_u64).map(|n| n as usize);
        let content = match (line, limit) {
            (1, None) => text,
            (line, limit) => {
                let lines = text.lines().skip(line - 1);
                let kept: Vec<&str> = match limit {
                    Some(n) => lines.take(n).collect(),
                    None => lines.collect(),
                };
                kept.join("\n")
            }
        };
        Ok(json!({"content": content}))
    }

    async fn write_file(&self, params: &Value) -> Result<Value, (i64, String)> {
        let path = params.get("path").and_then(Value::as_str).ok_or((-32602, "`path` is required".to_owned()))?;
        let content = params.get("content").and_then(Value::as_str).unwrap_or_default().to_owned();
        self.exec.upload(path, reqwest::Body::from(content)).await.map_err(|e| (-32603, e.to_string()))?;
        Ok(Value::Null)
    }

    /// Records the end of the turn (what the agent wrote last, its status) and how the run ends.
    async fn end(&mut self, response: &Value) -> RunOutcome {
        let flushed = self.updates.flush();
        if self.steps(flushed).await.is_err() {
            return RunOutcome::Failed;
        }
        let reason = response.pointer("/result/stopReason").and_then(Value::as_str).unwrap_or("end_turn");
        if reason == "cancelled" {
            // After a cancelled turn, claude-agent-acp (0.23) answers the next prompt at once
            // with `end_turn`, having done nothing (the cancelled query's leftover result), and
            // only then takes it up. The process is ended instead: the next turn starts it
            // again and loads the session, whose history the agent keeps on disk.
            let _ = self.conn.frame(&halyard_protocol::executor::AcpFrame::Stop).await;
        }
        self.outcome(response, reason).await
    }

    async fn outcome(&mut self, response: &Value, reason: &str) -> RunOutcome {
        // (The agent reports the refused call as its own failure: the budget is the reason.)
        if self.spent.load(Ordering::SeqCst) {
            return self
                .run
                .fail("budget_exceeded", "The conversation's budget is spent: the agent's next LLM call was refused".into())
                .await;
        }
        if let Some(e) = response.get("error") {
            let message = e.get("message").and_then(Value::as_str).unwrap_or("an error").to_owned();
            return self.run.fail("agent_error", format!("The agent failed: {message}")).await;
        }
        match reason {
            "end_turn" => {
                self.run.status(ExecutionStatus::Finished, None).await;
                RunOutcome::Finished
            }
            "cancelled" => self.run.interrupted().await,
            "max_tokens" | "max_turn_requests" => self.run.fail("iteration_limit", format!("The agent stopped: {reason}")).await,
            other => self.run.fail("agent_error", format!("The agent stopped: {other}")).await,
        }
    }
}

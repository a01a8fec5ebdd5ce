//! Answers git's credential questions from the sandbox while a run lasts: the executor's `GET
//! /git/credentials` WebSocket brings what git asks for (protocol and host); the answer is the
//! owner's token for that host's git provider, read and opened here for that one question. The
//! token is used by git once and kept nowhere in the sandbox, and the log masks it like a
//! secret (see [`crate::user::secrets`]).

use futures::{SinkExt, StreamExt};
use halyard_platform::executor_client::ExecutorClient;
use halyard_platform::vault;
use halyard_protocol::executor::{GitCredentialAnswer, GitCredentialAsk, SESSION_KEY_HEADER};
use halyard_protocol::user::UserGitProviders;
use halyard_protocol::{ConversationId, UserId, subjects};
use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest};

use crate::Ctx;

/// The answering task; it stops when this is dropped (the run ended).
#[derive(Debug)]
pub struct Answering(tokio::task::JoinHandle<()>);

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts answering for `owner`'s conversation in the sandbox `exec` reaches.
pub fn answer(ctx: std::sync::Arc<Ctx>, exec: &ExecutorClient, owner: UserId, conversation: ConversationId) -> Answering {
    let url = format!("{}/git/credentials", exec.base().replacen("http", "ws", 1));
    let key = exec.session_key().to_owned();
    Answering(tokio::spawn(async move {
        if let Err(e) = serve(&ctx, &url, &key, &owner, conversation).await {
            tracing::debug!(%conversation, error = %e, "git credential socket closed");
        }
    }))
}

async fn serve(ctx: &Ctx, url: &str, key: &str, owner: &UserId, conversation: ConversationId) -> Result<(), String> {
    let mut request = url.into_client_request().map_err(|e| e.to_string())?;
    request.headers_mut().insert(SESSION_KEY_HEADER, key.parse().map_err(|_| "the session key is no header value".to_owned())?);
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.map_err(|e| e.to_string())?;
    while let Some(frame) = socket.next().await {
        let text = match frame.map_err(|e| e.to_string())? {
            Message::Text(text) => text,
            Message::Close(_) => break,
            _ => continue,
        };
        let Ok(ask) = serde_json::from_str::<GitCredentialAsk>(&text) else { continue };
        let mut answer = match credential(ctx, owner, &ask).await {
            Ok((provider, username, password)) => {
                tracing::info!(%conversation, user = %owner, %provider, host = %ask.host, "git credential given to the sandbox's git");
                GitCredentialAnswer { username: Some(username), password: Some(password), ..Default::default() }
            }
            Err(why) => {
                tracing::info!(%conversation, user = %owner, host = %ask.host, %why, "git credential refused");
                GitCredentialAnswer { error: Some(why), ..Default::default() }
            }
        };
        answer.id = ask.id;
        let text = serde_json::to_string(&answer).map_err(|e| e.to_string())?;
        socket.send(Message::Text(text.into())).await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The provider's name, username and token for what git asks, or why not.
async fn credential(ctx: &Ctx, owner: &UserId, ask: &GitCredentialAsk) -> Result<(String, String, String), String> {
    if !matches!(ask.protocol.as_str(), "https" | "http") {
        return Err(format!("credentials are given for http(s) remotes only, not `{}`", ask.protocol));
    }
    let stored: UserGitProviders = match ctx.user_kv.get(subjects::user_git_key(owner)).await {
        Ok(Some(bytes)) => serde_json::from_slice(&bytes).map_err(|e| format!("your git providers cannot be read: {e}"))?,
        Ok(None) => UserGitProviders::default(),
        Err(e) => return Err(format!("your git providers cannot be read: {e}")),
    };
    let Some((name, provider)) = stored.providers.iter().find(|(_, p)| p.host.eq_ignore_ascii_case(&ask.host)) else {
        return Err(format!("the user has no git provider for {}; they can add one with PUT /api/v1/git-providers/<name>", ask.host));
    };
    let token = ctx
        .vault
        .open(&vault::git_token_slot(&owner.0, name), &provider.token_sealed)
        .map_err(|_| format!("the token of git provider `{name}` cannot be read; the user must store it again"))?;
    Ok((name.clone(), provider.username.clone(), token))
}

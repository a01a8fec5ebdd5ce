//! The `slack` kind: an `app_mention` from Slack's Events API starts a conversation on the
//! channel's repository (or one the message names as `owner/name`), answered in the message's
//! thread; a later mention in the thread is a message to the same conversation. Only Slack users
//! linked in the automation may ask, and a conversation runs as the Halyard user they are
//! linked to (the owner, or someone who linked themselves and let the automation run as them:
//! the owner holds the signing secret, so a mention "by" someone is only the owner's word).
//! Anyone else is sent a sign-in link privately (an ephemeral message) and nothing starts. Halyard answers with the app's bot token
//! through Slack's Web API.

use std::collections::BTreeMap;
use std::time::Duration;

use halyard_platform::{BusError, net, outbound};
use halyard_protocol::automation::{Automation, RunOutcome, SlackLink, Thread};
use halyard_protocol::system::Repository;
use halyard_protocol::user::UserGitProviders;
use halyard_protocol::{ConversationId, UserId, subjects};
use serde_json::{Value, json};

use crate::ctx::{Ctx, conversation_link};
use crate::decision::{Decision, clone_url, read};
use crate::prompt::{self, Fields};
use crate::threads;

/// How long a sign-in link sent to an unlinked Slack user works.
const LINK_LIFETIME_MS: i64 = 60 * 60 * 1000;

/// What a conversation started from Slack is first told when the automation says nothing.
const DEFAULT_TEMPLATE: &str = "{{body}}";

/// What an `app_mention` asks.
#[derive(Clone, Debug, PartialEq)]
pub struct Mention {
    pub channel: String,
    pub user: String,
    /// The message, its mentions of users (`<@U123>`) taken out.
    pub text: String,
    /// The message's own `ts` (what the 👀 goes on).
    pub ts: String,
    /// The thread's first message's `ts` (the message's own if it starts one).
    pub thread_ts: String,
    /// The Slack workspace (team) it came from, as the request names it.
    pub team: Option<String>,
}

/// The mention in an Events API `payload`, or why there is none to act on.
pub fn read_mention(payload: &Value) -> Result<Mention, String> {
    if payload["type"] != "event_callback" {
        return Err(format!("Slack's `{}` request is not acted on", payload["type"].as_str().unwrap_or_default()));
    }
    let event = &payload["event"];
    if event["type"] != "app_mention" {
        return Err(format!("Slack's `{}` event is not acted on", event["type"].as_str().unwrap_or_default()));
    }
    if event.get("bot_id").is_some_and(|b| !b.is_null()) {
        return Err("written by a bot".into());
    }
    let text = event["text"].as_str().unwrap_or_default();
    let mut clean = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("<@") {
        clean.push_str(&rest[..start]);
        match rest[start..].find('>') {
            Some(end) => rest = &rest[start + end + 1..],
            None => {
                rest = &rest[start..];
                break;
            }
        }
    }
    clean.push_str(rest);
    let ts = event["ts"].as_str().unwrap_or_default().to_owned();
    let mention = Mention {
        channel: event["channel"].as_str().unwrap_or_default().to_owned(),
        user: event["user"].as_str().unwrap_or_default().to_owned(),
        text: clean.trim().to_owned(),
        thread_ts: event["thread_ts"].as_str().map(str::to_owned).unwrap_or_else(|| ts.clone()),
        ts,
        team: payload["team_id"].as_str().or_else(|| event["team"].as_str()).filter(|t| !t.is_empty()).map(str::to_owned),
    };
    if mention.channel.is_empty() || mention.user.is_empty() || mention.ts.is_empty() {
        return Err("the event names no channel, user or message".into());
    }
    Ok(mention)
}

/// A repository the message names as `owner/name` (a word of its own), if any.
pub fn named_repository(text: &str) -> Option<String> {
    text.split_whitespace()
        .map(|w| w.trim_matches(|c: char| "`*_<>()[]{},.;:!?\"'".contains(c)))
        .find(|w| {
            let parts: Vec<&str> = w.split('/').collect();
            parts.len() == 2
                && parts.iter().all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)))
                && !w.contains("//")
        })
        .map(str::to_owned)
}

/// Slack's Web API, with the app's bot token.
pub struct Client {
    http: reqwest::Client,
    allow: Vec<String>,
    api: String,
    token: String,
}

impl Client {
    pub fn new(api_url: Option<&str>, token: String, allow: &[String]) -> Result<Self, String> {
        let api = api_url.unwrap_or("https://slack.com/api").trim_end_matches('/').to_owned();
        Ok(Self { http: crate::ctx::http(allow)?, allow: allow.to_vec(), api, token })
    }

    /// A write method: its arguments as JSON.
    async fn call(&self, method: &str, body: Value) -> Result<Value, String> {
        let url = format!("{}/{method}", self.api);
        net::check_destination(&url, &self.allow).await.map_err(|e| e.to_string())?;
        self.send(method, self.http.post(&url).json(&body)).await
    }

    /// `request` to Slack with the bot token: its answer, or why Slack said no.
    async fn send(&self, method: &str, request: reqwest::RequestBuilder) -> Result<Value, String> {
        let resp =
            request.timeout(Duration::from_secs(20)).bearer_auth(&self.token).send().await.map_err(|e| outbound::why(&e.without_url()))?;
        let status = resp.status();
        let v: Value = resp.json().await.unwrap_or_default();
        if !status.is_success() || v["ok"] != true {
            return Err(format!("Slack's {method} answered {status}: {}", v["error"].as_str().unwrap_or("no error given")));
        }
        Ok(v)
    }

    /// A message in a thread.
    pub async fn post(&self, channel: &str, thread_ts: &str, text: &str) -> Result<(), String> {
        self.call("chat.postMessage", json!({"channel": channel, "thread_ts": thread_ts, "text": text})).await.map(|_| ())
    }

    /// 👀 on a message.
    pub async fn react(&self, channel: &str, ts: &str) -> Result<(), String> {
        self.call("reactions.add", json!({"channel": channel, "timestamp": ts, "name": "eyes"})).await.map(|_| ())
    }

    /// A message only `user` sees.
    pub async fn tell(&self, channel: &str, user: &str, text: &str) -> Result<(), String> {
        self.call("chat.postEphemeral", json!({"channel": channel, "user": user, "text": text})).await.map(|_| ())
    }

    /// A read method (`users.info`, `team.info`): Slack takes their arguments as a query, not as
    /// JSON.
    async fn read(&self, method: &str, query: &[(&str, &str)]) -> Result<Value, String> {
        let url = net::with_query(&format!("{}/{method}", self.api), query).map_err(|e| format!("Slack's {method}: {e}"))?;
        net::check_destination(url.as_str(), &self.allow).await.map_err(|e| e.to_string())?;
        self.send(method, self.http.get(url)).await
    }

    /// Who Slack user `user` is, in words (`Ada Lovelace (@ada)`), and their workspace's name.
    pub async fn who(&self, user: &str) -> (Option<String>, Option<String>) {
        let person = self.read("users.info", &[("user", user)]).await.ok().and_then(|v| {
            let u = &v["user"];
            let handle = u["name"].as_str().filter(|s| !s.is_empty());
            let name = u["real_name"].as_str().or_else(|| u["profile"]["real_name"].as_str()).filter(|s| !s.is_empty());
            match (name, handle) {
                (Some(n), Some(h)) => Some(format!("{n} (@{h})")),
                (n, h) => n.or(h).map(str::to_owned),
            }
        });
        let team = self.read("team.info", &[]).await.ok().and_then(|v| {
            let t = &v["team"];
            let name = t["name"].as_str().filter(|s| !s.is_empty())?;
            Some(match t["domain"].as_str().filter(|s| !s.is_empty()) {
                Some(d) => format!("{name} ({d}.slack.com)"),
                None => name.to_owned(),
            })
        });
        (person, team)
    }
}

/// The automation's Slack client (its bot token opened).
pub fn client(ctx: &Ctx, a: &Automation, api_url: Option<&str>) -> Result<Client, String> {
    Client::new(api_url, crate::ctx::open_token(ctx, a, "Slack bot token")?, &ctx.config.gateway.git_api_allow)
}

/// Where a run answers in Slack.
pub struct SlackAnswer {
    client: Client,
    mention: Mention,
    thread_key: String,
    /// Who the conversation runs as, where not the automation's owner.
    runs_as: Option<UserId>,
}

impl SlackAnswer {
    /// 👀 and "on it" in the thread; the thread remembered.
    pub async fn on_start(self, ctx: &Ctx, a: &Automation, conversation_id: ConversationId) -> Result<(), BusError> {
        if threads::acknowledged(ctx, conversation_id).await? {
            return Ok(());
        }
        let m = &self.mention;
        if let Err(e) = self.client.react(&m.channel, &m.ts).await {
            tracing::warn!(automation_id = %a.id, error = %e, "no reaction in Slack");
        }
        let link = conversation_link(&ctx.config, conversation_id);
        if let Err(e) = self.client.post(&m.channel, &m.thread_ts, &format!("On it: <{link}|the conversation>.")).await {
            tracing::warn!(automation_id = %a.id, error = %e, "no answer in Slack");
        }
        let thread = Thread {
            channel: Some(m.channel.clone()),
            thread_ts: Some(m.thread_ts.clone()),
            runs_as: self.runs_as.clone(),
            ..Thread::new(&a.id, conversation_id)
        };
        threads::remember(ctx, &self.thread_key, &thread).await
    }

    /// 👀 on the later mention.
    pub async fn on_continue(self) {
        if let Err(e) = self.client.react(&self.mention.channel, &self.mention.ts).await {
            tracing::warn!(error = %e, "no reaction in Slack");
        }
    }
}

/// Who the automation's Slack users are: Slack id → Halyard user, and the Halyard users who let
/// it run as them.
pub struct Who<'a> {
    pub users: &'a BTreeMap<String, String>,
    pub consented: &'a std::collections::BTreeSet<String>,
}

/// What an Events API request starts, continues, or why nothing.
pub async fn decide(
    ctx: &Ctx,
    a: &Automation,
    channels: &BTreeMap<String, Option<String>>,
    who: Who<'_>,
    provider: Option<&str>,
    api_url: Option<&str>,
    body: &str,
) -> Result<Decision<SlackAnswer>, BusError> {
    let skip = |outcome, why: String| Ok(Decision::Skip(outcome, why));
    let payload: Value = match serde_json::from_str(body) {
        Ok(p) => p,
        Err(e) => return skip(RunOutcome::Ignored, format!("the request's body is not JSON ({e})")),
    };
    let m = match read_mention(&payload) {
        Ok(m) => m,
        Err(why) => return skip(RunOutcome::Ignored, why),
    };
    let Some(channel_repo) = channels.get(&m.channel) else {
        return skip(RunOutcome::Ignored, format!("channel {} is not one of the automation's", m.channel));
    };
    let client = match client(ctx, a, api_url) {
        Ok(c) => c,
        Err(e) => return skip(RunOutcome::Failed, e),
    };
    let Some(runs_as) = who.users.get(&m.user).map(|u| UserId(u.clone())) else {
        let link = offer_link(ctx, a, &client, &m.user, m.team.as_deref()).await?;
        let note = format!(
            "You are not linked to a Halyard user, so I started nothing. <{link}|Sign in to Halyard to link your Slack account> \
             (the link works once, for an hour), then mention me again."
        );
        if let Err(e) = client.tell(&m.channel, &m.user, &note).await {
            tracing::warn!(automation_id = %a.id, error = %e, "the unlinked user was not told");
        }
        return skip(RunOutcome::Ignored, format!("Slack user {} is not linked to a Halyard user; sent a sign-in link privately", m.user));
    };
    if runs_as != a.owner && !who.consented.contains(&runs_as.0) {
        // The automation's owner holds the signing secret, so "a mention by this Slack user" is
        // only the owner's word: nothing runs as someone else without their say.
        let link = offer_link(ctx, a, &client, &m.user, m.team.as_deref()).await?;
        let note = format!(
            "You are linked to Halyard user {runs_as}, who has not let this automation (of {}) run agents as them, so I started \
             nothing. <{link}|Allow it in Halyard> (the link works once, for an hour), then mention me again.",
            a.owner
        );
        if let Err(e) = client.tell(&m.channel, &m.user, &note).await {
            tracing::warn!(automation_id = %a.id, error = %e, "the Slack user was not told");
        }
        return skip(RunOutcome::Ignored, format!("Slack user {} is {runs_as}, who has not let this automation run as them", m.user));
    }
    let thread_key =
        subjects::automation_thread_key(&a.id, &halyard_platform::keys::to_hex(format!("{}-{}", m.channel, m.thread_ts).as_bytes()));
    if let Some(thread) = read::<Thread>(&ctx.bucket, &thread_key).await? {
        // A conversation is one person's: someone else in the thread starts their own.
        let owner = thread.runs_as.clone().unwrap_or_else(|| a.owner.clone());
        if owner != runs_as {
            let note = format!(
                "This thread's conversation is {owner}'s, so only they continue it; mention me in a new message to start your own."
            );
            if let Err(e) = client.tell(&m.channel, &m.user, &note).await {
                tracing::warn!(automation_id = %a.id, error = %e, "the Slack user was not told");
            }
            return skip(RunOutcome::Ignored, format!("Slack user {} is {runs_as}, and the thread's conversation is {owner}'s", m.user));
        }
        let message = format!("{} wrote in Slack:\n\n{}", m.user, m.text);
        let answer = SlackAnswer { client, mention: m, thread_key, runs_as: thread.runs_as };
        return Ok(Decision::Continue { conversation_id: thread.conversation_id, message, answer });
    }
    let repository = match named_repository(&m.text).or_else(|| channel_repo.clone()) {
        None => None,
        Some(full_name) => {
            let git: UserGitProviders = read(&ctx.user_kv, &subjects::user_git_key(&a.owner)).await?.unwrap_or_default();
            let Some(p) = provider.and_then(|p| git.providers.get(p)) else {
                return skip(RunOutcome::Failed, "the automation's git provider no longer exists; edit the automation".into());
            };
            if runs_as == a.owner {
                Some(Repository { url: clone_url(p, &full_name), branch: None })
            } else {
                // Someone else's conversation clones with their own provider for the same forge.
                let theirs: UserGitProviders = read(&ctx.user_kv, &subjects::user_git_key(&runs_as)).await?.unwrap_or_default();
                match theirs.providers.values().find(|q| q.kind == p.kind && q.host.eq_ignore_ascii_case(&p.host)) {
                    Some(q) => Some(Repository { url: clone_url(q, &full_name), branch: None }),
                    None => {
                        let note =
                            format!("You have no git provider for {} in Halyard; add one in Settings, then mention me again.", p.host);
                        if let Err(e) = client.tell(&m.channel, &m.user, &note).await {
                            tracing::warn!(automation_id = %a.id, error = %e, "the Slack user was not told");
                        }
                        return skip(RunOutcome::Failed, format!("{runs_as} has no git provider for {}", p.host));
                    }
                }
            }
        }
    };
    let fields = Fields {
        body: m.text.clone(),
        comment: m.text.clone(),
        payload: serde_json::to_string_pretty(&payload).unwrap_or_default(),
        ..Default::default()
    };
    let message = prompt::render(a.prompt.as_deref().unwrap_or(DEFAULT_TEMPLATE), &fields);
    let tags = BTreeMap::from([("channel".to_owned(), m.channel.clone()), ("thread".to_owned(), m.thread_ts.clone())]);
    let runs_as = (runs_as != a.owner).then_some(runs_as);
    let answer = Some(SlackAnswer { client, mention: m, thread_key, runs_as: runs_as.clone() });
    Ok(Decision::Start { message, repository, tags, runs_as, answer })
}

/// A sign-in link for `slack_user` (a code of its own, stored for an hour): the URL of the web
/// page that links whoever is signed in.
async fn offer_link(ctx: &Ctx, a: &Automation, client: &Client, slack_user: &str, team: Option<&str>) -> Result<String, BusError> {
    let code = halyard_platform::keys::random_secret();
    // Named for the page that asks whoever follows it, as the app's Slack says (unnamed if it
    // cannot say).
    let (slack_name, workspace) = client.who(slack_user).await;
    let link = SlackLink {
        automation_id: a.id.clone(),
        slack_user: slack_user.to_owned(),
        expires_ms: halyard_platform::now_ms() + LINK_LIFETIME_MS,
        slack_name,
        workspace,
        team_id: team.map(str::to_owned),
    };
    let bytes = serde_json::to_vec(&link).unwrap_or_default();
    // Removed by the server when the hour is up, used or not.
    let ttl = Duration::from_millis(u64::try_from(LINK_LIFETIME_MS).unwrap_or(3_600_000));
    ctx.bucket
        .create_with_ttl(subjects::automation_slack_link_key(&code), bytes.into(), ttl)
        .await
        .map_err(|e| BusError::new(halyard_platform::BusErrorKind::Publish, e))?;
    Ok(ctx.config.web_link(&format!("/link/slack/{code}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mention_is_read_without_its_user_tokens() {
        let p = json!({"type": "event_callback", "event_id": "Ev1", "event": {"type": "app_mention", "user": "U0456", "channel": "C0123",
            "text": "<@U0BOT> please fix acme/app's login", "ts": "1700000000.000100"}});
        let m = read_mention(&p).unwrap();
        assert_eq!((m.text.as_str(), m.thread_ts.as_str()), ("please fix acme/app's login", "1700000000.000100"));
        assert_eq!(named_repository("look at `acme/app` please"), Some("acme/app".into()));
        assert_eq!(named_repository("see https://example.com/x"), None);
        assert_eq!(named_repository("nothing here"), None);
        let mut bot = p.clone();
        bot["event"]["bot_id"] = "B1".into();
        assert_eq!(read_mention(&bot).unwrap_err(), "written by a bot");
        assert!(read_mention(&json!({"type": "event_callback", "event": {"type": "message"}})).unwrap_err().contains("not acted on"));
    }
}

//! The `jira` kind: a comment that mentions Halyard, or its label added to an issue, in one of
//! the automation's projects starts a conversation on the project's repository; Halyard comments
//! back on the issue (Jira's REST API, version 2, with basic auth: the account's e-mail and API
//! token) with the link, then each run's summary. A later mention on the same issue is a message
//! to the same conversation. Halyard's own comments carry [`MARKER`] and never trigger.

use std::collections::BTreeMap;
use std::time::Duration;

use halyard_platform::{BusError, BusErrorKind, net, outbound};
use halyard_protocol::automation::{Automation, RunOutcome, Thread};
use halyard_protocol::system::Repository;
use halyard_protocol::user::UserGitProviders;
use halyard_protocol::{ConversationId, subjects};
use serde_json::{Value, json};

use crate::forge::MARKER;
use crate::github::mentions;
use crate::prompt::{self, Fields};
use crate::runs::{Answer, Decision, clone_url, read};
use crate::{Ctx, conversation_link};

/// What a conversation started from Jira is first told when the automation says nothing.
const DEFAULT_TEMPLATE: &str = "{{title}}\n\n{{body}}\n\n{{comment}}\n\nThis is Jira issue {{url}}. Do what it asks; when the work is done, open a \
                                pull request and say what you did.";

/// What a Jira webhook asks.
#[derive(Clone, Debug, PartialEq)]
pub struct Ask {
    /// `PROJ-12`.
    pub key: String,
    pub project: String,
    pub title: String,
    pub body: String,
    pub comment: Option<String>,
    pub author: String,
}

/// The work a Jira webhook's `payload` asks for, or why none.
pub fn read_ask(payload: &Value, label: &str, mention: &str) -> Result<Ask, String> {
    let issue = &payload["issue"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let mut ask = Ask {
        key: text(&issue["key"]),
        project: text(&issue["fields"]["project"]["key"]),
        title: text(&issue["fields"]["summary"]),
        body: text(&issue["fields"]["description"]),
        comment: None,
        author: text(&payload["user"]["displayName"]),
    };
    match payload["webhookEvent"].as_str().unwrap_or_default() {
        "comment_created" => {
            let body = text(&payload["comment"]["body"]);
            if body.contains(MARKER) || body.contains("halyard-marker") {
                return Err("Halyard's own comment".into());
            }
            if !mentions(&body, mention) {
                return Err(format!("no mention of {mention}"));
            }
            ask.author = text(&payload["comment"]["author"]["displayName"]);
            ask.comment = Some(body);
        }
        "jira:issue_updated" => {
            let added = payload["changelog"]["items"].as_array().into_iter().flatten().any(|item| {
                let has = |v: &Value| v.as_str().unwrap_or_default().split_whitespace().any(|l| l.eq_ignore_ascii_case(label));
                item["field"] == "labels" && has(&item["toString"]) && !has(&item["fromString"])
            });
            if !added {
                return Err(format!("the `{label}` label was not added"));
            }
        }
        other => return Err(format!("Jira's `{other}` is not acted on")),
    }
    if ask.key.is_empty() || ask.project.is_empty() {
        return Err("the payload names no issue".into());
    }
    Ok(ask)
}

/// Jira's REST API (version 2), as the automation's account.
pub struct Client {
    http: reqwest::Client,
    allow: Vec<String>,
    site: String,
    email: String,
    token: String,
}

impl Client {
    pub fn new(site: &str, email: &str, token: String, allow: &[String]) -> Result<Self, String> {
        let http = outbound::builder(allow).connect_timeout(Duration::from_secs(5)).build().map_err(|e| e.to_string())?;
        Ok(Self { http, allow: allow.to_vec(), site: site.trim_end_matches('/').to_owned(), email: email.to_owned(), token })
    }

    /// A comment on issue `key` (Jira's wiki text; marked as Halyard's).
    pub async fn comment(&self, key: &str, text: &str) -> Result<(), String> {
        let url = format!("{}/rest/api/2/issue/{key}/comment", self.site);
        net::check_destination(&url, &self.allow).await.map_err(|e| e.to_string())?;
        // Jira's wiki text has no hidden comments: the marker is a zero-width anchor.
        let body = json!({"body": format!("{text}\n\n{{anchor:halyard-marker}}")});
        let resp = self
            .http
            .post(&url)
            .timeout(Duration::from_secs(20))
            .basic_auth(&self.email, Some(&self.token))
            .json(&body)
            .send()
            .await
            .map_err(|e| outbound::why(&e.without_url()))?;
        if !resp.status().is_success() {
            return Err(format!("Jira answered {} to the comment on {key}", resp.status()));
        }
        Ok(())
    }
}

/// The automation's Jira client (its API token opened).
pub fn client(ctx: &Ctx, a: &Automation, site: &str, email: &str) -> Result<Client, String> {
    let sealed = a.token_sealed.as_deref().ok_or("the automation has no Jira API token; set it again")?;
    let token = ctx
        .vault
        .open(&halyard_protocol::automation::token_slot(&a.id), sealed)
        .map_err(|e| format!("the Jira API token does not open ({e}); set it again"))?;
    Client::new(site, email, token, &ctx.config.gateway.git_api_allow)
}

/// Where a run answers in Jira.
pub struct JiraAnswer {
    client: Client,
    key: String,
    thread_key: String,
}

impl JiraAnswer {
    /// "On it" with the link; the issue remembered.
    pub async fn on_start(self, ctx: &Ctx, a: &Automation, conversation_id: ConversationId) -> Result<(), BusError> {
        let conv_key = subjects::automation_conversation_key(conversation_id);
        if read::<Thread>(&ctx.bucket, &conv_key).await?.is_some() {
            return Ok(());
        }
        let link = conversation_link(&ctx.config, conversation_id);
        if let Err(e) = self.client.comment(&self.key, &format!("On it: [the conversation|{link}].")).await {
            tracing::warn!(automation_id = %a.id, error = %e, "no comment in Jira");
        }
        let thread = Thread {
            automation_id: a.id.clone(),
            conversation_id,
            repository: String::new(),
            number: 0,
            is_pull: false,
            discussion: None,
            channel: None,
            thread_ts: None,
            issue_key: Some(self.key.clone()),
        };
        let bytes = serde_json::to_vec(&thread).unwrap_or_default();
        for key in [self.thread_key.clone(), conv_key] {
            ctx.bucket.put(key, bytes.clone().into()).await.map_err(|e| BusError::new(BusErrorKind::Publish, e))?;
        }
        Ok(())
    }
}

/// What a Jira webhook starts, continues, or why nothing.
#[allow(clippy::too_many_arguments)] // the trigger's settings and the request
pub async fn decide(
    ctx: &Ctx,
    a: &Automation,
    site: &str,
    email: &str,
    projects: &BTreeMap<String, Option<String>>,
    provider: Option<&str>,
    label: &str,
    mention: &str,
    body: &str,
) -> Result<Decision, BusError> {
    let skip = |outcome, why: String| Ok(Decision::Skip(outcome, why));
    let payload: Value = match serde_json::from_str(body) {
        Ok(p) => p,
        Err(e) => return skip(RunOutcome::Ignored, format!("the request's body is not JSON ({e})")),
    };
    let ask = match read_ask(&payload, label, mention) {
        Ok(ask) => ask,
        Err(why) => return skip(RunOutcome::Ignored, why),
    };
    let Some(project_repo) = projects.get(&ask.project) else {
        return skip(RunOutcome::Ignored, format!("project {} is not one of the automation's", ask.project));
    };
    let client = match client(ctx, a, site, email) {
        Ok(c) => c,
        Err(e) => return skip(RunOutcome::Failed, e),
    };
    let url = format!("{site}/browse/{}", ask.key);
    let thread_key = subjects::automation_thread_key(&a.id, &halyard_platform::keys::to_hex(ask.key.as_bytes()));
    if let Some(thread) = read::<Thread>(&ctx.bucket, &thread_key).await? {
        let said = ask.comment.clone().unwrap_or_else(|| format!("added the `{label}` label"));
        let message = format!("{} wrote on {url}:\n\n{said}", ask.author);
        let answer = Answer::Jira(JiraAnswer { client, key: ask.key, thread_key });
        return Ok(Decision::Continue { conversation_id: thread.conversation_id, message, answer });
    }
    let repository = match project_repo {
        None => None,
        Some(full_name) => {
            let git: UserGitProviders = read(&ctx.user_kv, &subjects::user_git_key(&a.owner)).await?.unwrap_or_default();
            match provider.and_then(|p| git.providers.get(p)) {
                Some(p) => Some(Repository { url: clone_url(p, full_name), branch: None }),
                None => return skip(RunOutcome::Failed, "the automation's git provider no longer exists; edit the automation".into()),
            }
        }
    };
    let fields = Fields {
        title: ask.title.clone(),
        body: ask.body.clone(),
        comment: ask.comment.clone().unwrap_or_default(),
        url,
        payload: serde_json::to_string_pretty(&payload).unwrap_or_default(),
    };
    let message = prompt::render(a.prompt.as_deref().unwrap_or(DEFAULT_TEMPLATE), &fields);
    let tags = BTreeMap::from([("issue".to_owned(), ask.key.clone())]);
    Ok(Decision::Start { message, repository, tags, answer: Some(Answer::Jira(JiraAnswer { client, key: ask.key, thread_key })) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_label_changes_are_read() {
        let issue = json!({"key": "PROJ-12", "fields": {"summary": "Slow", "description": "d", "project": {"key": "PROJ"}}});
        let comment = json!({"webhookEvent": "comment_created", "issue": issue,
            "comment": {"body": "@halyard please look", "author": {"displayName": "Ann"}}});
        let ask = read_ask(&comment, "halyard", "@halyard").unwrap();
        assert_eq!((ask.key.as_str(), ask.project.as_str(), ask.author.as_str()), ("PROJ-12", "PROJ", "Ann"));
        let labelled = json!({"webhookEvent": "jira:issue_updated", "issue": issue, "user": {"displayName": "Ann"},
            "changelog": {"items": [{"field": "labels", "fromString": "bug", "toString": "bug halyard"}]}});
        assert!(read_ask(&labelled, "halyard", "@halyard").is_ok());
        let mut again = labelled.clone();
        again["changelog"]["items"][0]["fromString"] = "halyard".into();
        assert!(read_ask(&again, "halyard", "@halyard").unwrap_err().contains("not added"));
        let mut own = comment.clone();
        own["comment"]["body"] = "@halyard Done. {anchor:halyard-marker}".into();
        assert_eq!(read_ask(&own, "halyard", "@halyard").unwrap_err(), "Halyard's own comment");
    }
}

//! The `jira` kind: what in a Jira webhook asks for work ([`read_ask`]: a comment that mentions
//! Halyard, or its label added to an issue) and Jira's REST API (version 2, basic auth with the
//! account's e-mail and API token) that Halyard comments back with. The run itself is an issue
//! tracker's ([`crate::tracker`]). Halyard's own comments carry an anchor and never trigger.

use std::time::Duration;

use halyard_platform::{net, outbound};
use halyard_protocol::automation::Automation;
use serde_json::{Value, json};

use crate::ctx::Ctx;
use crate::tracker::Ask;
use halyard_platform::forge::{MARKER, mentions};

/// The work a Jira webhook's `payload` asks for, or why none.
pub fn read_ask(payload: &Value, site: &str, label: &str, mention: &str) -> Result<Ask, String> {
    let issue = &payload["issue"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let key = text(&issue["key"]);
    let mut ask = Ask {
        url: format!("{site}/browse/{key}"),
        key,
        team: text(&issue["fields"]["project"]["key"]),
        title: text(&issue["fields"]["summary"]),
        body: text(&issue["fields"]["description"]),
        comment: None,
        author: text(&payload["user"]["displayName"]),
        author_id: person(&payload["user"]),
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
            ask.author_id = person(&payload["comment"]["author"]);
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
    if ask.key.is_empty() || ask.team.is_empty() {
        return Err("the payload names no issue".into());
    }
    Ok(ask)
}

/// How Jira's API asks about `user`: by `accountId` (Cloud) or by `username` (Data Center,
/// whose users have no account id).
fn person(user: &Value) -> Option<(&'static str, String)> {
    let some = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_owned);
    some(&user["accountId"]).map(|id| ("accountId", id)).or_else(|| some(&user["name"]).map(|name| ("username", name)))
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
        let http = crate::ctx::http(allow)?;
        Ok(Self { http, allow: allow.to_vec(), site: site.trim_end_matches('/').to_owned(), email: email.to_owned(), token })
    }

    /// Whether the person Jira knows by `param` = `id` may edit issues in project `project`
    /// (Jira's permission search answers the people who have the permission, of those named).
    pub async fn may_edit(&self, param: &str, id: &str, project: &str) -> Result<bool, String> {
        let escape = |v: &str| percent_encoding::utf8_percent_encode(v, percent_encoding::NON_ALPHANUMERIC).to_string();
        let url = format!(
            "{}/rest/api/2/user/permission/search?{param}={}&permissions=EDIT_ISSUES&projectKey={}",
            self.site,
            escape(id),
            escape(project)
        );
        net::check_destination(&url, &self.allow).await.map_err(|e| e.to_string())?;
        let resp = self
            .http
            .get(&url)
            .timeout(Duration::from_secs(20))
            .basic_auth(&self.email, Some(&self.token))
            .send()
            .await
            .map_err(|e| outbound::why(&e.without_url()))?;
        if !resp.status().is_success() {
            return Err(format!("Jira answered {} to the permission search", resp.status()));
        }
        let users: Vec<Value> = resp.json().await.map_err(|e| format!("Jira's permission search is not a list of users ({e})"))?;
        let key = if param == "accountId" { "accountId" } else { "name" };
        Ok(users.iter().any(|u| u[key] == id))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_label_changes_are_read() {
        let issue = json!({"key": "PROJ-12", "fields": {"summary": "Slow", "description": "d", "project": {"key": "PROJ"}}});
        let comment = json!({"webhookEvent": "comment_created", "issue": issue,
            "comment": {"body": "@halyard please look", "author": {"displayName": "Ann", "accountId": "5b10"}}});
        let ask = read_ask(&comment, "https://acme.atlassian.net", "halyard", "@halyard").unwrap();
        assert_eq!((ask.key.as_str(), ask.team.as_str(), ask.author.as_str()), ("PROJ-12", "PROJ", "Ann"));
        assert_eq!(ask.url, "https://acme.atlassian.net/browse/PROJ-12");
        assert_eq!(ask.author_id, Some(("accountId", "5b10".to_owned())));
        let labelled = json!({"webhookEvent": "jira:issue_updated", "issue": issue, "user": {"displayName": "Ann"},
            "changelog": {"items": [{"field": "labels", "fromString": "bug", "toString": "bug halyard"}]}});
        // Data Center names its users, with no account id.
        let ask = read_ask(&labelled, "", "halyard", "@halyard").unwrap();
        assert_eq!(ask.author_id, None, "the labelling user has no id in this payload");
        let mut dc = labelled.clone();
        dc["user"]["name"] = "ann".into();
        assert_eq!(read_ask(&dc, "", "halyard", "@halyard").unwrap().author_id, Some(("username", "ann".to_owned())));
        let mut again = labelled.clone();
        again["changelog"]["items"][0]["fromString"] = "halyard".into();
        assert!(read_ask(&again, "", "halyard", "@halyard").unwrap_err().contains("not added"));
        let mut own = comment.clone();
        own["comment"]["body"] = "@halyard Done. {anchor:halyard-marker}".into();
        assert_eq!(read_ask(&own, "", "halyard", "@halyard").unwrap_err(), "Halyard's own comment");
    }
}

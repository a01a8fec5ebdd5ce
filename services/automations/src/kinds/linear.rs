//! The `linear` kind: what in a Linear webhook asks for work ([`read_ask`]: a comment that
//! mentions Halyard, or its label added to an issue) and Linear's GraphQL API that Halyard
//! comments back with (`commentCreate`, with an API key). The run itself is an issue tracker's
//! ([`crate::tracker`]).

use std::time::Duration;

use halyard_platform::{net, outbound};
use halyard_protocol::automation::Automation;
use serde_json::{Value, json};

use crate::ctx::Ctx;
use crate::tracker::Ask;
use halyard_platform::forge::{MARKER, mentions};

/// The work a Linear webhook's `payload` asks for, or why none.
pub fn read_ask(payload: &Value, label: &str, mention: &str) -> Result<Ask, String> {
    let data = &payload["data"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let team_of = |identifier: &str| identifier.split('-').next().unwrap_or_default().to_owned();
    let ask = match (payload["type"].as_str().unwrap_or_default(), payload["action"].as_str().unwrap_or_default()) {
        ("Comment", "create") => {
            let body = text(&data["body"]);
            if body.contains(MARKER) {
                return Err("Halyard's own comment".into());
            }
            if !mentions(&body, mention) {
                return Err(format!("no mention of {mention}"));
            }
            let issue = &data["issue"];
            Ask {
                key: data["issueId"].as_str().or(issue["id"].as_str()).unwrap_or_default().to_owned(),
                team: team_of(issue["identifier"].as_str().unwrap_or_default()),
                title: text(&issue["title"]),
                body: String::new(),
                comment: Some(body),
                author: text(&data["user"]["name"]),
                author_id: data["userId"].as_str().or(data["user"]["id"].as_str()).map(|id| ("id", id.to_owned())),
                url: text(&payload["url"]),
            }
        }
        ("Issue", "update") => {
            let now: Vec<(&str, &str)> =
                data["labels"].as_array().into_iter().flatten().filter_map(|l| Some((l["id"].as_str()?, l["name"].as_str()?))).collect();
            let before: Vec<&str> = payload["updatedFrom"]["labelIds"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            let added = now.iter().any(|(id, name)| name.eq_ignore_ascii_case(label) && !before.contains(id));
            if !added || payload["updatedFrom"]["labelIds"].is_null() {
                return Err(format!("the `{label}` label was not added"));
            }
            Ask {
                key: text(&data["id"]),
                team: team_of(data["identifier"].as_str().unwrap_or_default()),
                title: text(&data["title"]),
                body: text(&data["description"]),
                comment: None,
                author: text(&payload["actor"]["name"]),
                // An integration's change names an actor that is not a user: nobody to ask.
                author_id: payload["actor"]["id"]
                    .as_str()
                    .filter(|_| payload["actor"]["type"].as_str().is_none_or(|t| t == "user"))
                    .map(|id| ("id", id.to_owned())),
                url: text(&payload["url"]),
            }
        }
        (kind, action) => return Err(format!("Linear's `{kind}` `{action}` is not acted on")),
    };
    if ask.key.is_empty() || ask.team.is_empty() {
        return Err("the payload names no issue".into());
    }
    Ok(ask)
}

/// Linear's GraphQL API, with an API key.
pub struct Client {
    http: reqwest::Client,
    allow: Vec<String>,
    api: String,
    key: String,
}

impl Client {
    pub fn new(api_url: Option<&str>, key: String, allow: &[String]) -> Result<Self, String> {
        let http = crate::ctx::http(allow)?;
        Ok(Self { http, allow: allow.to_vec(), api: api_url.unwrap_or("https://api.linear.app/graphql").to_owned(), key })
    }

    /// Whether user `id` is an active member of the team whose key is `team`.
    pub async fn is_member(&self, id: &str, team: &str) -> Result<bool, String> {
        let query = "query Member($id: String!) { user(id: $id) { active teams { nodes { key } } } }";
        let v = self.call(json!({"query": query, "variables": {"id": id}})).await?;
        let user = &v["data"]["user"];
        let teams = user["teams"]["nodes"].as_array().into_iter().flatten();
        Ok(user["active"] == true && teams.filter_map(|t| t["key"].as_str()).any(|k| k == team))
    }

    /// One GraphQL request; Linear's first error is the failure.
    async fn call(&self, body: Value) -> Result<Value, String> {
        net::check_destination(&self.api, &self.allow).await.map_err(|e| e.to_string())?;
        let resp = self
            .http
            .post(&self.api)
            .timeout(Duration::from_secs(20))
            .header("Authorization", &self.key)
            .json(&body)
            .send()
            .await
            .map_err(|e| outbound::why(&e.without_url()))?;
        let status = resp.status();
        let v: Value = resp.json().await.unwrap_or_default();
        if !status.is_success() || v["errors"].is_array() {
            return Err(format!("Linear answered {status}: {}", v["errors"][0]["message"].as_str().unwrap_or("no data")));
        }
        Ok(v)
    }

    /// A comment on issue `id` (Markdown; marked as Halyard's).
    pub async fn comment(&self, id: &str, text: &str) -> Result<(), String> {
        let query = "mutation Comment($input: CommentCreateInput!) { commentCreate(input: $input) { success } }";
        let v = self.call(json!({"query": query, "variables": {"input": {"issueId": id, "body": format!("{text}\n\n{MARKER}")}}})).await?;
        if v["data"]["commentCreate"]["success"] != true {
            return Err("Linear did not create the comment".into());
        }
        Ok(())
    }
}

/// The automation's Linear client (its API key opened).
pub fn client(ctx: &Ctx, a: &Automation, api_url: Option<&str>) -> Result<Client, String> {
    let sealed = a.token_sealed.as_deref().ok_or("the automation has no Linear API key; set it again")?;
    let key = ctx
        .vault
        .open(&halyard_protocol::automation::token_slot(&a.id), sealed)
        .map_err(|e| format!("the Linear API key does not open ({e}); set it again"))?;
    Client::new(api_url, key, &ctx.config.gateway.git_api_allow)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_label_additions_are_read() {
        let comment = json!({"type": "Comment", "action": "create", "url": "https://linear.app/acme/issue/ENG-7#comment-1",
            "data": {"body": "@halyard take it", "issueId": "iss-1", "user": {"name": "Kim"}, "issue": {"id": "iss-1", "identifier": "ENG-7", "title": "Crash"}}});
        let ask = read_ask(&comment, "halyard", "@halyard").unwrap();
        assert_eq!((ask.key.as_str(), ask.team.as_str(), ask.author.as_str()), ("iss-1", "ENG", "Kim"));
        assert_eq!(ask.author_id, None, "the comment names no user id");
        let labelled = json!({"type": "Issue", "action": "update", "url": "https://linear.app/acme/issue/ENG-7",
            "data": {"id": "iss-1", "identifier": "ENG-7", "title": "Crash", "labels": [{"id": "l1", "name": "Halyard"}]},
            "updatedFrom": {"labelIds": []}});
        assert!(read_ask(&labelled, "halyard", "@halyard").is_ok());
        let mut other = labelled.clone();
        other["updatedFrom"] = json!({"title": "old"});
        assert!(read_ask(&other, "halyard", "@halyard").unwrap_err().contains("not added"));
    }
}

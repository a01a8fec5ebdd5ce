//! The `bitbucket` kind (Bitbucket Cloud): a pull request comment that mentions Halyard
//! ([`read`]) by someone with write access starts work on the pull request's branch, and Halyard
//! answers under that comment through Bitbucket's API (version 2.0). Bitbucket has no reactions:
//! the reply is the acknowledgement. Mentions follow the GitHub kind's rules.

use halyard_protocol::automation::Thread;
use halyard_protocol::user::GitProvider;
use serde_json::{Value, json};

use crate::api::Api;
use crate::forge::{Ask, MARKER, ReactTo};
use crate::kinds::github::mentions;

/// The name git and the API take with an access token (a workspace's or a repository's).
const TOKEN_USER: &str = "x-token-auth";

/// The work a Bitbucket webhook (`X-Event-Key` `event`) asks for, or why it asks for none.
pub fn read(event: &str, payload: &Value, mention: &str) -> Result<Ask, String> {
    if event != "pullrequest:comment_created" {
        return Err(format!("Bitbucket's `{event}` is not acted on"));
    }
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let comment = text(&payload["comment"]["content"]["raw"]);
    if comment.contains(MARKER) {
        return Err("Halyard's own comment".into());
    }
    if !mentions(&comment, mention) {
        return Err(format!("no mention of {mention}"));
    }
    let pr = &payload["pullrequest"];
    let ask = Ask {
        repository: text(&payload["repository"]["full_name"]),
        number: pr["id"].as_u64().unwrap_or_default(),
        is_pull: true,
        head: pr["source"]["branch"]["name"].as_str().map(str::to_owned),
        title: text(&pr["title"]),
        body: text(&pr["description"]),
        comment: Some(comment),
        url: text(&pr["links"]["html"]["href"]),
        sender: payload["actor"]["nickname"].as_str().or(payload["actor"]["display_name"].as_str()).unwrap_or_default().to_owned(),
        sender_id: None,
        sender_account: payload["actor"]["account_id"].as_str().map(str::to_owned),
        react_to: ReactTo::Nothing,
        // Replies go under the comment that asked.
        discussion: payload["comment"]["id"].as_u64().map(|id| id.to_string()),
        project: None,
    };
    if ask.repository.is_empty() || ask.number == 0 {
        return Err("the payload names no repository or pull request".into());
    }
    Ok(ask)
}

/// Bitbucket Cloud's API (2.0), with the owner's credentials.
pub struct Client {
    api: Api,
}

impl Client {
    /// The API of `provider` (its `api_url`, else Bitbucket Cloud's).
    pub fn new(provider: &GitProvider, token: String, allow: &[String]) -> Result<Self, String> {
        let api = provider.api_url.clone().unwrap_or_else(|| "https://api.bitbucket.org/2.0".into()).trim_end_matches('/').to_owned();
        // An app password or API token goes with the account's name; an access token as bearer.
        let authorization = if provider.username.is_empty() || provider.username == TOKEN_USER {
            format!("Bearer {token}")
        } else {
            use base64::Engine;
            format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{}:{token}", provider.username)))
        };
        Ok(Self { api: Api::new("Bitbucket", api, vec![("Authorization", authorization)], allow)? })
    }

    /// Whether account `account` may write to `repository`.
    pub async fn can_write(&self, repository: &str, account: &str) -> Result<bool, String> {
        match self.api.send(reqwest::Method::GET, &format!("/repositories/{repository}/permissions-config/users/{account}"), None).await {
            Ok(v) => Ok(["write", "admin"].contains(&v["permission"].as_str().unwrap_or_default())),
            Err(e) if e.contains("404") => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// A pull request's source branch.
    pub async fn head(&self, repository: &str, id: u64) -> Result<String, String> {
        let v = self.api.send(reqwest::Method::GET, &format!("/repositories/{repository}/pullrequests/{id}"), None).await?;
        v["source"]["branch"]["name"].as_str().map(str::to_owned).ok_or_else(|| "the pull request has no source branch".into())
    }

    /// A comment on the pull request, under the comment that asked if there is one.
    pub async fn comment(&self, thread: &Thread, text: &str) -> Result<(), String> {
        let mut body = json!({"content": {"raw": format!("{text}\n\n{MARKER}")}});
        if let Some(parent) = thread.discussion.as_deref().and_then(|d| d.parse::<u64>().ok()) {
            body["parent"] = json!({"id": parent});
        }
        let path = format!("/repositories/{}/pullrequests/{}/comments", thread.repository, thread.number);
        self.api.send(reqwest::Method::POST, &path, Some(body)).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_request_comments_that_mention_are_read() {
        let p = json!({"actor": {"nickname": "sam", "account_id": "557058:abc"}, "repository": {"full_name": "ws/app"},
            "pullrequest": {"id": 3, "title": "Faster", "description": "d", "source": {"branch": {"name": "faster"}},
                            "links": {"html": {"href": "https://bitbucket.org/ws/app/pull-requests/3"}}},
            "comment": {"id": 91, "content": {"raw": "@halyard please review"}}});
        let ask = read("pullrequest:comment_created", &p, "@halyard").unwrap();
        assert_eq!((ask.number, ask.head.as_deref(), ask.discussion.as_deref()), (3, Some("faster"), Some("91")));
        assert_eq!(ask.sender_account.as_deref(), Some("557058:abc"));
        assert!(read("repo:push", &p, "@halyard").unwrap_err().contains("not acted on"));
    }
}

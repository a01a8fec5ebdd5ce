//! The `bitbucket` kind (Bitbucket Cloud, and Data Center on a host of its own): a pull request
//! comment that mentions Halyard ([`read`]) by someone with write access starts work on the pull
//! request's branch, and Halyard answers under that comment through Bitbucket's API (Cloud's 2.0,
//! Data Center's REST 1.0). Bitbucket has no reactions: the reply is the acknowledgement.
//! Mentions follow the GitHub kind's rules.

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
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let (comment, ask) = match event {
        "pullrequest:comment_created" => {
            let comment = text(&payload["comment"]["content"]["raw"]);
            let pr = &payload["pullrequest"];
            let ask = Ask {
                repository: text(&payload["repository"]["full_name"]),
                number: pr["id"].as_u64().unwrap_or_default(),
                is_pull: true,
                head: pr["source"]["branch"]["name"].as_str().map(str::to_owned),
                title: text(&pr["title"]),
                body: text(&pr["description"]),
                comment: Some(comment.clone()),
                url: text(&pr["links"]["html"]["href"]),
                sender: payload["actor"]["nickname"].as_str().or(payload["actor"]["display_name"].as_str()).unwrap_or_default().to_owned(),
                sender_id: None,
                sender_account: payload["actor"]["account_id"].as_str().map(str::to_owned),
                react_to: ReactTo::Nothing,
                // Replies go under the comment that asked.
                discussion: payload["comment"]["id"].as_u64().map(|id| id.to_string()),
                project: None,
            };
            (comment, ask)
        }
        // Data Center's event: the repository is the pull request's target's, `PROJECT/slug`.
        "pr:comment:added" => {
            let comment = text(&payload["comment"]["text"]);
            let pr = &payload["pullRequest"];
            let repo = &pr["toRef"]["repository"];
            let ask = Ask {
                repository: format!("{}/{}", text(&repo["project"]["key"]), text(&repo["slug"])),
                number: pr["id"].as_u64().unwrap_or_default(),
                is_pull: true,
                head: pr["fromRef"]["displayId"].as_str().map(str::to_owned),
                title: text(&pr["title"]),
                body: text(&pr["description"]),
                comment: Some(comment.clone()),
                url: pr["links"]["self"][0]["href"].as_str().unwrap_or_default().to_owned(),
                sender: text(&payload["actor"]["name"]),
                sender_id: None,
                // Data Center asks about people by their user name.
                sender_account: payload["actor"]["name"].as_str().map(str::to_owned),
                react_to: ReactTo::Nothing,
                discussion: payload["comment"]["id"].as_u64().map(|id| id.to_string()),
                project: None,
            };
            (comment, ask)
        }
        _ => return Err(format!("Bitbucket's `{event}` is not acted on")),
    };
    if comment.contains(MARKER) {
        return Err("Halyard's own comment".into());
    }
    if !mentions(&comment, mention) {
        return Err(format!("no mention of {mention}"));
    }
    if ask.repository.trim_matches('/').is_empty() || !ask.repository.contains('/') || ask.number == 0 {
        return Err("the payload names no repository or pull request".into());
    }
    Ok(ask)
}

/// Bitbucket's API with the owner's credentials: Cloud's (2.0), or a Data Center's (REST 1.0).
pub struct Client {
    api: Api,
    data_center: bool,
}

impl Client {
    /// The API of `provider`: its `api_url`, else Bitbucket Cloud's for `bitbucket.org` and the
    /// host's own REST API for a Data Center.
    pub fn new(provider: &GitProvider, token: String, allow: &[String]) -> Result<Self, String> {
        let api = match &provider.api_url {
            Some(url) => url.clone(),
            None if provider.host == "bitbucket.org" => "https://api.bitbucket.org/2.0".into(),
            None => format!("https://{}/rest/api/1.0", provider.host),
        };
        let api = api.trim_end_matches('/').to_owned();
        let data_center = provider.is_bitbucket_data_center();
        // An app password or API token goes with the account's name; an access token as bearer.
        let authorization = if provider.username.is_empty() || provider.username == TOKEN_USER {
            format!("Bearer {token}")
        } else {
            use base64::Engine;
            format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{}:{token}", provider.username)))
        };
        Ok(Self { api: Api::new("Bitbucket", api, vec![("Authorization", authorization)], allow)?, data_center })
    }

    /// A Data Center repository's path (`/projects/KEY/repos/slug`), or Cloud's.
    fn repo(&self, repository: &str) -> String {
        match repository.split_once('/') {
            Some((project, slug)) if self.data_center => format!("/projects/{project}/repos/{slug}"),
            _ => format!("/repositories/{repository}"),
        }
    }

    /// Whether account `account` (Cloud: its account id; Data Center: its user name) may write to
    /// `repository`.
    pub async fn can_write(&self, repository: &str, account: &str) -> Result<bool, String> {
        if self.data_center {
            // The users with REPO_WRITE on the repository (through groups and the project too),
            // of those whose name starts so.
            let Some((project, slug)) = repository.split_once('/') else { return Ok(false) };
            let escape = |v: &str| percent_encoding::utf8_percent_encode(v, percent_encoding::NON_ALPHANUMERIC).to_string();
            let path = format!(
                "/users?filter={}&permission.1=REPO_WRITE&permission.1.projectKey={}&permission.1.repositorySlug={}&limit=100",
                escape(account),
                escape(project),
                escape(slug)
            );
            let v = self.api.send(reqwest::Method::GET, &path, None).await?;
            return Ok(v["values"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|u| u["name"].as_str().is_some_and(|n| n.eq_ignore_ascii_case(account))));
        }
        match self.api.send(reqwest::Method::GET, &format!("/repositories/{repository}/permissions-config/users/{account}"), None).await {
            Ok(v) => Ok(["write", "admin"].contains(&v["permission"].as_str().unwrap_or_default())),
            Err(e) if e.contains("404") => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// A pull request's source branch.
    pub async fn head(&self, repository: &str, id: u64) -> Result<String, String> {
        let noun = if self.data_center { "pull-requests" } else { "pullrequests" };
        let v = self.api.send(reqwest::Method::GET, &format!("{}/{noun}/{id}", self.repo(repository)), None).await?;
        let name = if self.data_center { &v["fromRef"]["displayId"] } else { &v["source"]["branch"]["name"] };
        name.as_str().map(str::to_owned).ok_or_else(|| "the pull request has no source branch".into())
    }

    /// A comment on the pull request, under the comment that asked if there is one.
    pub async fn comment(&self, thread: &Thread, text: &str) -> Result<(), String> {
        let marked = format!("{text}\n\n{MARKER}");
        let parent = thread.discussion.as_deref().and_then(|d| d.parse::<u64>().ok());
        let (noun, mut body) = if self.data_center {
            ("pull-requests", json!({"text": marked}))
        } else {
            ("pullrequests", json!({"content": {"raw": marked}}))
        };
        if let Some(parent) = parent {
            body["parent"] = json!({"id": parent});
        }
        let path = format!("{}/{noun}/{}/comments", self.repo(&thread.repository), thread.number);
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
        // Data Center's shape of the same.
        let dc = json!({"eventKey": "pr:comment:added", "actor": {"name": "sam", "displayName": "Sam"},
            "pullRequest": {"id": 9, "title": "Faster", "fromRef": {"displayId": "faster", "repository": {"slug": "app", "project": {"key": "WS"}}},
                            "toRef": {"displayId": "main", "repository": {"slug": "app", "project": {"key": "WS"}}},
                            "links": {"self": [{"href": "https://git.acme.com/projects/WS/repos/app/pull-requests/9"}]}},
            "comment": {"id": 62, "text": "@halyard please review"}});
        let ask = read("pr:comment:added", &dc, "@halyard").unwrap();
        assert_eq!((ask.repository.as_str(), ask.number, ask.head.as_deref()), ("WS/app", 9, Some("faster")));
        assert_eq!((ask.sender_account.as_deref(), ask.discussion.as_deref()), (Some("sam"), Some("62")));
    }
}

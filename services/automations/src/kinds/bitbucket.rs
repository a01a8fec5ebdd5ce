//! The `bitbucket` kind (Bitbucket Cloud, and Data Center on a host of its own): a pull request
//! comment that mentions Halyard ([`read`]) by someone with write access starts work on the pull
//! request's branch, and Halyard answers under that comment (through the platform's forge client,
//! Cloud's API 2.0 or Data Center's REST 1.0). Bitbucket has no reactions: the reply is the
//! acknowledgement.

use serde_json::Value;

use halyard_platform::forge::{MARKER, ReactTo, mentions};

use crate::forge::Ask;

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

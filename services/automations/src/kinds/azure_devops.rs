//! The `azure_devops` kind: a pull request comment or a work item comment (Azure DevOps service
//! hooks) that mentions Halyard starts work ([`read`]); Halyard answers through the platform's
//! forge client (Azure DevOps' REST API 7.1, a personal access token as basic auth): in the pull
//! request's thread, or as a comment on the work item. Azure DevOps has no reactions.

use serde_json::Value;

use halyard_platform::forge::{MARKER, ReactTo, mentions};

use crate::forge::Ask;

/// The organization in an Azure DevOps URL (`https://dev.azure.com/<org>/...`).
fn organization(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    rest.split('/').nth(1).filter(|o| !o.is_empty() && !o.starts_with('_')).map(str::to_owned)
}

/// Text from Azure DevOps' HTML (work item comments come as HTML): tags dropped, entities of
/// the common kinds put back.
fn text_of(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            _ if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&nbsp;", " ").replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&amp;", "&")
}

/// The work a service hook's payload asks for, or why it asks for none. `repository` is the
/// automation's (`organization/project/repository`), where work item comments go.
pub fn read(payload: &Value, mention: &str, repository: Option<&str>) -> Result<Ask, String> {
    let r = &payload["resource"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    match payload["eventType"].as_str().unwrap_or_default() {
        "ms.vss-code.git-pullrequest-comment-event" => {
            let comment = text(&r["comment"]["content"]);
            check(&comment, mention)?;
            let pr = &r["pullRequest"];
            let repo = &pr["repository"];
            let org = organization(repo["url"].as_str().or(repo["webUrl"].as_str()).unwrap_or_default()).unwrap_or_default();
            let thread = r["comment"]["_links"]["threads"]["href"].as_str().and_then(|h| h.rsplit('/').next()).map(str::to_owned);
            let ask = Ask {
                repository: format!("{org}/{}/{}", text(&repo["project"]["name"]), text(&repo["name"])),
                number: pr["pullRequestId"].as_u64().unwrap_or_default(),
                is_pull: true,
                head: pr["sourceRefName"].as_str().map(|b| b.strip_prefix("refs/heads/").unwrap_or(b).to_owned()),
                title: text(&pr["title"]),
                body: text(&pr["description"]),
                comment: Some(comment),
                url: format!("{}/pullrequest/{}", text(&repo["webUrl"]), pr["pullRequestId"]),
                sender: text(&r["comment"]["author"]["displayName"]),
                sender_id: None,
                sender_account: r["comment"]["author"]["id"].as_str().map(str::to_owned),
                react_to: ReactTo::Nothing,
                discussion: thread,
                project: None,
            };
            if org.is_empty() || ask.number == 0 {
                return Err("the payload names no pull request".into());
            }
            Ok(ask)
        }
        "workitem.commented" => {
            let comment = text_of(r["fields"]["System.History"].as_str().unwrap_or_default());
            check(&comment, mention)?;
            let Some(repository) = repository else {
                return Err("a work item's comment needs the automation's repository to work in".into());
            };
            let id = r["id"].as_u64().unwrap_or_default();
            let changed_by = &r["fields"]["System.ChangedBy"];
            Ok(Ask {
                repository: repository.to_owned(),
                number: id,
                is_pull: false,
                head: None,
                title: text(&r["fields"]["System.Title"]),
                body: text_of(r["fields"]["System.Description"].as_str().unwrap_or_default()),
                comment: Some(comment),
                url: text(&r["_links"]["html"]["href"]),
                sender: changed_by["displayName"].as_str().map(str::to_owned).unwrap_or_else(|| text(changed_by)),
                sender_id: None,
                sender_account: changer(changed_by, &r["revisedBy"]),
                react_to: ReactTo::Nothing,
                discussion: None,
                project: None,
            })
        }
        other => Err(format!("Azure DevOps' `{other}` is not acted on")),
    }
}

/// Who changed a work item, as the identities API finds them: the identity's id where the payload
/// has it (an identity object, or the revision's `revisedBy`), else the e-mail of the
/// `Name <e-mail>` that older payloads give.
fn changer(changed_by: &Value, revised_by: &Value) -> Option<String> {
    let id = changed_by["id"].as_str().or(revised_by["id"].as_str()).map(str::to_owned);
    id.or_else(|| {
        let (_, mail) = changed_by.as_str()?.rsplit_once('<')?;
        mail.strip_suffix('>').filter(|m| m.contains('@')).map(str::to_owned)
    })
}

fn check(comment: &str, mention: &str) -> Result<(), String> {
    if comment.contains(MARKER) || comment.contains("halyard-marker") {
        return Err("Halyard's own comment".into());
    }
    if !mentions(comment, mention) {
        return Err(format!("no mention of {mention}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pull_request_and_work_item_comments_are_read() {
        let pr = json!({"eventType": "ms.vss-code.git-pullrequest-comment-event", "id": "n1", "resource": {
            "comment": {"id": 2, "content": "@halyard fix the build", "author": {"displayName": "Dana", "id": "u-1"},
                        "_links": {"threads": {"href": "https://dev.azure.com/acme/_apis/git/repositories/r/pullRequests/4/threads/77"}}},
            "pullRequest": {"pullRequestId": 4, "title": "Build", "sourceRefName": "refs/heads/ci",
                            "repository": {"name": "site", "url": "https://dev.azure.com/acme/_apis/git/repositories/r",
                                           "webUrl": "https://dev.azure.com/acme/web/_git/site", "project": {"name": "web"}}}}});
        let ask = read(&pr, "@halyard", None).unwrap();
        assert_eq!(
            (ask.repository.as_str(), ask.number, ask.head.as_deref(), ask.discussion.as_deref()),
            ("acme/web/site", 4, Some("ci"), Some("77"))
        );
        let wi = json!({"eventType": "workitem.commented", "resource": {"id": 12, "revisedBy": {"id": "u-2"}, "fields": {"System.Title": "Slow",
            "System.History": "<div>@halyard&nbsp;please look</div>", "System.ChangedBy": "Dana"}}});
        let ask = read(&wi, "@halyard", Some("acme/web/site")).unwrap();
        assert_eq!((ask.number, ask.is_pull, ask.comment.as_deref()), (12, false, Some("@halyard please look")));
        assert_eq!(ask.sender_account.as_deref(), Some("u-2"));
        let mut older = wi.clone();
        older["resource"]["revisedBy"] = Value::Null;
        older["resource"]["fields"]["System.ChangedBy"] = "Dana Lee <dana@acme.example>".into();
        let ask = read(&older, "@halyard", Some("acme/web/site")).unwrap();
        assert_eq!((ask.sender.as_str(), ask.sender_account.as_deref()), ("Dana Lee <dana@acme.example>", Some("dana@acme.example")));
        assert!(read(&wi, "@halyard", None).unwrap_err().contains("repository"));
    }
}

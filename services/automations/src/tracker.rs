//! What an issue tracker's webhook is read into ([`Ask`]), whichever tracker (`jira`, `linear`)
//! read it; [`crate::tracker_runs`] decides what it starts.

/// What a tracker's webhook asks.
#[derive(Clone, Debug, PartialEq)]
pub struct Ask {
    /// The issue as the tracker's API names it (Jira `PROJ-12`; Linear the id).
    pub key: String,
    /// The project (Jira) or team (Linear) key.
    pub team: String,
    pub title: String,
    pub body: String,
    pub comment: Option<String>,
    pub author: String,
    /// The author as the tracker's API asks about people: the query parameter's name and value
    /// (Jira Cloud `accountId`, Jira Data Center `username`, Linear the user's `id`); none when
    /// the payload names no person (an integration's change), which starts nothing.
    pub author_id: Option<(&'static str, String)>,
    pub url: String,
}

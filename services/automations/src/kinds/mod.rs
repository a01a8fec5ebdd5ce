//! Each kind's own part: what its requests ask for, and (for trackers and Slack) the API Halyard
//! answers on. Forges (`github` with Forgejo and Gitea, `gitlab`, `bitbucket`, `azure_devops`)
//! read their webhooks into [`crate::forge::Ask`] and share [`crate::forge_runs`]' run and the
//! platform's forge client; issue trackers (`jira`, `linear`) share [`crate::tracker`]'s run;
//! `slack` runs its own.

pub mod azure_devops;
pub mod bitbucket;
pub mod github;
pub mod gitlab;
pub mod jira;
pub mod linear;
pub mod slack;

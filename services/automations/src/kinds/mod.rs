//! Each kind's own part: what its requests ask for, and the API Halyard answers on. Forges
//! (`github` with Forgejo and Gitea, `gitlab`, `bitbucket`, `azure_devops`) share [`crate::forge`]'s run, issue
//! trackers (`jira`, `linear`) [`crate::tracker`]'s; `slack` runs its own.

pub mod azure_devops;
pub mod bitbucket;
pub mod github;
pub mod gitlab;
pub mod jira;
pub mod linear;
pub mod slack;

//! A conversation's sandbox as its owner reaches it: the workspace's changes and files (looked
//! at, edited, uploaded, downloaded, archived), the owner's own terminal, and the apps the
//! agent serves ([`apps`]: links and access; [`app_forward`]: the requests passed on).

pub mod app_forward;
pub mod apps;
pub mod files;
pub mod terminal;

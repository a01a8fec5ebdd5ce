//! The sandbox's shells: the main one (the conversation's agent) and named ones, made on first
//! use, one per helper conversation working in the same workspace, so helpers' commands run
//! side by side instead of queueing behind one shell (and none sees another's `cd` or exports).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::error::ExecutorError;
use crate::shell::Shell;

/// Where the shells' working directories are kept between executors, under the workspace
/// (beside the checkpoints, out of listings and changes): it outlives the sandbox's processes,
/// in both kinds.
const MEMOS: &str = ".halyard/shells";

/// The file a shell keeps its working directory in: `main` the main shell's, a named
/// session's under its name.
fn memo(workspace: &std::path::Path, session: Option<&str>) -> PathBuf {
    let file = match session {
        None => "main.cwd".to_owned(),
        Some(name) => format!("session-{name}.cwd"),
    };
    workspace.join(MEMOS).join(file)
}

/// Most named shells kept; past it the one unused longest, if idle, makes room.
const MAX_NAMED: usize = 32;
/// Longest session name.
const MAX_NAME: usize = 64;

pub struct Sessions {
    main: Arc<Shell>,
    named: Mutex<HashMap<String, (Arc<Shell>, Instant)>>,
    workspace: PathBuf,
    cap: usize,
    env: Vec<(String, String)>,
}

impl Sessions {
    pub fn new(workspace: PathBuf, cap: usize, env: Vec<(String, String)>) -> Result<Self, ExecutorError> {
        let main = Arc::new(Shell::new(workspace.clone(), cap)?.with_env(env.clone()).remembered(memo(&workspace, None)));
        Ok(Self { main, named: Mutex::new(HashMap::new()), workspace, cap, env })
    }

    /// The main shell.
    pub fn main(&self) -> &Arc<Shell> {
        &self.main
    }

    /// The shell of `session` (the main one for `None`), made if it is new.
    pub fn get(&self, session: Option<&str>) -> Result<Arc<Shell>, ExecutorError> {
        let Some(name) = session else { return Ok(self.main.clone()) };
        if name.is_empty() || name.len() > MAX_NAME || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return Err(ExecutorError::Tool(format!(
                "a shell session's name is 1 to {MAX_NAME} letters, digits, `-` or `_`; {name:?} is not"
            )));
        }
        let mut named = self.named.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((shell, used)) = named.get_mut(name) {
            *used = Instant::now();
            return Ok(shell.clone());
        }
        if named.len() >= MAX_NAMED {
            // A shell held elsewhere is running a command: only an idle one may go.
            let idle = named.iter().filter(|(_, (s, _))| Arc::strong_count(s) == 1).min_by_key(|(_, (_, used))| *used);
            match idle.map(|(k, _)| k.clone()) {
                Some(oldest) => drop(named.remove(&oldest)),
                None => {
                    return Err(ExecutorError::Tool(format!(
                        "this sandbox already runs commands in {MAX_NAMED} shell sessions; wait for one to finish"
                    )));
                }
            }
        }
        let shell = Arc::new(
            Shell::new(self.workspace.clone(), self.cap)?.with_env(self.env.clone()).remembered(memo(&self.workspace, Some(name))),
        );
        named.insert(name.to_owned(), (shell.clone(), Instant::now()));
        tracing::info!(session = name, "shell session opened");
        Ok(shell)
    }

    /// Ends the named session: its shell's process group is killed and the name forgotten (a
    /// later command under it gets a fresh shell). Whether there was one.
    pub fn close(&self, name: &str) -> bool {
        let closed = self.named.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
        // A later command under the name starts over, in the workspace.
        let _ = std::fs::remove_file(memo(&self.workspace, Some(name)));
        match closed {
            Some((shell, _)) => {
                shell.kill();
                tracing::info!(session = name, "shell session closed");
                true
            }
            None => false,
        }
    }

    /// The shell of `session` if it exists (interrupting a session never opens one).
    pub fn existing(&self, session: Option<&str>) -> Option<Arc<Shell>> {
        match session {
            None => Some(self.main.clone()),
            Some(name) => self.named.lock().unwrap_or_else(|p| p.into_inner()).get(name).map(|(s, _)| s.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halyard_protocol::executor::ExecRequest;

    #[tokio::test]
    async fn named_sessions_are_shells_of_their_own() {
        let dir = std::env::temp_dir().join(format!("halyard-sessions-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let sessions = Sessions::new(dir.clone(), 10_000, Vec::new()).unwrap();
        let run = |session: Option<&str>, command: &str| {
            let shell = sessions.get(session).unwrap();
            let req = ExecRequest { command: command.into(), timeout_secs: Some(10.0), ..Default::default() };
            async move { shell.exec(req).await.unwrap().output }
        };
        run(None, "export WHO=main").await;
        run(Some("helper-1"), "export WHO=helper").await;
        assert_eq!(run(None, "echo $WHO").await, "main");
        assert_eq!(run(Some("helper-1"), "echo $WHO").await, "helper");
        assert_eq!(run(Some("helper-2"), "echo ${WHO:-nobody}").await, "nobody");
        assert!(sessions.get(Some("../x")).is_err());
        assert!(sessions.existing(Some("helper-3")).is_none(), "asking about a session does not open it");
        // Closing a session kills what it started, in the background too.
        run(Some("helper-1"), "sleep 300 & echo $! > bg.pid").await;
        let pid: i32 = std::fs::read_to_string(dir.join("bg.pid")).unwrap().trim().parse().unwrap();
        assert!(sessions.close("helper-1"));
        let gone = |pid: i32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map_or(true, |s| s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
        };
        for _ in 0..50 {
            if gone(pid) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert!(gone(pid), "the session's background command was killed");
        assert_eq!(run(Some("helper-1"), "echo ${WHO:-fresh}").await, "fresh", "a closed name starts over");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn a_new_executor_starts_each_shell_where_the_last_one_was_and_says_it_is_new() {
        let dir = std::env::temp_dir().join(format!("halyard-memo-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(dir.join("app/src")).unwrap();
        let req = |command: &str| ExecRequest { command: command.into(), timeout_secs: Some(10.0), ..Default::default() };
        let before = Sessions::new(dir.clone(), 10_000, Vec::new()).unwrap();
        let first = before.main().exec(req("cd app/src && export LEFT=1")).await.unwrap();
        assert!(!first.restarted, "the first shell of a new sandbox is no restart");
        before.get(Some("helper")).unwrap().exec(req("cd app")).await.unwrap();
        drop(before);
        // The sandbox's processes end (hibernation); a new executor on the same workspace.
        let after = Sessions::new(dir.clone(), 10_000, Vec::new()).unwrap();
        let woke = after.main().exec(req("pwd; echo ${LEFT:-unset}")).await.unwrap();
        assert!(woke.restarted, "{woke:?}");
        assert_eq!(woke.output, format!("{}\nunset", dir.join("app/src").display()));
        assert!(!after.main().exec(req("true")).await.unwrap().restarted, "said once");
        let helper = after.get(Some("helper")).unwrap().exec(req("pwd")).await.unwrap();
        assert_eq!((helper.restarted, helper.output), (true, dir.join("app").display().to_string()));
        // A directory that is gone since: the workspace.
        std::fs::remove_dir_all(dir.join("app")).unwrap();
        let again = Sessions::new(dir.clone(), 10_000, Vec::new()).unwrap();
        let r = again.main().exec(req("pwd")).await.unwrap();
        assert_eq!((r.restarted, r.output), (true, dir.display().to_string()));
        let _ = std::fs::remove_dir_all(dir);
    }
}

//! Git credentials for the agent's shell, asked of the agent runner each time git needs one, so
//! that no token is kept in the sandbox: not in `.git/config`, the environment, a file or the
//! shell's history.
//!
//! The shell's git has `credential.helper` set to `halyard git-credential --socket <path>`
//! (through `GIT_CONFIG_*` variables, see [`Broker::shell_env`]). The helper ([`helper`]) sends what git
//! asks for to the executor's Unix socket; the executor passes it on over the `GET
//! /git/credentials` WebSocket that the agent runner holds open while a run lasts, and the
//! runner answers with the owner's token for that host, or says why not. With no run (no
//! socket) there is nobody to ask, and git is told so.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket};
use halyard_protocol::executor::{GitCredentialAnswer, GitCredentialAsk};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};

/// How long git waits for the agent runner's answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest question line accepted from the helper.
const MAX_ASK: usize = 8192;

type Pending = (GitCredentialAsk, oneshot::Sender<GitCredentialAnswer>);

/// The executor's side: the helper's socket and the agent runner's WebSocket.
pub struct Broker {
    socket: PathBuf,
    /// The command line git runs as its helper.
    helper: String,
    /// Questions go to the agent runner's socket, the newest one connected.
    runner: Mutex<Option<(u64, mpsc::Sender<Pending>)>>,
    generation: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker").field("socket", &self.socket).finish_non_exhaustive()
    }
}

impl Broker {
    /// Listens on a Unix socket in `dir` (the sandbox's own temporary directory).
    pub fn start(dir: &Path) -> std::io::Result<Arc<Self>> {
        let socket = dir.join(format!("halyard-git-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&socket);
        let listener = tokio::net::UnixListener::bind(&socket)?;
        let broker = Arc::new(Self {
            helper: helper_command(&socket),
            socket,
            runner: Mutex::new(None),
            generation: std::sync::atomic::AtomicU64::new(0),
        });
        let serving = broker.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serving.clone().answer_helper(stream));
            }
        });
        Ok(broker)
    }

    /// The variables that make the shell's git ask through [`helper`]. A repository's or the
    /// user's own `credential.helper` comes first; ours is the last one git tries.
    pub fn shell_env(&self) -> Vec<(String, String)> {
        vec![
            ("GIT_CONFIG_COUNT".into(), "1".into()),
            ("GIT_CONFIG_KEY_0".into(), "credential.helper".into()),
            ("GIT_CONFIG_VALUE_0".into(), format!("!{}", self.helper)),
            // Never wait on a terminal nobody is at.
            ("GIT_TERMINAL_PROMPT".into(), "0".into()),
        ]
    }

    async fn answer_helper(self: Arc<Self>, stream: tokio::net::UnixStream) {
        let (read, mut write) = stream.into_split();
        let mut line = String::new();
        let read = BufReader::new(read.take(MAX_ASK as u64)).read_line(&mut line).await;
        let answer = match read.ok().and_then(|_| serde_json::from_str::<GitCredentialAsk>(&line).ok()) {
            Some(ask) => self.ask(ask).await,
            None => GitCredentialAnswer { error: Some("the helper's question was not understood".into()), ..Default::default() },
        };
        if let Ok(mut text) = serde_json::to_string(&answer) {
            text.push('\n');
            let _ = write.write_all(text.as_bytes()).await;
        }
    }

    async fn ask(&self, ask: GitCredentialAsk) -> GitCredentialAnswer {
        let refuse = |why: &str| GitCredentialAnswer { error: Some(why.into()), ..Default::default() };
        let runner = self.runner.lock().ok().and_then(|r| r.as_ref().map(|(_, tx)| tx.clone()));
        let Some(runner) = runner else {
            return refuse("no agent run is going on to ask for credentials (they are given only while the agent works)");
        };
        let (tx, rx) = oneshot::channel();
        if runner.send((ask, tx)).await.is_err() {
            return refuse("the agent runner went away");
        }
        match tokio::time::timeout(ANSWER_TIMEOUT, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => refuse("the agent runner went away"),
            Err(_) => refuse("the agent runner did not answer in time"),
        }
    }

    /// Serves the agent runner's WebSocket: questions out, answers in, until it closes.
    pub async fn serve_runner(self: Arc<Self>, mut socket: WebSocket) {
        let (tx, mut questions) = mpsc::channel::<Pending>(16);
        let me = self.generation.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        if let Ok(mut runner) = self.runner.lock() {
            *runner = Some((me, tx));
        }
        let mut waiting: HashMap<u64, oneshot::Sender<GitCredentialAnswer>> = HashMap::new();
        let mut next_id = 0u64;
        loop {
            tokio::select! {
                asked = questions.recv() => {
                    let Some((mut ask, reply)) = asked else { break };
                    next_id += 1;
                    ask.id = next_id;
                    let Ok(text) = serde_json::to_string(&ask) else { continue };
                    if socket.send(Message::Text(text.into())).await.is_err() {
                        break;
                    }
                    waiting.insert(next_id, reply);
                }
                incoming = socket.recv() => match incoming {
                    Some(Ok(Message::Text(text))) => {
                        if let Ok(answer) = serde_json::from_str::<GitCredentialAnswer>(&text) {
                            if let Some(reply) = waiting.remove(&answer.id) {
                                let _ = reply.send(answer);
                            }
                        }
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Binary(_))) => {}
                    Some(Ok(Message::Close(_)) | Err(_)) | None => break,
                },
            }
        }
        if let Ok(mut runner) = self.runner.lock() {
            if runner.as_ref().is_some_and(|(generation, _)| *generation == me) {
                *runner = None;
            }
        }
    }
}

/// How git runs this binary as its helper: as the executor was run (in a container, through
/// the dynamic loader that came with the binary).
fn helper_command(socket: &Path) -> String {
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let exe = std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_else(|_| "halyard".into());
    let argv0 = std::env::args().next().unwrap_or_default();
    let through_loader = Path::new(&exe).file_name().is_some_and(|n| n.to_string_lossy().starts_with("ld-"));
    let mut words = vec![quote(&exe)];
    if through_loader {
        let libs = Path::new(&exe).parent().map(|p| p.display().to_string()).unwrap_or_default();
        words.extend(["--library-path".to_owned(), quote(&libs), quote(&argv0)]);
    }
    words.extend(["git-credential".to_owned(), "--socket".to_owned(), quote(&socket.display().to_string())]);
    words.join(" ")
}

/// `halyard git-credential --socket <path> <operation>`: git's credential helper protocol on
/// standard input and output. `get` asks the executor at `socket`; `store` and `erase` keep
/// nothing, as nothing is kept. Returns the exit code.
pub fn helper(socket: &Path, operation: &str, input: &mut dyn BufRead, output: &mut dyn Write) -> i32 {
    let mut fields = HashMap::new();
    let mut line = String::new();
    while input.read_line(&mut line).unwrap_or(0) > 0 {
        let text = line.trim_end();
        if text.is_empty() {
            break;
        }
        if let Some((k, v)) = text.split_once('=') {
            fields.insert(k.to_owned(), v.to_owned());
        }
        line.clear();
    }
    if operation != "get" {
        return 0;
    }
    let ask = GitCredentialAsk {
        id: 0,
        protocol: fields.remove("protocol").unwrap_or_default(),
        host: fields.remove("host").unwrap_or_default(),
        path: fields.remove("path"),
    };
    match ask_executor(socket, &ask) {
        Ok(GitCredentialAnswer { username: Some(user), password: Some(password), .. }) => {
            let _ = write!(output, "username={user}\npassword={password}\n");
        }
        Ok(GitCredentialAnswer { error, .. }) => {
            eprintln!("halyard: no credentials for {}: {}", ask.host, error.unwrap_or_else(|| "none given".into()));
            // No other helper and no prompt: the answer is final.
            let _ = writeln!(output, "quit=1");
        }
        Err(e) => {
            eprintln!("halyard: cannot ask for credentials: {e}");
            let _ = writeln!(output, "quit=1");
        }
    }
    0
}

fn ask_executor(socket: &Path, ask: &GitCredentialAsk) -> Result<GitCredentialAnswer, String> {
    let mut stream = std::os::unix::net::UnixStream::connect(socket).map_err(|e| format!("{}: {e}", socket.display()))?;
    stream.set_read_timeout(Some(ANSWER_TIMEOUT + Duration::from_secs(5))).map_err(|e| e.to_string())?;
    let mut text = serde_json::to_string(ask).map_err(|e| e.to_string())?;
    text.push('\n');
    stream.write_all(text.as_bytes()).map_err(|e| e.to_string())?;
    let mut line = String::new();
    std::io::BufReader::new(stream).read_line(&mut line).map_err(|e| e.to_string())?;
    serde_json::from_str(&line).map_err(|e| format!("the executor's answer: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_and_erase_keep_nothing_and_say_nothing() {
        for op in ["store", "erase"] {
            let mut out = Vec::new();
            let code = helper(Path::new("/nonexistent"), op, &mut "protocol=https\nhost=x\npassword=p\n\n".as_bytes(), &mut out);
            assert_eq!((code, out.len()), (0, 0));
        }
    }

    #[test]
    fn the_helper_runs_as_the_executor_was_run() {
        let command = helper_command(Path::new("/tmp/it's.sock"));
        assert!(command.ends_with(r" git-credential --socket '/tmp/it'\''s.sock'") && command.starts_with('\''), "{command}");
    }
}

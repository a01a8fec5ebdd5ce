//! The HTTP API of the executor that runs inside each sandbox. Every route but `/health`
//! requires the sandbox's session key in the [`SESSION_KEY_HEADER`] header.

use serde::{Deserialize, Serialize};

/// Header carrying the sandbox session key.
pub const SESSION_KEY_HEADER: &str = "x-session-key";

/// The largest file a user may upload into a workspace (`PUT .../files`), in bytes.
pub const MAX_UPLOAD_BYTES: u64 = 100 << 20;
/// The largest checkpoint bundle a sandbox takes in for a fork (2 GiB): a body past it is cut
/// off and refused, never written to the disk whole.
pub const MAX_CHECKPOINT_BUNDLE_BYTES: u64 = 2 << 30;

/// Marker inserted where output was cut.
pub const TRUNCATION_MARKER: &str = "[... output truncated by Halyard:";

/// `POST /shell/exec`: run a command in the persistent shell, or send input to the running one.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecRequest {
    pub command: String,
    /// Send `command` as input to the process still running instead of as a new command.
    /// `C-c` interrupts it, `C-d` closes its input.
    #[serde(default)]
    pub is_input: bool,
    /// Seconds to wait before returning with the command still running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<f64>,
    /// Environment variables exported into the shell before the command runs (the user's
    /// secrets). Never written to the command script nor echoed. `Some` is the caller's whole
    /// set: what it holds stays exported for the commands after it, and a name an earlier
    /// `Some` exported that this one leaves out (a deleted secret) is unset. `None` leaves
    /// the shell's environment as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<std::collections::BTreeMap<String, String>>,
    /// Run the command in a subshell: `env` (a clone's credentials, say) exists only for it,
    /// and nothing it exports or changes stays in the shell.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub scoped: bool,
    /// The shell session to use: each name its own persistent shell (a helper conversation's
    /// commands run beside its parent's, in the same workspace); absent: the sandbox's main
    /// shell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
}

/// `POST /shell/interrupt`: which session's running command to stop (absent: the main shell's).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InterruptRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// End the named session instead: its shell and everything in its process group are killed
    /// (a deleted helper's commands, background ones included).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub close: bool,
}

/// `POST /hooks/run`: one repository hook's command, run apart from the agent's shell (nothing
/// it exports or changes stays), with `stdin` as its standard input.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HookRunRequest {
    pub command: String,
    /// The hook's input, a JSON object.
    pub stdin: String,
    /// The longest it may run; it is killed, with everything it started, after that.
    pub timeout_secs: f64,
    /// Environment variables the command gets besides the sandbox's own.
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
}

/// What a hook did: its exit code (`None`: killed at its timeout, or could not start), and
/// the start of its output (each stream cut at [`HOOK_OUTPUT_CAP`] bytes).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HookRunResponse {
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    #[serde(default)]
    pub timed_out: bool,
}

/// How much of each of a hook's output streams is kept.
pub const HOOK_OUTPUT_CAP: usize = 16 * 1024;

/// The result of [`ExecRequest`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecResponse {
    pub output: String,
    /// `None` while the command is still running.
    pub exit_code: Option<i32>,
    /// The command is still running after the timeout; send input or `C-c` with `is_input`.
    pub still_running: bool,
    /// Output was longer than the cap and was cut (see [`TRUNCATION_MARKER`]).
    pub truncated: bool,
    /// Working directory after the command.
    pub cwd: String,
    /// The shell is new since this session's last command: the sandbox's processes ended in
    /// between (it hibernated while idle, or was restarted). It started in the directory the
    /// last command ended in; exported variables and background processes are gone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restarted: bool,
}

/// `POST /files/edit`: the OpenHands `file_editor` tool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EditRequest {
    /// `view`, `create`, `str_replace`, `insert` or `undo_edit`.
    pub command: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_str: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_str: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insert_line: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub view_range: Option<Vec<i64>>,
}

/// The result of [`EditRequest`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EditResponse {
    pub output: String,
}

/// `GET /health`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Health {
    pub ok: bool,
    pub workspace: String,
    /// Milliseconds since the last shell or file request ended (0 while one runs, or while the
    /// user's terminal or VS Code is open).
    #[serde(default)]
    pub idle_ms: u64,
    /// The sandbox's browser is running (it starts on the first browser call and stops after a
    /// while unused).
    #[serde(default)]
    pub browser: bool,
    /// The sandbox's VS Code (code-server) is running (it starts on the first request for it
    /// and stops after a while unused).
    #[serde(default)]
    pub vscode: bool,
}

/// `POST /session-key`: replaces the executor's session key (a warm-pool sandbox gets the key
/// of the sandbox it becomes). Authenticated with the current key.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RotateKey {
    pub key: String,
}

/// `POST /network`: the variables naming the sandbox's way out (the egress proxy's address for
/// a sandbox held to an outbound policy; empty otherwise), exported by every shell before its
/// next command.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NetworkVars {
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
}

/// The port the egress proxy is reached at by a sandbox held to an outbound policy: on its
/// network's gateway for a container, on its own loopback for a process sandbox (whose executor
/// relays it out, `halyard_executor::network`).
pub const EGRESS_PROXY_PORT: u16 = 3128;

/// Error body of every executor route.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// A stable code and a message that says what to do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
}

/// `GET /files?path=`: a directory's entries, or a file's content (capped), for browsing the
/// workspace. A relative path is taken from the workspace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = Files))]
pub struct FilesResponse {
    /// The absolute path read.
    pub path: String,
    /// `directory` or `file`.
    pub kind: String,
    /// A directory's entries, directories first, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<FileEntry>,
    /// A file's size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// A text file's content, up to [`FILE_CONTENT_CAP`] bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// The content was cut at the cap, or the listing at [`DIRECTORY_ENTRIES_CAP`] entries.
    #[serde(default)]
    pub truncated: bool,
    /// The file is not text (no content is sent).
    #[serde(default)]
    pub binary: bool,
}

/// Most entries of a directory [`FilesResponse`] lists (a hostile agent may make millions).
pub const DIRECTORY_ENTRIES_CAP: usize = 5_000;

/// Most bytes of a file [`FilesResponse`] carries.
pub const FILE_CONTENT_CAP: usize = 256 * 1024;

/// One entry of a directory.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FileEntry {
    pub name: String,
    /// `file`, `directory` or `symlink`.
    pub kind: String,
    pub size: u64,
}

/// `GET /changes`: what changed in the workspace: `git status` and `git diff` where it is a
/// repository, else the files the editor changed, each against its content before the first
/// edit.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = Changes))]
pub struct ChangesResponse {
    pub repository: bool,
    pub files: Vec<ChangedFile>,
}

/// One changed file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ChangedFile {
    /// Relative to the workspace.
    pub path: String,
    /// `added`, `modified`, `deleted`, `renamed` or `untracked`.
    pub status: String,
    /// A unified diff, up to [`DIFF_CAP`] bytes.
    pub diff: String,
    #[serde(default)]
    pub truncated: bool,
}

/// Most bytes of one file's diff.
pub const DIFF_CAP: usize = 64 * 1024;

/// The first message on the executor's `GET /mcp/stdio` WebSocket: the MCP server to start in
/// the workspace. After it, each text message is one JSON-RPC message to the server's standard
/// input, and each line of its standard output comes back as one. When the process ends, the
/// socket closes with the tail of its standard error as the reason; closing the socket ends
/// the process.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct McpStdioSpawn {
    /// A shell command line.
    pub command: String,
    /// The process's environment on top of the executor's (secrets already filled in).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
}

/// The first message on `GET /acp/stdio`: the third-party agent (an ACP agent on stdio) the
/// socket speaks to. The executor keeps one process per `name` for the sandbox's life (not the
/// socket's): a second socket with the same name attaches to the live process, so a runner that
/// takes a run over finds the agent where the last one left it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AcpSpawn {
    /// Which process: the conversation's id.
    pub name: String,
    /// A shell command line, run in the workspace (only when no process of `name` lives).
    pub command: String,
    /// The process's environment on top of the executor's.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
}

/// A text frame of `GET /acp/stdio` after [`AcpSpawn`]. Every line the agent writes is kept,
/// numbered, until the holder acknowledges it: a holder that dies before it has dealt with a
/// line (a permission request it never answered, an update it never recorded) leaves it for
/// the next one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AcpFrame {
    /// Executor to holder, first: whether the process was started for this socket (`fresh`:
    /// it knows nothing yet) and the ids of the holder's requests it has not answered yet
    /// (a prompt still running). The lines not acknowledged follow.
    Attached {
        fresh: bool,
        #[serde(default)]
        unanswered: Vec<serde_json::Value>,
        /// The relay's base URL as the agent reaches it (what `${HALYARD_LLM_BASE}` stands for),
        /// where the holder also serves the conversation's MCP tools (`<relay>/mcp`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        relay: Option<String>,
    },
    /// Executor to holder: one line of the agent's standard output (a JSON-RPC message).
    Line { seq: u64, line: String },
    /// Executor to holder: the agent's process ended (its last words on standard error).
    Exited { message: String },
    /// Holder to executor: a line for the agent's standard input.
    Send { line: String },
    /// Holder to executor: line `seq` is dealt with.
    Ack { seq: u64 },
    /// Holder to executor: end the agent's process.
    Stop,
}

/// A text frame of the git proxy's WebSocket (`GET /git/proxy`), which the agent runner (or,
/// for the clone at start, the conversations service) holds open to the executor. Git in the
/// sandbox talks smart HTTP to the executor's loopback listener; the executor passes each
/// request on as a [`GitProxyFrame::Request`] and the holder of the socket makes it upstream
/// with the user's token, which never enters the sandbox. A body travels as binary frames, each
/// the request's `id` (8 bytes, big-endian) followed by bytes, and ends with
/// [`GitProxyFrame::End`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum GitProxyFrame {
    /// Holder to executor, first: the remotes git reaches through the proxy (URLs as the
    /// conversation names them; a remote whose URL starts so is rewritten to the proxy).
    Remotes { urls: Vec<String> },
    /// Executor to holder: a request git made; `target` is `<host>/<path>` of the upstream URL.
    Request {
        id: u64,
        method: String,
        target: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        query: Option<String>,
        #[serde(default)]
        headers: Vec<(String, String)>,
    },
    /// Holder to executor: the head of the upstream's answer.
    Response {
        id: u64,
        status: u16,
        #[serde(default)]
        headers: Vec<(String, String)>,
    },
    /// Either way: the body of `id` is complete.
    End { id: u64 },
    /// Holder to executor: `id` cannot be answered, in words for the agent (git shows them).
    Error { id: u64, message: String },
}

impl GitProxyFrame {
    /// The binary frame carrying `bytes` of the body of request `id`.
    pub fn body_chunk(id: u64, bytes: &[u8]) -> Vec<u8> {
        let mut frame = Vec::with_capacity(8 + bytes.len());
        frame.extend_from_slice(&id.to_be_bytes());
        frame.extend_from_slice(bytes);
        frame
    }

    /// The request id and bytes of a binary frame (`None`: shorter than an id).
    pub fn split_chunk(frame: &[u8]) -> Option<(u64, &[u8])> {
        let (id, bytes) = frame.split_first_chunk::<8>()?;
        Some((u64::from_be_bytes(*id), bytes))
    }
}

/// `POST /checkpoint`: keep the workspace as it is now as the checkpoint of event `seq`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckpointRequest {
    pub seq: u64,
    /// The last checkpoint's commit as the agent runner kept it (outside the sandbox): the new
    /// one follows it, whatever the store's own refs say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
}

/// A checkpoint taken: its commit in the store, and whether anything had changed since the one
/// before (if not, no new one was made and `commit` is that one).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckpointResponse {
    pub seq: u64,
    pub commit: String,
    pub changed: bool,
    /// How long it took, in milliseconds.
    pub ms: u64,
}

/// `POST /restore`: put the workspace back as it was at event `seq`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RestoreRequest {
    pub seq: u64,
    /// The last checkpoint's commit as the agent runner kept it: the checkpoint restored is
    /// found from it, in a store whose every object is checked first (refused, 409
    /// `checkpoints_tampered`, when something in the sandbox changed them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
}

/// A restore done: the checkpoint used (the newest at or before `seq`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RestoreResponse {
    pub seq: u64,
    pub checkpoint_seq: u64,
    pub commit: String,
}

/// Most paths `glob` and `grep` answer (more are cut, and `truncated` says so).
pub const SEARCH_RESULTS_CAP: usize = 100;

/// `POST /files/glob`: the files whose path matches a glob pattern (`**/*.rs`, `src/**/*.{ts,tsx}`;
/// a pattern without `/` matches file names at any depth), as ripgrep lists files: ignored files
/// (`.gitignore` in a repository) and hidden ones left out.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GlobRequest {
    pub pattern: String,
    /// The directory to search (absolute, or relative to the workspace); the workspace if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// `POST /files/grep`: the files whose content matches a regular expression (case-insensitive,
/// `^` and `$` at line ends, binary files skipped), as `rg -li` lists them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GrepRequest {
    pub pattern: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Only files whose name (or path, for a pattern with `/`) matches this glob (`*.{ts,tsx}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include: Option<String>,
}

/// What `glob` or `grep` found: absolute paths, the most recently modified first, at most
/// [`SEARCH_RESULTS_CAP`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SearchResponse {
    pub files: Vec<String>,
    /// The directory searched, absolute.
    pub search_path: String,
    /// More matched than were answered (or the search ran out of time).
    pub truncated: bool,
}

/// `POST /files/patch`: a patch in the V4A format (`*** Begin Patch` ... `*** End Patch`, with
/// `*** Add File:`, `*** Update File:` (and `*** Move to:`), `*** Delete File:` sections; paths
/// relative to the workspace), applied whole or not at all.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PatchRequest {
    pub patch: String,
}

/// What a patch changed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PatchResponse {
    /// One line a file: `A path`, `M path` (`M old -> new` when moved), `D path`.
    pub message: String,
    /// How loosely context lines had to be matched (0: exactly; trailing or surrounding
    /// whitespace ignored otherwise).
    pub fuzz: u32,
}

/// The agent's browser tools, as OpenHands names them; `POST /browser` carries one of them.
pub const BROWSER_TOOLS: &[&str] = &[
    "browser_navigate",
    "browser_click",
    "browser_type",
    "browser_get_state",
    "browser_get_content",
    "browser_scroll",
    "browser_go_back",
    "browser_list_tabs",
    "browser_switch_tab",
    "browser_close_tab",
];

/// `POST /browser`: one browser action in the sandbox's headless Chromium (started by the first
/// one), `tool` one of [`BROWSER_TOOLS`] and `arguments` as the model wrote them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BrowserRequest {
    pub tool: String,
    #[serde(default)]
    pub arguments: serde_json::Value,
}

/// What a browser action did, and the page after it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BrowserResponse {
    /// What the agent reads.
    pub output: String,
    /// The current tab's URL and title afterwards.
    pub url: String,
    pub title: String,
    /// A PNG of the current tab's viewport afterwards, in standard base64 (absent: none could be
    /// taken).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screenshot_png: Option<String>,
}

/// `POST /ipython`: one cell of Python in the IPython kernel of a shell session (started by the
/// first cell, kept between cells), run in that shell's working directory.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CellRequest {
    pub code: String,
    /// Seconds before the cell is interrupted (default 120).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<f64>,
    /// The shell session whose kernel and directory it uses (absent: the main one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
}

/// What a cell did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CellResponse {
    /// What it printed and returned, and the traceback of an error, without ANSI codes.
    pub output: String,
    /// The PNGs it displayed (matplotlib's plots), in standard base64.
    #[serde(default)]
    pub images: Vec<String>,
    /// It raised.
    pub error: bool,
    /// It ran past its timeout and was interrupted.
    pub timed_out: bool,
    /// The kernel was started for this cell: nothing earlier cells defined is in it.
    pub new_kernel: bool,
}

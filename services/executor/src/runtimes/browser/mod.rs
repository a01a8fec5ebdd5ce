//! The sandbox's browser: Debian's Chromium, headless, started by the first browser call (so a
//! conversation that never browses pays nothing) and stopped after a while unused. It runs as the
//! executor does (the sandbox's user, inside its isolation and network namespace, so the
//! sandbox's egress class applies and its own apps are at localhost), and is driven over CDP by
//! [`cdp`]. The agent's `browser_*` tools ([`halyard_protocol::executor::BROWSER_TOOLS`]) act on
//! the current tab; every action answers with the page's URL, title and a PNG of it.
//!
//! What is read in the page (its interactive elements, numbered; its text as Markdown) is
//! `page.js`, run with `Runtime.evaluate`. Clicks are real mouse events at the element's
//! centre and typing is `Input.insertText`, so pages see what a user's actions would make.

pub mod cdp;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use halyard_protocol::executor::{BROWSER_TOOLS, BrowserRequest, BrowserResponse};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::{Said, short_tmp};
use crate::error::ExecutorError;
use cdp::{Cdp, Event};

/// The page-side helpers (`index`, `locate`, `focusField`, `scrollPage`, `markdown`).
const PAGE_JS: &str = include_str!("page.js");
/// Characters of a page's Markdown one `browser_get_content` answers.
const CONTENT_CHUNK: usize = 30_000;
/// How long an action waits for the page it started loading.
const LOAD_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a click or going back may take to start loading a page, if it does.
const SETTLE: Duration = Duration::from_millis(500);

/// Where Chromium may be, in order.
const CHROMIUM: &[&str] = &["/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome", "/usr/bin/google-chrome-stable"];

/// Why a browser action failed: the agent used it wrongly (it reads how to use it right), or
/// the browser failed (it is stopped, and the next call starts a new one).
enum Fault {
    Usage(String),
    Broken(String),
}

impl From<String> for Fault {
    fn from(e: String) -> Self {
        Self::Broken(e)
    }
}

fn usage<T>(message: impl Into<String>) -> Result<T, Fault> {
    Err(Fault::Usage(message.into()))
}

/// The tab actions go to.
#[derive(Clone, Debug)]
struct Tab {
    target: String,
    session: String,
}

/// A running browser.
struct Live {
    child: tokio::process::Child,
    cdp: Cdp,
    profile: PathBuf,
    /// The short way to the temporary directory Chromium was given, removed with it.
    link: Option<PathBuf>,
    current: Tab,
    /// Tabs attached so far: their CDP sessions by target.
    sessions: std::collections::HashMap<String, String>,
}

/// The sandbox's browser, running or not.
pub struct Browser {
    idle: Duration,
    live: tokio::sync::Mutex<Option<Live>>,
    last_use: std::sync::Mutex<Instant>,
    running: AtomicBool,
    this: Weak<Browser>,
}

impl Browser {
    /// A browser that stops after `idle` unused.
    pub fn new(idle: Duration) -> Arc<Self> {
        Arc::new_cyclic(|this| Self {
            idle,
            live: tokio::sync::Mutex::new(None),
            last_use: std::sync::Mutex::new(Instant::now()),
            running: AtomicBool::new(false),
            this: this.clone(),
        })
    }

    /// Chromium is running now.
    pub fn running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }

    fn touch(&self) {
        *self.last_use.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    /// Carries out one browser tool call, starting the browser if it is not running.
    pub async fn act(&self, req: &BrowserRequest) -> Result<BrowserResponse, ExecutorError> {
        if !BROWSER_TOOLS.contains(&req.tool.as_str()) {
            return Err(ExecutorError::Tool(format!("unknown browser tool `{}`: use one of {}", req.tool, BROWSER_TOOLS.join(", "))));
        }
        let args = if req.arguments.is_null() { json!({}) } else { req.arguments.clone() };
        let mut guard = self.live.lock().await;
        self.touch();
        if guard.as_ref().is_some_and(|l| l.cdp.closed()) {
            if let Some(dead) = guard.take() {
                self.stopped(dead).await;
            }
        }
        if guard.is_none() {
            *guard = Some(self.start().await?);
        }
        let Some(live) = guard.as_mut() else { return Err(ExecutorError::Internal("no browser".into())) };
        let done = live.run(&req.tool, &args).await;
        let done = match done {
            Ok(output) => Ok(live.respond(output).await),
            Err(Fault::Usage(message)) => Err(ExecutorError::Tool(message)),
            Err(Fault::Broken(message)) => {
                tracing::warn!(error = %message, "the browser failed; stopping it");
                if let Some(dead) = guard.take() {
                    self.stopped(dead).await;
                }
                Err(ExecutorError::Internal(format!("the browser failed ({message}); the next browser call starts it again")))
            }
        };
        self.touch();
        done
    }

    /// Starts Chromium on a pipe of its own, with a fresh profile, and attaches to its tab.
    #[allow(unsafe_code)]
    async fn start(&self) -> Result<Live, ExecutorError> {
        let program = CHROMIUM
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .ok_or_else(|| ExecutorError::Tool("This sandbox has no browser: its image needs Debian's `chromium` package.".into()))?;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let profile = std::env::temp_dir().join(format!("halyard-browser-{id}"));
        let (tmp, link) = short_tmp(&id[..16]);
        let internal = |what: &str, e: std::io::Error| ExecutorError::Internal(format!("cannot start the browser: {what}: {e}"));
        let (commands_in, commands_out) = pipe().map_err(|e| internal("pipe", e))?;
        let (answers_in, answers_out) = pipe().map_err(|e| internal("pipe", e))?;
        let mut cmd = tokio::process::Command::new(&program);
        cmd.args([
            "--headless",
            // The sandbox is the browser's sandbox: a process sandbox runs it in bubblewrap as the
            // sandbox's uid, and a container has no user namespaces to give Chromium's own.
            "--no-sandbox",
            "--remote-debugging-pipe",
            "--disable-dev-shm-usage",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-default-apps",
            "--disable-sync",
            "--mute-audio",
            "--hide-scrollbars",
            "--password-store=basic",
            "--window-size=1280,800",
            "--disable-features=Translate,MediaRouter,OptimizationHints",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .env("TMPDIR", &tmp)
        .arg("about:blank")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
        let (theirs_in, theirs_out) = (commands_in.as_raw_fd(), answers_out.as_raw_fd());
        // SAFETY: between fork and exec only async-signal-safe calls (fcntl, dup2) on fds this
        // process owns. Chromium reads commands on fd 3 and writes on fd 4; copies above 10 first,
        // so that neither dup2 overwrites the other's source.
        unsafe {
            cmd.pre_exec(move || {
                let a = libc::fcntl(theirs_in, libc::F_DUPFD_CLOEXEC, 10);
                let b = libc::fcntl(theirs_out, libc::F_DUPFD_CLOEXEC, 10);
                if a < 0 || b < 0 || libc::dup2(a, 3) < 0 || libc::dup2(b, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(|e| internal(&program.display().to_string(), e))?;
        drop((commands_in, answers_out));
        let said = Said::default();
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(said.clone().keep(stderr));
        }
        let failed = |e: String| ExecutorError::Internal(format!("the browser did not start ({e}); it said: {}", said.tail()));
        let cdp = Cdp::new(commands_out.into(), answers_in.into()).map_err(|e| internal("pipe", e))?;
        let started = Instant::now();
        let mut live = Live {
            child,
            cdp,
            profile,
            link,
            current: Tab { target: String::new(), session: String::new() },
            sessions: Default::default(),
        };
        // Its first tab; a browser that cannot give one goes, profile and all.
        if let Err(Fault::Usage(e) | Fault::Broken(e)) = live.first_tab().await {
            self.stopped(live).await;
            return Err(failed(e));
        }
        tracing::info!(took_ms = started.elapsed().as_millis() as u64, pid = live.child.id(), "browser started");
        self.running.store(true, Ordering::SeqCst);
        super::watch_idle(self.this.clone(), self.idle);
        Ok(live)
    }

    /// Stops a browser: closed politely, killed if it does not go, its profile removed.
    async fn stopped(&self, mut live: Live) {
        self.running.store(false, Ordering::SeqCst);
        let _ = tokio::time::timeout(Duration::from_secs(2), live.cdp.call(None, "Browser.close", json!({}))).await;
        if tokio::time::timeout(Duration::from_secs(3), live.child.wait()).await.is_err() {
            let _ = live.child.kill().await;
        }
        // The profile and the link go with `live` (its `Drop`).
    }
}

impl Drop for Live {
    /// However the browser ends (stopped, or its executor's runtime dropped with it), its
    /// profile and link do not outlive it: a profile is a few MB, and a left one is never read.
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.profile);
        if let Some(link) = &self.link {
            let _ = std::fs::remove_file(link);
        }
    }
}

impl super::Reap for Browser {
    /// Stops the running browser once unused for `idle`.
    async fn reap(&self) -> bool {
        // Busy (an action runs): not idle.
        let Ok(mut live) = self.live.try_lock() else { return true };
        if live.is_none() {
            return false;
        }
        let unused = self.last_use.lock().unwrap_or_else(|e| e.into_inner()).elapsed();
        if unused < self.idle {
            return true;
        }
        if let Some(l) = live.take() {
            tracing::info!(unused_s = unused.as_secs(), "stopping the idle browser");
            self.stopped(l).await;
        }
        false
    }
}

/// A pipe whose both ends close on exec (the child's end is copied to its fd 3 or 4).
fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array, which this function then owns.
    #[allow(unsafe_code)]
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}

/// The page targets of a `Target.getTargets` answer: id, title, URL.
fn pages(targets: &Value) -> Vec<(String, String, String)> {
    let s = |t: &Value, k: &str| t[k].as_str().unwrap_or_default().to_owned();
    targets["targetInfos"]
        .as_array()
        .map(|all| all.iter().filter(|t| t["type"] == "page").map(|t| (s(t, "targetId"), s(t, "title"), s(t, "url"))).collect())
        .unwrap_or_default()
}

/// The id the agent knows a tab by: the last four characters of its target id.
fn tab_id(target: &str) -> &str {
    &target[target.len().saturating_sub(4)..]
}

fn int_arg(args: &Value, name: &str) -> Result<i64, Fault> {
    match args.get(name) {
        Some(v) => match v.as_i64().or_else(|| v.as_str().and_then(|s| s.trim().parse().ok())) {
            Some(i) => Ok(i),
            None => usage(format!("`{name}` must be a whole number.")),
        },
        None => usage(format!("Missing required argument `{name}`.")),
    }
}

fn str_arg<'a>(args: &'a Value, name: &str) -> Result<&'a str, Fault> {
    match args.get(name).and_then(Value::as_str) {
        Some(s) => Ok(s),
        None => usage(format!("Missing required argument `{name}`.")),
    }
}

/// Booleans arrive as `true` or, from OpenHands-tuned prompts, as `"true"`.
fn bool_arg(args: &Value, name: &str) -> bool {
    match args.get(name) {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => s.eq_ignore_ascii_case("true"),
        _ => false,
    }
}

/// Only the web: `file://`, `chrome://`, `data:` and the like are refused.
fn check_url(url: &str) -> Result<(), Fault> {
    let lower = url.trim().to_ascii_lowercase();
    let rest = lower.strip_prefix("http://").or_else(|| lower.strip_prefix("https://"));
    match rest {
        Some(host) if !host.is_empty() && !host.starts_with('/') => Ok(()),
        Some(_) => usage(format!("`{url}` has no host: give a full http or https URL.")),
        None => usage(format!("Only http and https URLs can be opened; `{url}` is refused.")),
    }
}

impl Live {
    /// Attaches to the tab a new browser opened (or opens one).
    async fn first_tab(&mut self) -> Result<(), Fault> {
        let targets = self.cdp.call(None, "Target.getTargets", json!({})).await?;
        match pages(&targets).into_iter().next() {
            Some((target, ..)) => self.switch_to(&target).await,
            None => self.new_tab().await,
        }
    }

    /// Runs one tool; what the agent reads.
    async fn run(&mut self, tool: &str, args: &Value) -> Result<String, Fault> {
        match tool {
            "browser_navigate" => {
                let url = str_arg(args, "url")?.trim().to_owned();
                check_url(&url)?;
                if bool_arg(args, "new_tab") {
                    self.new_tab().await?;
                }
                let loaded = self.navigate(&url).await?;
                let (now, title) = self.location().await?;
                Ok(format!("Navigated to {now}{}{}", titled(&title), still_loading(loaded)))
            }
            "browser_click" => self.click(int_arg(args, "index")?, bool_arg(args, "new_tab")).await,
            "browser_type" => {
                let index = int_arg(args, "index")?;
                let text = str_arg(args, "text")?;
                let field = self.eval(&format!("focusField({index})")).await?;
                if field.is_null() {
                    return usage(no_element(index));
                }
                let described = field["described"].as_str().unwrap_or_default();
                if field["typable"] != true {
                    return usage(format!("Element {index} is not a text field: {described}"));
                }
                self.call("Input.insertText", json!({"text": text})).await?;
                Ok(format!("Typed {text:?} into element {index}: {described}"))
            }
            "browser_get_state" => self.state().await,
            "browser_get_content" => self.content(args).await,
            "browser_scroll" => {
                let down = match args.get("direction").and_then(Value::as_str).unwrap_or("down") {
                    "down" => true,
                    "up" => false,
                    other => return usage(format!("`direction` must be `up` or `down`, not `{other}`.")),
                };
                let at = self.eval(&format!("scrollPage({down})")).await?;
                Ok(format!(
                    "Scrolled {}: the view starts {} px down a page of {} px (the view is {} px high).",
                    if down { "down" } else { "up" },
                    at["scroll_y"],
                    at["page_height"],
                    at["viewport_height"]
                ))
            }
            "browser_go_back" => {
                let history = self.call("Page.getNavigationHistory", json!({})).await?;
                let index = history["currentIndex"].as_u64().unwrap_or(0) as usize;
                let Some(entry) = index.checked_sub(1).and_then(|i| history["entries"].get(i)) else {
                    return usage("There is no previous page in this tab.");
                };
                let mut events = self.cdp.subscribe();
                self.call("Page.navigateToHistoryEntry", json!({"entryId": entry["id"]})).await?;
                let loaded = self.settle(&mut events, SETTLE).await;
                let (now, title) = self.location().await?;
                Ok(format!("Went back to {now}{}{}", titled(&title), still_loading(loaded)))
            }
            "browser_list_tabs" => {
                let tabs = pages(&self.cdp.call(None, "Target.getTargets", json!({})).await?);
                let mut out = format!("{} tab{} open:", tabs.len(), if tabs.len() == 1 { "" } else { "s" });
                for (target, title, url) in &tabs {
                    let current = if *target == self.current.target { " (current)" } else { "" };
                    out.push_str(&format!("\n[{}] {}{}{current}", tab_id(target), url, titled(title)));
                }
                Ok(out)
            }
            "browser_switch_tab" => {
                let wanted = str_arg(args, "tab_id")?.trim().to_ascii_uppercase();
                let tabs = pages(&self.cdp.call(None, "Target.getTargets", json!({})).await?);
                let Some((target, ..)) = tabs.iter().find(|(t, ..)| tab_id(t).eq_ignore_ascii_case(&wanted)) else {
                    return usage(format!("There is no tab `{wanted}`: browser_list_tabs lists them."));
                };
                let target = target.clone();
                self.cdp.call(None, "Target.activateTarget", json!({"targetId": target})).await?;
                self.switch_to(&target).await?;
                let (now, title) = self.location().await?;
                Ok(format!("Switched to tab {}: {now}{}", tab_id(&target), titled(&title)))
            }
            "browser_close_tab" => {
                let tabs = pages(&self.cdp.call(None, "Target.getTargets", json!({})).await?);
                let closing = match args.get("tab_id").and_then(Value::as_str).map(str::trim).filter(|t| !t.is_empty()) {
                    None => self.current.target.clone(),
                    Some(wanted) => match tabs.iter().find(|(t, ..)| tab_id(t).eq_ignore_ascii_case(wanted)) {
                        Some((t, ..)) => t.clone(),
                        None => return usage(format!("There is no tab `{wanted}`: browser_list_tabs lists them.")),
                    },
                };
                self.cdp.call(None, "Target.closeTarget", json!({"targetId": closing})).await?;
                self.sessions.remove(&closing);
                if closing == self.current.target {
                    match tabs.into_iter().find(|(t, ..)| *t != closing) {
                        Some((next, ..)) => self.switch_to(&next).await?,
                        None => self.new_tab().await?,
                    }
                }
                let (now, title) = self.location().await?;
                Ok(format!("Closed tab {}; now in tab {}: {now}{}", tab_id(&closing), tab_id(&self.current.target), titled(&title)))
            }
            other => usage(format!("unknown browser tool `{other}`")),
        }
    }

    /// The page as Markdown, a chunk at a time from `start_from_char`, saying how to read on.
    async fn content(&mut self, args: &Value) -> Result<String, Fault> {
        let start = match args.get("start_from_char") {
            None | Some(Value::Null) => 0,
            Some(_) => int_arg(args, "start_from_char")?.max(0) as usize,
        };
        let page = self.eval(&format!("markdown({})", bool_arg(args, "extract_links"))).await?;
        let text = page["markdown"].as_str().unwrap_or_default();
        let total = text.chars().count();
        if start > 0 && start >= total {
            return usage(format!("`start_from_char` {start} is past the end: the page has {total} characters."));
        }
        let chunk: String = text.chars().skip(start).take(CONTENT_CHUNK).collect();
        let end = start + chunk.chars().count();
        let mut out = format!(
            "Content of {}{}, characters {start}-{end} of {total}:\n\n{chunk}",
            page["url"].as_str().unwrap_or_default(),
            titled(page["title"].as_str().unwrap_or_default())
        );
        if end < total {
            out.push_str(&format!("\n\n[{} more characters: call browser_get_content with start_from_char={end}.]", total - end));
        }
        Ok(out)
    }

    /// A CDP command to the current tab.
    async fn call(&self, method: &str, params: Value) -> Result<Value, Fault> {
        Ok(self.cdp.call(Some(&self.current.session), method, params).await?)
    }

    /// Evaluates `call` (of [`PAGE_JS`]'s functions) in the current tab.
    async fn eval(&self, call: &str) -> Result<Value, Fault> {
        let expression = format!("(() => {{\n{PAGE_JS}\nreturn {call};\n}})()");
        let r = self.call("Runtime.evaluate", json!({"expression": expression, "returnByValue": true})).await?;
        if let Some(e) = r.get("exceptionDetails") {
            let what = e["exception"]["description"].as_str().or(e["text"].as_str()).unwrap_or("an exception");
            return Err(Fault::Broken(format!("the page's script failed: {what}")));
        }
        Ok(r["result"]["value"].clone())
    }

    async fn location(&self) -> Result<(String, String), Fault> {
        let v = self.eval("[location.href, document.title]").await?;
        Ok((v[0].as_str().unwrap_or_default().to_owned(), v[1].as_str().unwrap_or_default().to_owned()))
    }

    /// Makes `target` the current tab, attaching to it the first time.
    async fn switch_to(&mut self, target: &str) -> Result<(), Fault> {
        let session = match self.sessions.get(target) {
            Some(s) => s.clone(),
            None => {
                let attached = self.cdp.call(None, "Target.attachToTarget", json!({"targetId": target, "flatten": true})).await?;
                let session = attached["sessionId"].as_str().unwrap_or_default().to_owned();
                self.cdp.call(Some(&session), "Page.enable", json!({})).await?;
                self.sessions.insert(target.to_owned(), session.clone());
                session
            }
        };
        self.current = Tab { target: target.to_owned(), session };
        Ok(())
    }

    async fn new_tab(&mut self) -> Result<(), Fault> {
        let made = self.cdp.call(None, "Target.createTarget", json!({"url": "about:blank"})).await?;
        let target = made["targetId"].as_str().unwrap_or_default().to_owned();
        self.switch_to(&target).await
    }

    /// Opens `url` in the current tab; `false` if it was still loading at [`LOAD_TIMEOUT`].
    async fn navigate(&self, url: &str) -> Result<bool, Fault> {
        let mut events = self.cdp.subscribe();
        let r = self.call("Page.navigate", json!({"url": url})).await?;
        if let Some(error) = r["errorText"].as_str().filter(|e| !e.is_empty()) {
            return usage(format!("Could not open {url}: {error}"));
        }
        // A move within the document (a `#fragment`) loads nothing.
        if r.get("loaderId").is_none() {
            return Ok(true);
        }
        Ok(self.settle(&mut events, LOAD_TIMEOUT).await)
    }

    /// Waits for the current tab's main frame to finish a load it starts within `start`, if it
    /// does; `false` if one started and had not finished at [`LOAD_TIMEOUT`].
    async fn settle(&self, events: &mut broadcast::Receiver<Event>, start: Duration) -> bool {
        let (session, frame) = (self.current.session.clone(), self.current.target.clone());
        let ours = |e: &Event, method: &str| {
            e.method == method && e.session.as_deref() == Some(session.as_str()) && e.params["frameId"].as_str() == Some(frame.as_str())
        };
        let begun = Instant::now();
        let mut loading = false;
        loop {
            let limit = if loading { LOAD_TIMEOUT } else { start };
            let Some(left) = limit.checked_sub(begun.elapsed()) else { return !loading };
            match tokio::time::timeout(left, events.recv()).await {
                Err(_) => return !loading,
                Ok(Err(broadcast::error::RecvError::Lagged(_))) => continue,
                Ok(Err(broadcast::error::RecvError::Closed)) => return true,
                Ok(Ok(e)) if ours(&e, "Page.frameStartedLoading") => loading = true,
                Ok(Ok(e)) if ours(&e, "Page.frameStoppedLoading") => return true,
                Ok(Ok(_)) => {}
            }
        }
    }

    async fn click(&mut self, index: i64, new_tab: bool) -> Result<String, Fault> {
        let at = self.eval(&format!("locate({index})")).await?;
        if at.is_null() {
            return usage(no_element(index));
        }
        let described = at["described"].as_str().unwrap_or_default().to_owned();
        if let (true, Some(href)) = (new_tab, at["href"].as_str()) {
            check_url(href)?;
            let href = href.to_owned();
            self.new_tab().await?;
            let loaded = self.navigate(&href).await?;
            return Ok(format!("Opened element {index} in a new tab, now the current one: {described}{}", still_loading(loaded)));
        }
        let before: Vec<String> = pages(&self.cdp.call(None, "Target.getTargets", json!({})).await?).into_iter().map(|t| t.0).collect();
        let mut events = self.cdp.subscribe();
        let (x, y) = (at["x"].as_f64().unwrap_or(0.0), at["y"].as_f64().unwrap_or(0.0));
        for kind in ["mouseMoved", "mousePressed", "mouseReleased"] {
            self.call("Input.dispatchMouseEvent", json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})).await?;
        }
        let mut loaded = self.settle(&mut events, SETTLE).await;
        let mut said = format!("Clicked element {index}: {described}");
        // A link with a target opens a tab of its own: the agent goes on there.
        let after = pages(&self.cdp.call(None, "Target.getTargets", json!({})).await?);
        if let Some((opened, ..)) = after.into_iter().find(|t| !before.contains(&t.0)) {
            self.switch_to(&opened).await?;
            loaded = self.until_loaded().await?;
            said.push_str(&format!("\nIt opened tab {}, now the current one.", tab_id(&opened)));
        }
        let (now, title) = self.location().await?;
        said.push_str(&format!("\nThe page is {now}{}{}", titled(&title), still_loading(loaded)));
        Ok(said)
    }

    /// Waits until the current tab's document has loaded (for a tab opened by the page).
    async fn until_loaded(&self) -> Result<bool, Fault> {
        let begun = Instant::now();
        while begun.elapsed() < LOAD_TIMEOUT {
            if self.eval("document.readyState").await? == "complete" {
                return Ok(true);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(false)
    }

    /// The page's URL, title, scroll and interactive elements, one per line as
    /// `[index]<tag ...>text</tag>`.
    async fn state(&self) -> Result<String, Fault> {
        let s = self.eval("index()").await?;
        let tabs = pages(&self.cdp.call(None, "Target.getTargets", json!({})).await?).len();
        let mut out = format!("URL: {}\nTitle: {}\n", s["url"].as_str().unwrap_or_default(), s["title"].as_str().unwrap_or_default());
        if tabs > 1 {
            out.push_str(&format!("Tabs: {tabs} open (browser_list_tabs lists them)\n"));
        }
        out.push_str(&format!(
            "Scroll: the view starts {} px down a page of {} px (the view is {} px high)\nInteractive elements:\n",
            s["scroll_y"], s["page_height"], s["viewport_height"]
        ));
        let elements: Vec<&str> = s["elements"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        if elements.is_empty() {
            out.push_str("(none)\n");
        }
        for line in elements {
            out.push_str(line);
            out.push('\n');
        }
        if let Some(more) = s["more"].as_u64().filter(|m| *m > 0) {
            out.push_str(&format!("... and {more} more (use browser_get_content to read the page)\n"));
        }
        Ok(out)
    }

    /// The answer of an action that worked: its output, the page, and a PNG of it.
    async fn respond(&self, output: String) -> BrowserResponse {
        let (url, title) = self.location().await.unwrap_or_default();
        let shot = self.call("Page.captureScreenshot", json!({"format": "png", "optimizeForSpeed": true})).await;
        let screenshot_png = shot.ok().and_then(|s| s["data"].as_str().map(str::to_owned));
        BrowserResponse { output, url, title, screenshot_png }
    }
}

fn titled(title: &str) -> String {
    if title.is_empty() { String::new() } else { format!(" ({title})") }
}

fn still_loading(loaded: bool) -> &'static str {
    if loaded { "" } else { "\n[The page was still loading after 20 s.]" }
}

fn no_element(index: i64) -> String {
    format!("There is no element {index} on this page: call browser_get_state for the current indices.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_web_urls_are_opened() {
        assert!(check_url("http://localhost:8000/form").is_ok());
        assert!(check_url("HTTPS://example.com").is_ok());
        for refused in ["file:///etc/passwd", "chrome://settings", "data:text/html,hi", "javascript:alert(1)", "about:blank", "http:///x"] {
            assert!(matches!(check_url(refused), Err(Fault::Usage(_))), "{refused}");
        }
        assert_eq!(tab_id("A6B6B8AA3840AFEEC796CBF53A9DA6A5"), "A6A5");
    }
}

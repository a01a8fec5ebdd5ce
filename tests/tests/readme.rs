#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! The README's walk-through, run as a newcomer runs it: the `sh` blocks of "A conversation with
//! curl" and "From a terminal", line by line in one bash, against `halyard up` and a scripted
//! LLM. Only what a reader fills in is filled in: the key (`KEY=...`), the ids the earlier
//! answers gave (`<task>`, `<conv>`, a share link's `<token>`), one of the alternatives a line offers (`a|b|c` runs each;
//! `[...]` options are left out); and `websocat`, which is not installed here, is a small
//! WebSocket client of the same command line. Any HTTP error fails the walk (`curl` is run with
//! `--fail-with-body`), and so does a failing CLI command.

use std::path::Path;
use std::process::Command;

use halyard_tests::harness::halyard_bin;
use halyard_tests::{Halyard, HalyardOptions, Reply, ScriptedLlm, init};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-key";

/// The `sh` block after the heading `## {section}`.
fn block(readme: &str, section: &str) -> Vec<String> {
    let start = readme.find(&format!("## {section}\n")).unwrap_or_else(|| panic!("the README has no section {section}"));
    let rest = &readme[start..];
    let open = rest.find("```sh\n").expect("an sh block") + "```sh\n".len();
    let body = &rest[open..open + rest[open..].find("```").expect("the block ends")];
    // Logical lines: continuations joined, comments and blank lines left out.
    let mut lines = Vec::new();
    let mut current = String::new();
    for line in body.lines() {
        let line = line.trim_end();
        if current.is_empty() && (line.trim_start().starts_with('#') || line.trim().is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => current.push_str(part),
            None => {
                current.push_str(line);
                lines.push(std::mem::take(&mut current));
            }
        }
    }
    lines
}

/// A line as a reader runs it: placeholders filled, optional parts left out, alternatives
/// each run.
fn as_run(line: &str) -> Vec<String> {
    let mut line = line
        .replace("KEY=...", "KEY=$WALK_KEY")
        .replace("<conv>", "$CONV")
        .replace("<task>", "$TASK")
        .replace("<token>", "$SHARE")
        .replace("127.0.0.1:3000", "$WALK_HOST");
    // A trailing `# ...` explains; it is not part of the command.
    if let Some(at) = line.find("   #") {
        line.truncate(at);
    }
    while let (Some(a), Some(b)) = (line.find(" ["), line.find(']')) {
        if b < a {
            break;
        }
        line.replace_range(a..=b, "");
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.get(1).filter(|w| words[0] == "halyard" && w.contains('|')) {
        Some(alternatives) => alternatives.split('|').map(|a| line.replacen(alternatives, a, 1)).collect(),
        None => vec![line.trim().to_owned()],
    }
}

/// The walk as one bash script: each command, then the ids its answer gave.
fn script(lines: &[String], settle: bool) -> String {
    let mut s = String::from(
        r#"set -euo pipefail
curl() { command curl -sS --fail-with-body "$@"; echo; }
websocat() { python3 "$WALK_WEBSOCAT" "$@"; }
# Waits until the conversation's agent is not busy (a person reads the answer before going on).
settle() {
  [ -n "${CONV:-}" ] || return 0
  for _ in $(seq 300); do
    state=$(command curl -sS "$WALK_API/conversations/$CONV" -H "Authorization: Bearer $WALK_KEY" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("state",""))')
    case "$state" in starting|running) sleep 0.1 ;; *) return 0 ;; esac
  done
  echo "the conversation stayed $state" >&2; return 1
}
# The ids an answer names.
ids() {
  local t c s
  t=$(printf '%s' "$1" | python3 -c 'import json,sys
for l in sys.stdin.read().splitlines():
    try: d=json.loads(l)
    except Exception: continue
    if isinstance(d, dict) and d.get("conversation_id") and d.get("status"): print(d["id"]); break' || true)
  c=$(printf '%s' "$1" | grep -oE '"conversation_id": ?"[0-9a-f-]{36}"|^conversation [0-9a-f-]{36}' | grep -oE '[0-9a-f-]{36}' | head -1 || true)
  s=$(printf '%s' "$1" | grep -oE '"token": ?"[0-9a-f-]{36}[.][0-9a-f]{64}"' | grep -oE '[0-9a-f-]{36}[.][0-9a-f]{64}' | head -1 || true)
  if [ -n "$t" ]; then TASK=$t; fi
  if [ -n "$c" ]; then CONV=$c; fi
  if [ -n "$s" ]; then SHARE=$s; fi
}
"#,
    );
    for line in lines {
        for command in as_run(line) {
            if settle {
                s.push_str("settle\n");
            }
            s.push_str(&format!("echo '$ '{}\n", shell_quote(&command)));
            // Setting variables is done in this shell; a command's answer is kept for its ids.
            let assigns = command.split_whitespace().next().is_some_and(|w| {
                w.split('=')
                    .next()
                    .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_uppercase() || c == '_') && w.contains('='))
            });
            if assigns {
                s.push_str(&format!("{command}\n"));
                continue;
            }
            s.push_str(&format!("out=$({command} 2>&1 </dev/null) || {{ printf '%s\\n' \"$out\"; echo FAILED; exit 1; }}\n"));
            s.push_str("printf '%s\\n' \"$out\"; ids \"$out\"\n");
        }
    }
    s
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `websocat -H "Authorization: Bearer ..." ws://...`: the upgrade by hand, then the text
/// frames for two seconds, one a line.
const WEBSOCAT: &str = r#"
import base64, os, socket, sys, urllib.parse
args = sys.argv[1:]
headers, url = [], None
while args:
    a = args.pop(0)
    if a == "-H": headers.append(args.pop(0))
    else: url = a
u = urllib.parse.urlsplit(url)
s = socket.create_connection((u.hostname, u.port or 80))
key = base64.b64encode(os.urandom(16)).decode()
req = f"GET {u.path}?{u.query} HTTP/1.1\r\nHost: {u.netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
req += "".join(h + "\r\n" for h in headers) + "\r\n"
s.sendall(req.encode())
buf = b""
while b"\r\n\r\n" not in buf: buf += s.recv(4096)
head, buf = buf.split(b"\r\n\r\n", 1)
if b" 101 " not in head.split(b"\r\n")[0]: sys.exit("websocat: " + head.split(b"\r\n")[0].decode())
s.settimeout(2)
try:
    while True:
        while len(buf) < 2: buf += s.recv(65536)
        n, at = buf[1] & 127, 2
        if n == 126: n, at = int.from_bytes(buf[2:4], "big"), 4
        elif n == 127: n, at = int.from_bytes(buf[2:10], "big"), 10
        while len(buf) < at + n: buf += s.recv(65536)
        if buf[0] & 15 == 1: print(buf[at:at + n].decode())
        buf = buf[at + n:]
except (socket.timeout, TimeoutError):
    pass
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_walk_through_works_as_written() {
    init();
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md")).unwrap();
    let curl_lines = block(&readme, "A conversation with curl");
    let cli_lines = block(&readme, "From a terminal");
    assert!(curl_lines.len() >= 10 && cli_lines.len() >= 6, "{curl_lines:#?}\n{cli_lines:#?}");

    let llm = ScriptedLlm::start().await;
    llm.fallback(|req: &Value| {
        let messages = req["messages"].as_array().cloned().unwrap_or_default();
        let last_user = messages.iter().rposition(|m| m["role"] == "user").unwrap_or(0);
        let asked = messages.get(last_user).map(|m| m["content"].to_string()).unwrap_or_default().to_lowercase();
        let step = messages[last_user..].iter().filter(|m| m["role"] == "tool").count();
        if asked.contains("what did you change") {
            return Reply::Text("I wrote hello.py, which prints hello.".into());
        }
        if asked.contains("hello.py") {
            return match step {
                0 => Reply::tool(
                    "file_editor",
                    json!({"command": "create", "path": "hello.py", "file_text": "print('hello')\n", "security_risk": "low"}),
                ),
                1 => Reply::tool("terminal", json!({"command": "python3 hello.py", "security_risk": "low"})),
                _ => Reply::finish("hello.py prints hello."),
            };
        }
        Reply::finish("Done.")
    });
    let h = Halyard::start(HalyardOptions::new(&llm.base_url));
    let dir = tempfile::tempdir().unwrap();

    let said = tokio::task::spawn_blocking({
        let (http, dir) = (h.http.clone(), dir.path().to_owned());
        move || walk(&http, &dir, &curl_lines, true)
    })
    .await
    .unwrap();
    // What a reader sees on the way: the start task, the agent's work, the live stream, the
    // answer to the question.
    assert!(said.contains("\"status\":\"WORKING\"") || said.contains("\"status\": \"WORKING\""), "{said}");
    assert!(said.contains("hello.py prints hello."), "the events show the agent's answer:\n{said}");
    assert!(said.contains("\"kind\":\"observation\""), "websocat showed the events:\n{said}");
    assert!(said.contains("I wrote hello.py"), "the question was answered:\n{said}");
    // It forks the conversation, goes on with the fork, and ends by deleting that.
    let convs: Vec<String> = said.lines().filter_map(|l| l.split("\"conversation_id\":\"").nth(1)).map(|r| r[..36].to_owned()).collect();
    let (first, last) = (convs.first().unwrap(), convs.last().unwrap());
    assert_ne!(first, last, "the walk forked the conversation:\n{said}");
    let (_, fork) = h.api(ALICE).get(&format!("/api/v1/conversations/{first}")).await;
    assert_eq!(fork["id"].as_str(), Some(first.as_str()), "the source is still there: {fork}");
    assert_eq!(h.api(ALICE).get(&format!("/api/v1/conversations/{last}")).await.0, 404, "the walk ends by deleting the fork");

    let said = tokio::task::spawn_blocking({
        let (http, dir) = (h.http.clone(), dir.path().to_owned());
        move || walk(&http, &dir, &cli_lines, false)
    })
    .await
    .unwrap();
    assert!(said.contains("agent › hello.py prints hello."), "`halyard run` showed the run:\n{said}");
    assert!(said.contains("deleted "), "`halyard rm` deleted it:\n{said}");
}

/// Runs `lines` in one bash against the gateway at `http`; what it printed.
fn walk(http: &str, dir: &Path, lines: &[String], settle: bool) -> String {
    let bin_dir = halyard_bin().parent().unwrap().to_owned();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let websocat = dir.join("websocat.py");
    std::fs::write(&websocat, WEBSOCAT).unwrap();
    let out = Command::new("bash")
        .arg("-c")
        .arg(script(lines, settle))
        .current_dir(dir)
        .env("PATH", path)
        .env("HOME", dir)
        .env("WALK_KEY", ALICE)
        .env("WALK_API", format!("{http}/api/v1"))
        .env("WALK_HOST", http.trim_start_matches("http://"))
        .env("WALK_WEBSOCAT", &websocat)
        .env("HALYARD_URL", http)
        .env("HALYARD_API_KEY", ALICE)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the walk stopped:\n{text}");
    text
}

#[test]
fn lines_are_run_as_a_reader_runs_them() {
    assert_eq!(as_run("halyard pause|resume <conv>"), ["halyard pause $CONV", "halyard resume $CONV"]);
    assert_eq!(as_run("halyard run \"x\" [--repo URL --branch B] [--spec S]"), ["halyard run \"x\""]);
    assert_eq!(as_run("halyard chat <conv>                 # continue"), ["halyard chat $CONV"]);
    assert_eq!(as_run("KEY=...; H=\"Authorization: Bearer $KEY\""), ["KEY=$WALK_KEY; H=\"Authorization: Bearer $KEY\""]);
}

/// `up.sh`'s development key (`infra/dev-key.sh`): made once, kept private in the data
/// directory, the same after a restart, printed each time, and its user an administrator.
#[tokio::test]
async fn the_development_key_is_kept_across_restarts_and_administers() {
    init();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned();
    let data = tempfile::tempdir().unwrap();
    let start = || {
        let out = Command::new("bash")
            .arg("-c")
            .arg(". infra/dev-key.sh; echo \"$HALYARD_API_KEYS|$HALYARD_ADMINS\"")
            .current_dir(&root)
            .env_remove("HALYARD_API_KEYS")
            .env_remove("HALYARD_ADMINS")
            .env("HALYARD_DATA_DIR", data.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        (String::from_utf8_lossy(&out.stdout).trim().to_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (first, said) = start();
    let (again, _) = start();
    assert_eq!(first, again, "a restart keeps the key");
    let (keys, admins) = first.split_once('|').unwrap();
    let key = keys.strip_prefix("dev:").expect("the user is dev");
    assert!(key.len() > 20 && said.contains(key), "the key is printed: {said}");
    assert_eq!(admins, "dev");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(data.path().join("dev-key")).unwrap().permissions().mode() & 0o777, 0o600);

    // With it, Halyard's first user administers: the README's `halyard admin users create`.
    let llm = ScriptedLlm::start().await;
    let mut opts = HalyardOptions::new(&llm.base_url).set("HALYARD_ADMINS", admins);
    opts.api_keys = keys.to_owned();
    let h = Halyard::start(opts);
    let (s, carol) = h.api(key).post("/api/v1/admin/users", json!({"name": "carol"})).await;
    assert_eq!(s, 201, "{carol}");
}

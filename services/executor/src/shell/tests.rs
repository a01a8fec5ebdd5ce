//! The shell's own behaviour, on a real bash: state kept between commands, exit codes, input,
//! interrupts, capped output and a shell that exits.

use super::*;
use halyard_protocol::executor::TRUNCATION_MARKER;

fn shell() -> (Shell, tempfile_dir::Dir) {
    let dir = tempfile_dir::Dir::new();
    (Shell::new(dir.0.clone(), 2000).unwrap(), dir)
}

mod tempfile_dir {
    pub struct Dir(pub std::path::PathBuf);
    impl Dir {
        pub fn new() -> Self {
            let p = std::env::temp_dir().join(format!("halyard-shell-test-{}", uuid::Uuid::new_v4()));
            std::fs::create_dir_all(&p).unwrap();
            Self(p)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn cmd(c: &str) -> ExecRequest {
    ExecRequest { command: c.into(), ..Default::default() }
}

#[tokio::test]
async fn state_persists_and_exit_codes_are_reported() {
    let (sh, _d) = shell();
    let r = sh.exec(cmd("mkdir sub && cd sub && export FOO=bar")).await.unwrap();
    assert_eq!(r.exit_code, Some(0));
    let r = sh.exec(cmd("echo $FOO; pwd")).await.unwrap();
    assert!(r.output.contains("bar"), "{r:?}");
    assert!(r.output.trim_end().ends_with("/sub"), "{r:?}");
    assert!(r.cwd.ends_with("/sub"));
    let r = sh.exec(cmd("echo oops >&2; false")).await.unwrap();
    assert_eq!(r.exit_code, Some(1));
    assert!(r.output.contains("oops"));
    let r = sh.exec(cmd("cat <<'EOF'\nmulti\nline\nEOF")).await.unwrap();
    assert_eq!(r.output, "multi\nline");
}

#[tokio::test]
async fn env_is_exported_without_a_trace_and_scoped_env_ends_with_its_command() {
    let (sh, _d) = shell();
    let env = |k: &str, v: &str| Some(BTreeMap::from([(k.to_owned(), v.to_owned())]));
    let r = sh.exec(ExecRequest { command: "echo \"[$TOKEN]\"".into(), env: env("TOKEN", "it's $x"), ..Default::default() }).await.unwrap();
    assert_eq!(r.output, "[it's $x]");
    // Exported: the next command has it. No file holding it is left behind.
    assert_eq!(sh.exec(cmd("echo \"[$TOKEN]\"")).await.unwrap().output, "[it's $x]");
    let left =
        std::fs::read_dir(&sh.scripts).unwrap().filter_map(Result::ok).filter(|e| e.file_name().to_string_lossy().starts_with("env-"));
    assert_eq!(left.count(), 0);
    // Scoped: only that command sees it, and its `cd` does not stay either.
    let scoped = ExecRequest { command: "cd /; echo \"[$ONCE]\"".into(), env: env("ONCE", "v1"), scoped: true, ..Default::default() };
    assert_eq!(sh.exec(scoped).await.unwrap().output, "[v1]");
    let r = sh.exec(cmd("echo \"[$ONCE]\"; pwd")).await.unwrap();
    assert!(r.output.starts_with("[]\n") && !r.output.ends_with("\n/"), "{r:?}");
    // A whole set that leaves TOKEN out (the secret was deleted) unsets it; the scoped
    // command's names were never exported, so they are not unset by anyone either.
    let r = sh.exec(ExecRequest { command: "echo \"[$TOKEN|$OTHER]\"".into(), env: env("OTHER", "o1"), ..Default::default() }).await;
    assert_eq!(r.unwrap().output, "[|o1]");
    let r = sh.exec(ExecRequest { command: "echo \"[${OTHER-unset}]\"".into(), env: Some(BTreeMap::new()), ..Default::default() }).await;
    assert_eq!(r.unwrap().output, "[unset]");
}

#[tokio::test]
async fn a_command_whose_caller_went_away_is_waited_for_by_the_next() {
    let (sh, _d) = shell();
    // The caller gives up mid-wait (a paused run drops its request).
    let dropped = tokio::time::timeout(Duration::from_millis(100), sh.exec(cmd("sleep 0.3; echo first"))).await;
    assert!(dropped.is_err());
    // The next command waits for it, as its caller would have, then runs.
    let started = std::time::Instant::now();
    let r = sh.exec(cmd("echo second")).await.unwrap();
    assert_eq!((r.exit_code, r.output.as_str()), (Some(0), "second"));
    assert!(started.elapsed() >= Duration::from_millis(150), "it did wait for the first");
    // Past its own timeout, it is refused as busy instead.
    let dropped = tokio::time::timeout(Duration::from_millis(100), sh.exec(cmd("sleep 5"))).await;
    assert!(dropped.is_err());
    let busy = sh.exec(ExecRequest { command: "echo third".into(), timeout_secs: Some(0.2), ..Default::default() }).await;
    assert!(matches!(busy, Err(ExecutorError::Busy(_))), "{busy:?}");
}

#[tokio::test]
async fn timeout_then_input_then_interrupt() {
    let (sh, _d) = shell();
    let r = sh.exec(ExecRequest { command: "read x; echo got:$x".into(), timeout_secs: Some(0.3), ..Default::default() }).await.unwrap();
    assert!(r.still_running && r.exit_code.is_none());
    let busy = sh.exec(cmd("echo no")).await;
    assert!(matches!(busy, Err(ExecutorError::Busy(_))));
    let r = sh.exec(ExecRequest { command: "hello".into(), is_input: true, ..Default::default() }).await.unwrap();
    assert_eq!(r.exit_code, Some(0));
    assert!(r.output.contains("got:hello"), "{r:?}");

    let r =
        sh.exec(ExecRequest { command: "sleep 30; echo finished".into(), timeout_secs: Some(0.3), ..Default::default() }).await.unwrap();
    assert!(r.still_running);
    let r = sh.exec(ExecRequest { command: "C-c".into(), is_input: true, ..Default::default() }).await.unwrap();
    assert_eq!(r.exit_code, Some(130), "{r:?}");
    assert!(!r.output.contains("finished"));
    // The shell survived the interrupt.
    let r = sh.exec(cmd("echo alive")).await.unwrap();
    assert_eq!(r.output, "alive");
}

#[tokio::test]
async fn output_is_capped_with_marker() {
    let (sh, _d) = shell();
    let r = sh.exec(cmd("seq 1 100000")).await.unwrap();
    assert!(r.truncated);
    assert!(r.output.contains(TRUNCATION_MARKER));
    assert!(r.output.starts_with("1\n2\n"));
    assert!(r.output.ends_with("100000"));
    assert!(r.output.len() < 2000 + 200);
}

#[tokio::test]
async fn exit_starts_a_new_shell() {
    let (sh, _d) = shell();
    // What the command printed before it ended the shell is reported, every time: the
    // exit can be seen before the pipe's last bytes are read.
    for round in 0..100 {
        let r = sh.exec(cmd(&format!("echo bye-{round}; exit 3"))).await.unwrap();
        assert_eq!(r.exit_code, Some(3));
        assert!(r.output.starts_with(&format!("bye-{round}\n")), "{}", r.output);
    }
    let r = sh.exec(cmd("echo again")).await.unwrap();
    assert_eq!(r.output, "again");
}

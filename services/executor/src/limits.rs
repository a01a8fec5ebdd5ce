//! Which of the sandbox's resource limits a command hit, in words for its observation. The
//! sandbox supervisor puts a process sandbox in control groups (see `halyard_sandbox::limits`);
//! their counters (OOM kills, refused forks) are read before and after each command, and a
//! change is said at the end of the command's output, with the limit it hit.
//!
//! Where the groups cannot be read (bubblewrap shows no `/sys`; containers have Docker's own
//! limits), nothing is said.

use std::path::{Path, PathBuf};

/// The counters of interest, and the limits they count against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub oom_kills: u64,
    pub refused_forks: u64,
    pub memory_limit: Option<u64>,
    pub pids_limit: Option<u64>,
}

/// The value after `key ` on a line of `text` (`oom_kill 3`).
fn field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
}

fn read(path: PathBuf) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// This process's counters, if its groups can be read.
pub fn counters() -> Option<Counters> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path_of = |controller: &str| {
        own.lines().find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
            controllers.split(',').any(|c| c == controller).then(|| path.trim_start_matches('/').to_owned())
        })
    };
    let root = Path::new("/sys/fs/cgroup");
    let limit = |s: Option<String>| s.and_then(|s| s.trim().parse::<u64>().ok());
    // v1: a hierarchy per controller.
    if let (Some(memory), Some(pids)) = (path_of("memory"), path_of("pids")) {
        let (m, p) = (root.join("memory").join(memory), root.join("pids").join(pids));
        if m.join("memory.oom_control").exists() {
            return Some(Counters {
                oom_kills: read(m.join("memory.oom_control")).and_then(|t| field(&t, "oom_kill ")).unwrap_or(0),
                refused_forks: read(p.join("pids.events")).and_then(|t| field(&t, "max ")).unwrap_or(0),
                memory_limit: limit(read(m.join("memory.limit_in_bytes"))),
                pids_limit: limit(read(p.join("pids.max"))),
            });
        }
    }
    // v2: one group.
    let unified = own.lines().find_map(|l| l.strip_prefix("0::"))?.trim_start_matches('/');
    for base in [root.to_owned(), root.join("unified")] {
        let g = base.join(unified);
        if let Some(events) = read(g.join("memory.events")) {
            return Some(Counters {
                oom_kills: field(&events, "oom_kill ").unwrap_or(0),
                refused_forks: read(g.join("pids.events")).and_then(|t| field(&t, "max ")).unwrap_or(0),
                memory_limit: limit(read(g.join("memory.max"))),
                pids_limit: limit(read(g.join("pids.max"))),
            });
        }
    }
    None
}

/// What a command that ran between `before` and `after` hit, in words.
pub fn note(before: Option<Counters>, after: Option<Counters>) -> Option<String> {
    let (b, a) = (before?, after?);
    let mut said = Vec::new();
    if a.oom_kills > b.oom_kills {
        let limit = a.memory_limit.map(|m| format!(" ({} MiB)", m >> 20)).unwrap_or_default();
        said.push(format!(
            "it reached the sandbox's memory limit{limit} and the largest process was killed; use less memory at once (smaller \
             batches, streaming) or ask for a sandbox spec with more"
        ));
    }
    if a.refused_forks > b.refused_forks {
        let limit = a.pids_limit.map(|p| format!(" ({p})")).unwrap_or_default();
        said.push(format!(
            "it reached the sandbox's process limit{limit}, so starting more processes was refused; end the ones it left behind"
        ));
    }
    (!said.is_empty()).then(|| format!("\n[Halyard: this command hit a resource limit: {}.]", said.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_hit_is_said_in_words_with_the_limit() {
        let before = Counters { oom_kills: 1, refused_forks: 0, memory_limit: Some(256 << 20), pids_limit: Some(64) };
        assert_eq!(note(Some(before), Some(before)), None);
        let after = Counters { oom_kills: 2, refused_forks: 5, ..before };
        let said = note(Some(before), Some(after)).unwrap();
        assert!(said.contains("memory limit (256 MiB)") && said.contains("process limit (64)"), "{said}");
        assert_eq!(note(None, Some(after)), None, "unreadable groups say nothing");
        assert_eq!(field("low 0\nmax 7\n", "max "), Some(7));
    }
}

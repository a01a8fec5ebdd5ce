//! What every result file records beside its figures: the commit, the date, the machine's
//! load, and figures as the median with min and max of their repetitions.

use serde::Serialize;
use serde_json::{Value, json};

/// Where and when a result was measured.
#[derive(Serialize)]
pub struct Context {
    pub commit: String,
    /// When the suite began (UTC, RFC 3339).
    pub date: String,
    /// `/proc/loadavg`'s 1, 5 and 15 minute figures when the suite began.
    pub load_average: Vec<f64>,
    pub cores: usize,
    /// How the machine was settled before the suite began ([`settle`]).
    pub settled: Settled,
}

/// The wait before a suite for what the previous one left running (containers stopping,
/// processes exiting, files being removed) to finish, and how busy the CPUs still were.
#[derive(Serialize, Clone, Copy, Default)]
pub struct Settled {
    pub waited_s: u64,
    /// The share of CPU time busy in the last second before the suite began (0 to 1).
    pub cpu_busy: f64,
}

/// The last [`settle`]'s reading, for the next [`Context::now`].
static SETTLED: std::sync::Mutex<Settled> = std::sync::Mutex::new(Settled { waited_s: 0, cpu_busy: 0.0 });

/// Waits (one second at a time, up to `patience`) until the CPUs are at most 15% busy, so that
/// a suite does not measure the previous one's teardown. The reading goes into the next
/// suite's [`Context`]; a machine that never settles is measured anyway, and says so there.
pub fn settle(patience: std::time::Duration) {
    let started = std::time::Instant::now();
    let mut busy = 1.0;
    while busy > 0.15 {
        let before = cpu_ticks();
        std::thread::sleep(std::time::Duration::from_secs(1));
        let after = cpu_ticks();
        let (total, idle) = (after.0.saturating_sub(before.0), after.1.saturating_sub(before.1));
        busy = if total == 0 { 0.0 } else { 1.0 - idle as f64 / total as f64 };
        if started.elapsed() >= patience {
            break;
        }
    }
    let reading = Settled { waited_s: started.elapsed().as_secs(), cpu_busy: (busy * 100.0).round() / 100.0 };
    if let Ok(mut last) = SETTLED.lock() {
        *last = reading;
    }
}

/// All CPUs' ticks since boot, in all and idle (with I/O wait), from `/proc/stat`.
fn cpu_ticks() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<u64> = text.lines().next().unwrap_or_default().split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
    (ticks.iter().take(8).sum(), idle)
}

impl Context {
    pub fn now() -> Self {
        let commit = std::process::Command::new("git")
            .args(["rev-parse", "HEAD"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_else(|| "unknown".into());
        let cores = std::thread::available_parallelism().map(usize::from).unwrap_or(1);
        let date = halyard_protocol::rfc3339(halyard_platform::now_ms());
        let settled = SETTLED.lock().map(|s| *s).unwrap_or_default();
        Self { commit, date, load_average: Self::load_average(), cores, settled }
    }

    pub fn load_average() -> Vec<f64> {
        std::fs::read_to_string("/proc/loadavg")
            .map(|s| s.split_whitespace().take(3).filter_map(|x| x.parse().ok()).collect())
            .unwrap_or_default()
    }
}

/// The median, min and max of `values`.
pub fn spread(values: impl IntoIterator<Item = f64>) -> Value {
    let mut v: Vec<f64> = values.into_iter().collect();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return Value::Null;
    }
    json!({"median": v[v.len() / 2], "min": v[0], "max": v[v.len() - 1], "n": v.len()})
}

/// Runs one repetition of a suite `reps` times in this invocation and keeps them all, with the
/// median, min and max of every figure they share (see [`figures`]).
pub async fn repeated<F, Fut>(suite: &str, reps: usize, once: F) -> anyhow::Result<Value>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Value>>,
{
    let context = Context::now();
    let runs = collect(suite, reps, once).await?;
    Ok(json!({"suite": suite, "context": context, "repetitions": reps, "figures": figures(&runs), "runs": runs}))
}

/// Runs one repetition of a suite `reps` times, saying each as it ends; all of them.
pub async fn collect<F, Fut>(suite: &str, reps: usize, mut once: F) -> anyhow::Result<Vec<Value>>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Value>>,
{
    let mut runs = Vec::new();
    for rep in 0..reps {
        let run = once(rep).await?;
        eprintln!("{suite} rep {rep}: {run}");
        runs.push(run);
    }
    Ok(runs)
}

/// Every number of the first run, by its path (`a.b.c`), as the spread of that number over the
/// runs that have it. Text and lists (samples, notes) stay in the runs only.
pub fn figures(runs: &[Value]) -> Value {
    fn leaves(v: &Value, path: String, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    leaves(x, if path.is_empty() { k.clone() } else { format!("{path}.{k}") }, out);
                }
            }
            Value::Number(_) => out.push(path),
            _ => {}
        }
    }
    let at = |v: &Value, path: &str| path.split('.').try_fold(v, |v, k| v.get(k)).and_then(Value::as_f64);
    let mut paths = Vec::new();
    if let Some(first) = runs.first() {
        leaves(first, String::new(), &mut paths);
    }
    let mut out = serde_json::Map::new();
    for path in paths {
        out.insert(path.clone(), spread(runs.iter().filter_map(|r| at(r, &path))));
    }
    Value::Object(out)
}

/// Runs one repetition `reps` times for this build (`once(None)`) and, given `baseline`
/// (another build's binary), for that one too (`once(Some(path))`), in turns: which goes first
/// alternates, so that neither always meets the machine as the other left it. Before each, the
/// machine settles for up to `settle` (what the last one left may still be tearing down). Each
/// run is said as it ends; this build's runs, then the baseline's.
pub async fn in_turns<'a, F, Fut>(
    suite: &str,
    reps: usize,
    baseline: Option<&'a std::path::Path>,
    patience: std::time::Duration,
    mut once: F,
) -> anyhow::Result<(Vec<Value>, Vec<Value>)>
where
    F: FnMut(Option<&'a std::path::Path>) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Value>>,
{
    let (mut runs, mut base_runs) = (Vec::new(), Vec::new());
    for rep in 0..reps {
        let mut order = vec![None];
        if let Some(bin) = baseline {
            order.push(Some(bin));
        }
        if rep % 2 == 1 {
            order.reverse();
        }
        for bin in order {
            if !patience.is_zero() {
                settle(patience);
            }
            let run = once(bin).await?;
            eprintln!("{suite} rep {rep}{}: {run}", if bin.is_some() { " (baseline)" } else { "" });
            if bin.is_some() { base_runs.push(run) } else { runs.push(run) }
        }
    }
    Ok((runs, base_runs))
}

//! A command's captured output: a head and a rolling tail in memory, so a command printing
//! gigabytes costs a bounded amount, with the end-of-command marker found and cut off.

use halyard_protocol::executor::TRUNCATION_MARKER;

/// Captured output: the first `head_cap` bytes, then a tail that keeps the last bytes.
#[derive(Default)]
pub(super) struct OutputBuf {
    head: Vec<u8>,
    tail: Vec<u8>,
    omitted: u64,
    head_cap: usize,
    tail_cap: usize,
}

impl OutputBuf {
    pub(super) fn new(cap: usize) -> Self {
        Self { head_cap: cap / 2, tail_cap: cap - cap / 2, ..Default::default() }
    }

    pub(super) fn push(&mut self, mut bytes: &[u8]) {
        if self.head.len() < self.head_cap && self.tail.is_empty() {
            let n = (self.head_cap - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        self.tail.extend_from_slice(bytes);
        // Keep up to twice the tail cap before trimming, so trimming is amortised. The marker
        // is short and always at the very end, so it is never trimmed away.
        if self.tail.len() > 2 * self.tail_cap + 4096 {
            let drop = self.tail.len() - self.tail_cap - 4096;
            self.tail.drain(..drop);
            self.omitted += drop as u64;
        }
    }

    /// Finds `marker` near the end; returns (code, cwd) and cuts the output there.
    pub(super) fn take_marker(&mut self, marker: &[u8]) -> Option<(i32, String)> {
        let (buf, in_tail) = if self.tail.is_empty() { (&self.head, false) } else { (&self.tail, true) };
        let start = find(buf, marker)?;
        let rest = &buf[start + marker.len()..];
        let end = find(rest, b"__\n")?;
        let fields = String::from_utf8_lossy(&rest[..end]).to_string();
        let (code, cwd) = fields.split_once('_')?;
        let code = code.parse().unwrap_or(-1);
        let cwd = cwd.to_owned();
        let mut cut = start;
        // The command's own final newline is not part of its output, as in a terminal.
        if cut > 0 && buf[cut - 1] == b'\n' {
            cut -= 1;
        }
        if in_tail {
            self.tail.truncate(cut)
        } else {
            self.head.truncate(cut)
        }
        Some((code, cwd))
    }

    /// The output so far as text, with a truncation marker if anything was dropped, and clears.
    pub(super) fn take(&mut self) -> (String, bool) {
        let total = self.head.len() as u64 + self.omitted + self.tail.len() as u64;
        let mut truncated = self.omitted > 0;
        let mut out = String::from_utf8_lossy(&self.head).into_owned();
        let mut tail = std::mem::take(&mut self.tail);
        // A tail longer than its cap is cut to its last `tail_cap` bytes.
        if tail.len() > self.tail_cap {
            let drop = tail.len() - self.tail_cap;
            tail.drain(..drop);
            self.omitted += drop as u64;
            truncated = true;
        }
        if truncated {
            out.push_str(&format!("\n{TRUNCATION_MARKER} {} of {total} bytes omitted]\n", self.omitted));
        }
        out.push_str(&String::from_utf8_lossy(&tail));
        self.head.clear();
        self.omitted = 0;
        (out, truncated)
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

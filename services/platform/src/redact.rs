//! Masks users' secret values. Whatever a conversation's agent runner appends (observations,
//! the agent's messages, tool arguments, errors) passes through a [`Redactor`] built from the
//! conversation's secrets, so a value the agent prints or writes is stored, served, delivered
//! and shown to the LLM as `<secret:NAME>`.
//!
//! Each value is looked for as it is and in the encodings an agent reaches for: base64
//! (standard and URL-safe, at each of the three byte alignments, so a value inside a longer
//! encoded text is found too), percent-encoding, and hex. One Aho-Corasick automaton finds
//! all of them in one pass, longest match first.
//!
//! Output cut mid-value (a command still running when its observation was taken, its value
//! printed in two writes on either side of the cut) is handled by [`Redactor::redact_edges`]:
//! a text that ends with the start of a value, or starts with its end, has that part masked.

use std::borrow::Cow;

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// Shortest value a user may store: shorter ones would mask ordinary text.
pub const MIN_SECRET_LEN: usize = 4;
/// Shortest encoded form looked for (a shorter one would match by chance).
const MIN_VARIANT_LEN: usize = 6;
/// Shortest part of a value masked at a cut (see [`Redactor::redact_edges`]).
const MIN_EDGE_LEN: usize = 3;

/// What `encodeURIComponent` and Python's `quote` leave alone besides letters and digits.
const URI_COMPONENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// Masks the values of a set of named secrets.
pub struct Redactor {
    automaton: Option<AhoCorasick>,
    /// The replacement of each pattern, by pattern index.
    replacements: Vec<String>,
    /// (name, value) of every secret, for the edges.
    secrets: Vec<(String, String)>,
    /// The longest form looked for, in bytes.
    longest: usize,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.secrets.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Redactor").field("secrets", &names).finish()
    }
}

impl Default for Redactor {
    fn default() -> Self {
        Self::new(Vec::new())
    }
}

/// The forms of `value` looked for.
fn variants(value: &str) -> Vec<String> {
    let bytes = value.as_bytes();
    let mut out = vec![value.to_owned()];
    for engine in [base64::engine::general_purpose::STANDARD_NO_PAD, base64::engine::general_purpose::URL_SAFE_NO_PAD] {
        for k in 0..3usize {
            let mut buf = vec![0u8; k];
            buf.extend_from_slice(bytes);
            let encoded = engine.encode(&buf);
            // Only the characters whose six bits all come from the value: the same whatever
            // surrounds it in a longer encoded text.
            let start = (8 * k).div_ceil(6);
            let end = (8 * (k + bytes.len()) / 6).min(encoded.len());
            if end > start {
                out.push(encoded[start..end].to_owned());
            }
        }
    }
    out.push(utf8_percent_encode(value, URI_COMPONENT).to_string());
    out.push(utf8_percent_encode(value, NON_ALPHANUMERIC).to_string());
    out.push(crate::keys::to_hex(bytes));
    out.push(crate::keys::to_hex(bytes).to_uppercase());
    let mut seen = std::collections::HashSet::new();
    out.into_iter().enumerate().filter(|(i, v)| (*i == 0 || v.len() >= MIN_VARIANT_LEN) && seen.insert(v.clone())).map(|(_, v)| v).collect()
}

impl Redactor {
    /// A redactor of `secrets` as (name, value); values shorter than [`MIN_SECRET_LEN`] are
    /// not looked for.
    pub fn new(secrets: Vec<(String, String)>) -> Self {
        let secrets: Vec<(String, String)> = secrets.into_iter().filter(|(_, v)| v.len() >= MIN_SECRET_LEN).collect();
        let mut patterns = Vec::new();
        let mut replacements = Vec::new();
        for (name, value) in &secrets {
            for v in variants(value) {
                patterns.push(v);
                replacements.push(format!("<secret:{name}>"));
            }
        }
        let automaton = if patterns.is_empty() {
            None
        } else {
            match AhoCorasick::builder().match_kind(MatchKind::LeftmostLongest).build(&patterns) {
                Ok(a) => Some(a),
                Err(e) => {
                    // Only a pattern set too large for memory fails; mask nothing less: the
                    // plain values one by one.
                    tracing::error!(error = %e, "cannot build the secret matcher");
                    AhoCorasick::builder()
                        .match_kind(MatchKind::LeftmostLongest)
                        .build(secrets.iter().map(|(_, v)| v.as_str()))
                        .ok()
                        .inspect(|_| replacements = secrets.iter().map(|(n, _)| format!("<secret:{n}>")).collect())
                }
            }
        };
        let longest = patterns.iter().map(String::len).max().unwrap_or(0);
        Self { automaton, replacements, secrets, longest }
    }

    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// The longest form of a value looked for, in bytes: a text's last `longest() - 1` bytes
    /// may hold the start of one that more text would complete.
    pub fn longest(&self) -> usize {
        self.longest
    }

    /// `text` with every value (in any of its forms) replaced by `<secret:NAME>`.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let Some(ac) = &self.automaton else { return Cow::Borrowed(text) };
        if !ac.is_match(text) {
            return Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len());
        let mut last = 0;
        for m in ac.find_iter(text) {
            out.push_str(&text[last..m.start()]);
            out.push_str(&self.replacements[m.pattern().as_usize()]);
            last = m.end();
        }
        out.push_str(&text[last..]);
        Cow::Owned(out)
    }

    /// [`Redactor::redact`], then the start of a value at the very end of `text` and the end of
    /// a value at its very start are masked too: for output cut mid-value.
    pub fn redact_edges(&self, text: &str) -> String {
        let mut text = self.redact(text).into_owned();
        for (name, value) in &self.secrets {
            let mask = format!("<secret:{name}>");
            // The longest proper prefix of the value that ends the text.
            if let Some(n) = (MIN_EDGE_LEN..value.len()).rev().find(|&n| value.is_char_boundary(n) && text.ends_with(&value[..n])) {
                text.truncate(text.len() - n);
                text.push_str(&mask);
            }
            // The longest proper suffix that starts it.
            if let Some(n) = (MIN_EDGE_LEN..value.len())
                .rev()
                .find(|&n| value.is_char_boundary(value.len() - n) && text.starts_with(&value[value.len() - n..]))
            {
                text.replace_range(..n, &mask);
            }
        }
        text
    }

    /// [`Redactor::redact_edges`] on each piece of `text` that `marker` lines cut apart (where
    /// output was dropped from the middle, a value may straddle the cut: its start ends one
    /// piece and its end starts the next).
    pub fn redact_cuts(&self, text: &str, marker: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find(marker) {
            // The marker's whole line stays as it is; the pieces around it are masked.
            let line_start = rest[..at].rfind('\n').map_or(0, |i| i + 1);
            let line_end = rest[at..].find('\n').map_or(rest.len(), |i| at + i + 1);
            // The newline before the marker is the cut's, not the output's.
            let piece = &rest[..line_start];
            let (piece, newline) = piece.strip_suffix('\n').map_or((piece, ""), |p| (p, "\n"));
            out.push_str(&self.redact_edges(piece));
            out.push_str(newline);
            out.push_str(&rest[line_start..line_end]);
            rest = &rest[line_end..];
        }
        out.push_str(&self.redact_edges(rest));
        out
    }

    /// Redacts every string inside a JSON value, in place: values and object keys alike (a
    /// value used as a key is as secret as anywhere else).
    pub fn redact_json(&self, value: &mut serde_json::Value) {
        use serde_json::Value;
        match value {
            Value::String(s) => {
                if let Cow::Owned(r) = self.redact(s) {
                    *s = r;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_json(v)),
            Value::Object(map) => {
                if map.keys().any(|k| matches!(self.redact(k), Cow::Owned(_))) {
                    let entries = std::mem::take(map);
                    for (k, v) in entries {
                        let k = self.redact(&k).into_owned();
                        // Two keys masked to one name: the later one is kept under a suffix.
                        let mut key = k.clone();
                        let mut n = 2;
                        while map.contains_key(&key) {
                            key = format!("{k}#{n}");
                            n += 1;
                        }
                        map.insert(key, v);
                    }
                }
                map.values_mut().for_each(|v| self.redact_json(v))
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redactor() -> Redactor {
        Redactor::new(vec![("API_TOKEN".into(), "tok-3f9a/b+c?d e".into()), ("SHORT".into(), "abc".into())])
    }

    #[test]
    fn masks_plain_and_encoded_values() {
        let r = redactor();
        let value = "tok-3f9a/b+c?d e";
        let b64 = base64::engine::general_purpose::STANDARD.encode(value);
        let url = utf8_percent_encode(value, URI_COMPONENT).to_string();
        let hex = crate::keys::to_hex(value.as_bytes());
        for text in [format!("x {value} y"), format!("b64: {b64}\n"), format!("q={url}&z=1"), hex.clone()] {
            let out = r.redact(&text);
            assert!(out.contains("<secret:API_TOKEN>"), "{text} -> {out}");
            assert!(!out.contains(value) && !out.contains(&b64[..b64.len() - 4]) && !out.contains(&hex), "{out}");
        }
        // Inside a longer base64 text, at any alignment.
        for prefix in ["", "a", "ab", "abc"] {
            let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{prefix}{value} and more"));
            let out = r.redact(&encoded);
            assert!(out.contains("<secret:API_TOKEN>"), "{prefix:?}: {encoded} -> {out}");
        }
        // Too-short values are not looked for (they would mask ordinary words).
        assert_eq!(r.redact("abcdef"), "abcdef");
    }

    #[test]
    fn masks_values_cut_at_the_edges() {
        let r = redactor();
        assert_eq!(r.redact_edges("output: tok-3f9"), "output: <secret:API_TOKEN>");
        assert_eq!(r.redact_edges("a/b+c?d e\ndone"), "<secret:API_TOKEN>\ndone");
        // Two letters are no evidence.
        assert_eq!(r.redact_edges("to"), "to");
    }

    #[test]
    fn walks_json() {
        let r = redactor();
        let mut v = serde_json::json!({"command": "echo tok-3f9a/b+c?d e", "n": 1, "list": ["tok-3f9a/b+c?d e"]});
        r.redact_json(&mut v);
        assert_eq!(v, serde_json::json!({"command": "echo <secret:API_TOKEN>", "n": 1, "list": ["<secret:API_TOKEN>"]}));
        // Keys as well as values.
        let mut v = serde_json::json!({"env": {"tok-3f9a/b+c?d e": "x", "plain": {"k tok-3f9a/b+c?d e": 1}}});
        r.redact_json(&mut v);
        assert_eq!(v, serde_json::json!({"env": {"<secret:API_TOKEN>": "x", "plain": {"k <secret:API_TOKEN>": 1}}}));
    }

    #[test]
    fn masks_values_that_straddle_a_cut_in_the_middle() {
        let r = redactor();
        let marker = "[... output truncated by Halyard:";
        let text = format!("start\nvalue: tok-3f9a\n{marker} 10 of 99 bytes omitted]\n/b+c?d e rest\nend tok-3f9");
        let out = r.redact_cuts(&text, marker);
        assert!(!out.contains("tok-3f9a") && !out.contains("/b+c?d e"), "{out}");
        assert!(out.contains(&format!("{marker} 10 of 99 bytes omitted]")) && out.contains(" rest"), "{out}");
        assert_eq!(out.matches("<secret:API_TOKEN>").count(), 3, "{out}");
    }
}

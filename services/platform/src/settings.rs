//! Settings read from the environment, each declared once beside the configuration it sets: a
//! [`Setting`] is a name (after `HALYARD_`), its default and meaning in words, and how its value
//! is checked and applied to one part of the configuration. The tables live with their parts ([`crate::config`]'s modules,
//! [`crate::llm::config`]); the loader walks them, and the list of names every part accepts (for
//! refusing a typo with the nearest name) and the settings tables in `services/platform/README.md`
//! ([`crate::config::settings_doc`]) are made from them, so a setting is spelled once.
//!
//! The parsers here say what was expected in the words the error shows the operator.

use std::str::FromStr;

/// One environment setting of a configuration part `T`.
pub struct Setting<T: 'static> {
    /// The variable's name without `HALYARD_`.
    pub name: &'static str,
    /// Its default, as the documentation shows it: a value in backticks (a test applies it and
    /// finds the configuration's default unchanged), or words (`(none)`).
    pub default: &'static str,
    /// What it sets, in words (Markdown), for the documentation's table.
    pub doc: &'static str,
    /// Checks the value and sets it; `Err` says what was expected.
    pub apply: fn(&mut T, &str) -> Result<(), String>,
}

/// Applies `value` to `target` if `table` has `name`: `None` when it has not.
pub fn apply<T>(table: &[Setting<T>], target: &mut T, name: &str, value: &str) -> Option<Result<(), String>> {
    table.iter().find(|s| s.name == name).map(|s| (s.apply)(target, value))
}

/// A setting in a table: `set!("NAME", "`30`", "what it does", |c, v| c.field = number(v,
/// "seconds")?)`.
macro_rules! set {
    ($name:literal, $default:literal, $doc:literal, |$c:ident, $v:ident| $body:expr) => {
        $crate::settings::Setting {
            name: $name,
            default: $default,
            doc: $doc,
            apply: |$c, $v| {
                $body;
                Ok(())
            },
        }
    };
}
pub(crate) use set;

/// A number, or what was expected (`seconds`, `a count`...).
pub fn number<N: FromStr>(v: &str, what: &str) -> Result<N, String> {
    v.parse().map_err(|_| format!("expected {what}"))
}

/// A number of at least 1.
pub fn positive<N: FromStr + PartialOrd + From<u8>>(v: &str, what: &str) -> Result<N, String> {
    v.parse().ok().filter(|n| *n >= N::from(1)).ok_or_else(|| format!("expected {what}, at least 1"))
}

/// `true`/`false` (or `1`/`0`, `yes`/`no`, `on`/`off`).
pub fn boolean(v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err("expected true or false".into()),
    }
}

/// One of `options`.
pub fn one_of(v: &str, options: &[&str]) -> Result<String, String> {
    if options.contains(&v) {
        return Ok(v.to_owned());
    }
    let quoted: Vec<String> = options.iter().map(|o| format!("`{o}`")).collect();
    let (last, rest) = quoted.split_last().map_or((String::new(), &[][..]), |(l, r)| (l.clone(), r));
    Err(if rest.is_empty() { format!("expected {last}") } else { format!("expected {} or {last}", rest.join(", ")) })
}

/// An http(s) URL without its trailing `/` (empty when `may_be_empty` and it is); else `expected`.
pub fn url(v: &str, may_be_empty: bool, expected: &str) -> Result<String, String> {
    if (may_be_empty && v.is_empty()) || v.starts_with("http://") || v.starts_with("https://") {
        return Ok(v.trim_end_matches('/').to_owned());
    }
    Err(format!("expected {expected}"))
}

/// A comma-separated list, each item trimmed, empty ones left out.
pub fn list(v: &str) -> Vec<String> {
    v.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect()
}

/// A comma-separated list of network classes (`loopback`, `private`, `link-local`).
pub fn network_classes(v: &str) -> Result<Vec<String>, String> {
    let allow = list(v);
    match allow.iter().find(|a| !["loopback", "private", "link-local"].contains(&a.as_str())) {
        Some(bad_one) => Err(format!("unknown network class {bad_one:?}; use loopback, private, link-local")),
        None => Ok(allow),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsers_say_what_they_expected() {
        assert_eq!(number::<u64>("x", "seconds"), Err("expected seconds".into()));
        assert_eq!(positive::<u64>("0", "days"), Err("expected days, at least 1".into()));
        assert_eq!(one_of("x", &["own", "host"]), Err("expected `own` or `host`".into()));
        assert_eq!(one_of("a", &["a", "b", "c"]), Ok("a".into()));
        assert_eq!(one_of("x", &["a", "b", "c"]), Err("expected `a`, `b` or `c`".into()));
        assert_eq!(url("https://x.example/", false, "a URL"), Ok("https://x.example".into()));
        assert!(url("", false, "a URL").is_err() && url("", true, "a URL").is_ok());
        assert_eq!(list(" a, ,b "), vec!["a".to_owned(), "b".to_owned()]);
        assert!(network_classes("loopback,lan").is_err());
        assert_eq!(boolean("Yes"), Ok(true));
    }
}

//! The settings tables of `services/platform/README.md`, made from the parts' own tables
//! ([`crate::settings::Setting`]: name, default, meaning), so the documentation cannot drift from
//! what the loader reads. A test compares the README with [`settings_doc`] (and rewrites it with
//! `HALYARD_BLESS=1`), and checks every default shown as a value against the configuration's
//! default.

use serde::Serialize;

use super::Tables;
use crate::settings::Setting;

/// The tables in Markdown, as [`super::each_table`] hands them over.
struct Doc(String);

impl Tables for Doc {
    /// One part's table: its heading and rows.
    fn table<T: Default + Serialize>(&mut self, heading: &'static str, settings: &'static [Setting<T>]) {
        let out = &mut self.0;
        out.push_str(&format!("### {heading}\n\n| variable | default | meaning |\n|---|---|---|\n"));
        // Settings that share a meaning (a user and its password, retries and their delay) are
        // one row, as they are declared one after the other.
        let mut i = 0;
        while i < settings.len() {
            let mut j = i + 1;
            while j < settings.len() && settings[j].doc == settings[i].doc {
                j += 1;
            }
            let group = &settings[i..j];
            let names: Vec<String> = group.iter().map(|s| format!("`HALYARD_{}`", s.name)).collect();
            let defaults: Vec<&str> = group.iter().map(|s| s.default).collect();
            let default = if defaults.iter().all(|d| *d == defaults[0]) { defaults[0].to_owned() } else { defaults.join(" / ") };
            out.push_str(&format!("| {} | {} | {} |\n", names.join(" / "), default, group[0].doc));
            i = j;
        }
        out.push('\n');
    }
}

/// Every part's settings table, in Markdown.
pub fn settings_doc() -> String {
    let mut doc = Doc(String::new());
    super::each_table(&mut doc);
    doc.0.trim_end().to_owned() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEGIN: &str =
        "<!-- settings: made by `config::doc::settings_doc`; HALYARD_BLESS=1 cargo test -p halyard-platform settings_doc -->\n";
    const END: &str = "<!-- settings end -->";

    /// The README's tables are the ones the code makes.
    #[test]
    fn the_readme_shows_the_settings_settings_doc_makes() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
        let readme = std::fs::read_to_string(&path).unwrap();
        let (Some(start), Some(end)) = (readme.find(BEGIN), readme.find(END)) else {
            panic!("services/platform/README.md has no settings markers ({BEGIN:?} ... {END:?})");
        };
        let made = format!("{BEGIN}\n{}\n", settings_doc());
        if readme[start..end] != made {
            if std::env::var_os("HALYARD_BLESS").is_some() {
                std::fs::write(&path, format!("{}{made}{}", &readme[..start], &readme[end..])).unwrap();
                return;
            }
            panic!(
                "services/platform/README.md's settings tables differ from the code's: HALYARD_BLESS=1 cargo test -p halyard-platform settings_doc"
            );
        }
    }

    /// A default shown as a value (`` `30` ``) is the configuration's default: applied to it, it
    /// changes nothing.
    struct Defaults {
        wrong: Vec<String>,
        shown: usize,
    }

    impl Tables for Defaults {
        fn table<T: Default + Serialize>(&mut self, _: &'static str, settings: &'static [Setting<T>]) {
            let default = serde_json::to_value(T::default()).unwrap();
            for s in settings {
                let Some(value) = s.default.strip_prefix('`').and_then(|d| d.strip_suffix('`')).filter(|v| !v.contains('`')) else {
                    continue;
                };
                self.shown += 1;
                let mut c = T::default();
                match (s.apply)(&mut c, value) {
                    Ok(()) if serde_json::to_value(&c).unwrap() == default => {}
                    Ok(()) => self.wrong.push(format!("HALYARD_{}: `{value}` is not the default", s.name)),
                    Err(e) => self.wrong.push(format!("HALYARD_{}: `{value}` is refused: {e}", s.name)),
                }
            }
        }
    }

    #[test]
    fn every_default_shown_is_the_default() {
        let mut check = Defaults { wrong: Vec::new(), shown: 0 };
        super::super::each_table(&mut check);
        assert!(check.wrong.is_empty(), "defaults in the settings tables that are not the code's:\n{}", check.wrong.join("\n"));
        // The check reads values: most settings show one.
        assert!(check.shown > 50, "{}", check.shown);
    }
}

//! The settings tables of `services/platform/README.md`, made from the parts' own tables
//! ([`crate::settings::Setting`]: name, default, meaning), so the documentation cannot drift from
//! what the loader reads. A test compares the README with [`settings_doc`] (and rewrites it with
//! `HALYARD_BLESS=1`), and checks every default shown as a value against the configuration's
//! default.

use crate::settings::Setting;

/// One part's table: its heading and rows.
fn table<T>(heading: &str, settings: &[Setting<T>], out: &mut String) {
    out.push_str(&format!("### {heading}\n\n| variable | default | meaning |\n|---|---|---|\n"));
    // Settings that share a meaning (a user and its password, retries and their delay) are one
    // row, as they are declared one after the other.
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

/// Every part's settings table, in Markdown.
pub fn settings_doc() -> String {
    let mut out = String::new();
    table("The process, its bus and its files", super::SETTINGS, &mut out);
    table("The operator's LLM", crate::llm::config::SETTINGS, &mut out);
    table("Agent runners", super::agent::SETTINGS, &mut out);
    table("Sandboxes", super::sandbox::SETTINGS, &mut out);
    table("The gateway", super::gateway::SETTINGS, &mut out);
    table("Webhooks", super::webhooks::SETTINGS, &mut out);
    table("Automations", super::automations::SETTINGS, &mut out);
    table("MCP servers", super::mcp::SETTINGS, &mut out);
    table("Titles", super::titles::SETTINGS, &mut out);
    out.trim_end().to_owned() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;

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
    fn defaults_hold<T: Default + Serialize>(settings: &[Setting<T>], wrong: &mut Vec<String>) {
        let default = serde_json::to_value(T::default()).unwrap();
        for s in settings {
            let Some(value) = s.default.strip_prefix('`').and_then(|d| d.strip_suffix('`')).filter(|v| !v.contains('`')) else {
                continue;
            };
            let mut c = T::default();
            match (s.apply)(&mut c, value) {
                Ok(()) if serde_json::to_value(&c).unwrap() == default => {}
                Ok(()) => wrong.push(format!("HALYARD_{}: `{value}` is not the default", s.name)),
                Err(e) => wrong.push(format!("HALYARD_{}: `{value}` is refused: {e}", s.name)),
            }
        }
    }

    #[test]
    fn every_default_shown_is_the_default() {
        let mut wrong = Vec::new();
        defaults_hold(super::super::SETTINGS, &mut wrong);
        defaults_hold(crate::llm::config::SETTINGS, &mut wrong);
        defaults_hold(super::super::agent::SETTINGS, &mut wrong);
        defaults_hold(super::super::sandbox::SETTINGS, &mut wrong);
        defaults_hold(super::super::gateway::SETTINGS, &mut wrong);
        defaults_hold(super::super::webhooks::SETTINGS, &mut wrong);
        defaults_hold(super::super::automations::SETTINGS, &mut wrong);
        defaults_hold(super::super::mcp::SETTINGS, &mut wrong);
        defaults_hold(super::super::titles::SETTINGS, &mut wrong);
        assert!(wrong.is_empty(), "defaults in the settings tables that are not the code's:\n{}", wrong.join("\n"));
        // The check reads values: most settings show one.
        let shown = super::super::SETTINGS.iter().filter(|s| s.default.starts_with('`')).count();
        assert!(shown > 5, "{shown}");
    }
}

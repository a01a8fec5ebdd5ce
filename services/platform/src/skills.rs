//! Skills as OpenHands and AgentSkills write them: Markdown with an optional YAML frontmatter
//! (`name`, `description`, `triggers`, `type`).
//!
//! - A file with `triggers` is a knowledge skill: it enters the context when a user message
//!   contains one of them.
//! - A folder's `SKILL.md` (AgentSkills) is offered by name and description; its body is loaded
//!   on demand.
//! - Anything else (`type: repo`, `AGENTS.md`, a file without frontmatter) is always in the
//!   system prompt.
//!
//! Read by the conversation manager (global and repository skills) and the gateway (listing
//! the global ones); parsing only, no knowledge of either.

use std::path::Path;

use halyard_protocol::event::{Skill, SkillKind};
use serde::Deserialize;

/// The frontmatter fields Halyard reads; others (`version`, `agent`, `license`, `metadata`...)
/// are allowed and ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Frontmatter {
    name: Option<String>,
    description: Option<String>,
    #[serde(deserialize_with = "one_or_many")]
    triggers: Vec<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
}

/// `triggers: docker` and `triggers: [docker, container]` both mean a list.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
        Nothing(()),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
        OneOrMany::Nothing(()) => Vec::new(),
    })
}

/// Splits `---\n<yaml>\n---\n<body>`; a text without that opening has no frontmatter.
pub(crate) fn split_frontmatter(text: &str) -> Option<(&str, &str)> {
    let rest = text.strip_prefix("---\n").or_else(|| text.strip_prefix("---\r\n"))?;
    let end = rest.find("\n---")?;
    let yaml = &rest[..end];
    let after = &rest[end + 4..];
    let body = after.split_once('\n').map_or("", |(_, b)| b);
    Some((yaml, body))
}

/// Parses one skill file. `default_name` names it when the frontmatter does not (the file name
/// without `.md`, or the folder of a `SKILL.md`); `folder_skill` says it is a `SKILL.md`. A
/// frontmatter that is not valid YAML is an error that names the file's problem.
pub fn parse(default_name: &str, text: &str, folder_skill: bool) -> Result<Skill, String> {
    let (front, body) = match split_frontmatter(text) {
        Some((yaml, body)) => {
            let front: Frontmatter = if yaml.trim().is_empty() {
                Frontmatter::default()
            } else {
                serde_yaml_ng::from_str(yaml).map_err(|e| format!("invalid frontmatter: {e}"))?
            };
            (front, body)
        }
        None => (Frontmatter::default(), text),
    };
    let triggers: Vec<String> = front.triggers.into_iter().map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()).collect();
    let kind = if folder_skill {
        SkillKind::AgentSkill
    } else if !triggers.is_empty() && front.kind.as_deref() != Some("repo") {
        SkillKind::Knowledge
    } else {
        SkillKind::Always
    };
    if kind == SkillKind::AgentSkill && front.description.as_deref().is_none_or(|d| d.trim().is_empty()) {
        return Err("a SKILL.md needs a `description` in its frontmatter (the agent chooses skills by it)".into());
    }
    Ok(Skill {
        name: front.name.filter(|n| !n.trim().is_empty()).unwrap_or_else(|| default_name.to_owned()),
        content: body.trim().to_owned(),
        kind,
        triggers: if kind == SkillKind::Knowledge { triggers } else { Vec::new() },
        description: front.description.map(|d| d.trim().to_owned()),
    })
}

/// The skills of a directory: every `*.md` but `README.md`, and every `<folder>/SKILL.md`,
/// sorted by name. A file that cannot be read or parsed is left out with a warning, so one bad
/// file does not take the others down.
pub fn load_dir(dir: &Path) -> Vec<Skill> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut skills = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let file_name = entry.file_name().to_string_lossy().into_owned();
        let (name, file, folder) = if path.is_dir() {
            (file_name.clone(), path.join("SKILL.md"), true)
        } else if file_name.ends_with(".md") && file_name != "README.md" {
            (file_name.trim_end_matches(".md").to_owned(), path.clone(), false)
        } else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(&file) else {
            if !folder {
                tracing::warn!(path = %file.display(), "cannot read skill file; skipped");
            }
            continue;
        };
        match parse(&name, &text, folder) {
            Ok(skill) => skills.push(skill),
            Err(e) => tracing::warn!(path = %file.display(), error = %e, "skipping skill"),
        }
    }
    skills.sort_by(|a, b| a.name.cmp(&b.name));
    skills
}

/// The first trigger of `skill` that `text` contains, ignoring case.
pub fn trigger_in<'a>(skill: &'a Skill, text: &str) -> Option<&'a str> {
    let text = text.to_lowercase();
    skill.triggers.iter().find(|t| text.contains(&t.to_lowercase())).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frontmatter_decides_the_kind() {
        let k = parse("x", "---\nname: docker\ntype: knowledge\ntriggers:\n- docker\n- Container\n---\nUse compose.\n", false).unwrap();
        assert_eq!((k.name.as_str(), k.kind, k.content.as_str()), ("docker", SkillKind::Knowledge, "Use compose."));
        assert_eq!(trigger_in(&k, "start a CONTAINER please"), Some("Container"));
        assert_eq!(trigger_in(&k, "hello"), None);
        let one = parse("x", "---\ntriggers: deploy\n---\nBody", false).unwrap();
        assert_eq!(one.triggers, ["deploy"]);
        let repo = parse("AGENTS", "---\nname: repo\ntype: repo\ntriggers: [x]\n---\nAlways.", false).unwrap();
        assert_eq!(repo.kind, SkillKind::Always);
        let plain = parse("habits", "# Habits\nBe brief.", false).unwrap();
        assert_eq!((plain.name.as_str(), plain.kind), ("habits", SkillKind::Always));
        let folder = parse("pdf", "---\nname: pdf\ndescription: Read PDFs.\nlicense: MIT\n---\nUse pdftotext.", true).unwrap();
        assert_eq!((folder.kind, folder.description.as_deref()), (SkillKind::AgentSkill, Some("Read PDFs.")));
        assert!(parse("pdf", "no frontmatter", true).unwrap_err().contains("description"));
        assert!(parse("bad", "---\ntriggers: [unclosed\n---\nx", false).unwrap_err().contains("invalid frontmatter"));
    }
}

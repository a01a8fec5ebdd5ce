//! What a tool call produces ([`ToolOutcome`], [`Rich`]) and the small argument helpers every
//! tool module shares: the ground the tool modules stand on, importing none of them.

use serde_json::{Value, json};

/// The `security_risk` argument of the tools that act (OpenHands' wording).
pub(super) fn security_risk() -> Value {
    json!({"type": "string", "enum": ["low", "medium", "high"], "description": "The risk of this action: `low` for \
        read-only or workspace-local changes, `medium` for changes beyond the workspace or network use, `high` for \
        destructive or irreversible actions or anything touching credentials."})
}

/// A result with pictures: a browser step's page and screenshot, or a Python cell's plots.
#[derive(Debug, Default, PartialEq)]
pub struct Rich {
    pub content: String,
    pub is_error: bool,
    /// A browser step's page afterwards.
    pub url: Option<String>,
    /// A browser step's screenshot, a PNG in base64.
    pub screenshot_png: Option<String>,
    /// A cell's images, PNGs in base64.
    pub images: Vec<String>,
    /// The model is to see them (the screenshot it asked for; a cell's plots).
    pub show: bool,
}

/// What a tool call produced.
#[derive(Debug, PartialEq)]
pub enum ToolOutcome {
    Observation {
        content: String,
        exit_code: Option<i32>,
        is_error: bool,
    },
    /// A result with pictures: a browser step's, or a Python cell's.
    Rich(Rich),
    Finish {
        message: String,
        /// Its typed result (the conversation's `result_schema`), as the model gave it.
        result: Option<Value>,
    },
}

pub(super) fn error(content: impl Into<String>) -> ToolOutcome {
    ToolOutcome::Observation { content: content.into(), exit_code: None, is_error: true }
}

pub(super) fn str_arg(args: &Value, name: &str) -> Option<String> {
    args.get(name).and_then(Value::as_str).map(str::to_owned)
}

/// Booleans arrive as `true` or, from OpenHands-tuned prompts, as `"true"`.
pub(super) fn bool_arg(args: &Value, name: &str) -> bool {
    match args.get(name) {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => s.eq_ignore_ascii_case("true"),
        _ => false,
    }
}

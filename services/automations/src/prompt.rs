//! The first message of an automation's conversation: the automation's `prompt` (or its kind's
//! default) with the triggering event's fields put in. `{{title}}`, `{{body}}`, `{{comment}}`,
//! `{{url}}` and `{{payload}}` (the whole request, as JSON); a placeholder the event has no value
//! for becomes empty, and text that only looks like one is left alone.

use serde_json::Value;

/// What an event offers a template.
#[derive(Clone, Debug, Default)]
pub struct Fields {
    pub title: String,
    pub body: String,
    pub comment: String,
    pub url: String,
    /// The request, pretty-printed.
    pub payload: String,
}

impl Fields {
    /// The fields of a generic JSON request (the `webhook` kind): its top-level `title`, `body`,
    /// `comment` and `url` where they are strings.
    pub fn of_json(payload: &Value) -> Self {
        let text = |k: &str| payload.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
        Self {
            title: text("title"),
            body: text("body"),
            comment: text("comment"),
            url: text("url"),
            payload: serde_json::to_string_pretty(payload).unwrap_or_default(),
        }
    }
}

/// The default template of a kind, for automations that set none.
pub fn default_template(kind: &str) -> &'static str {
    match kind {
        "webhook" => "A program sent this request to the automation's hook. Do what it asks.\n\n```json\n{{payload}}\n```",
        // A schedule has nothing to say by itself; creating one without a prompt is refused.
        _ => "{{payload}}",
    }
}

/// `template` with `fields` put in.
pub fn render(template: &str, fields: &Fields) -> String {
    let mut out = String::with_capacity(template.len() + fields.payload.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[start..]);
            return out;
        };
        let value = match after[..end].trim() {
            "title" => Some(&fields.title),
            "body" => Some(&fields.body),
            "comment" => Some(&fields.comment),
            "url" => Some(&fields.url),
            "payload" => Some(&fields.payload),
            _ => None,
        };
        match value {
            Some(v) => out.push_str(v),
            None => out.push_str(&rest[start..start + 2 + end + 2]),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_put_in_and_the_rest_is_left_alone() {
        let fields = Fields::of_json(&serde_json::json!({"title": "Bump deps", "body": "all of them", "n": 3}));
        assert_eq!(render("{{title}}: {{ body }} ({{url}})", &fields), "Bump deps: all of them ()");
        assert_eq!(render("{{unknown}} and {{title", &fields), "{{unknown}} and {{title");
        assert!(render(default_template("webhook"), &fields).contains("\"n\": 3"));
    }
}

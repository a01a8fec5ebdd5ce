//! Typed results and their checks (a start's `result_schema`, `verify`): whether a schema is
//! one Halyard takes ([`check_schema`]: JSON Schema, with no reference to a file or a URL,
//! which would make the agent runner or the gateway fetch), whether a result matches it
//! ([`validate`]), and whether a start's checks are well formed ([`check_checks`]). The gateway
//! checks a start with them; the agent runner checks the agent's `result` and a judge's verdict.

use halyard_protocol::event::{Check, Checks};
use serde_json::Value;

/// The largest schema a start may carry (its JSON).
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// Checks one start may name.
pub const MAX_CHECKS: usize = 10;
/// Times the agent may finish and be checked, at most.
pub const MAX_ATTEMPTS: u32 = 10;

/// Why `schema` is not a schema results can be checked against, in words.
pub fn check_schema(schema: &Value) -> Result<(), String> {
    if !schema.is_object() {
        return Err("`result_schema` must be a JSON Schema object (`{\"type\": \"object\", ...}`)".into());
    }
    if serde_json::to_vec(schema).map_or(0, |b| b.len()) > MAX_SCHEMA_BYTES {
        return Err(format!("`result_schema` is larger than {MAX_SCHEMA_BYTES} bytes"));
    }
    if refers_outside(schema) {
        return Err("`result_schema` refers to another document (`$ref` to a file or URL): give the whole schema, with `$defs`".into());
    }
    jsonschema::validator_for(schema).map(drop).map_err(|e| format!("`result_schema` is not a valid JSON Schema: {e}"))
}

/// Whether a `$ref` anywhere in `v` names something outside the schema itself.
fn refers_outside(v: &Value) -> bool {
    match v {
        Value::Object(map) => {
            map.iter().any(|(k, v)| (k == "$ref" && v.as_str().is_some_and(|r| !r.starts_with('#'))) || refers_outside(v))
        }
        Value::Array(items) => items.iter().any(refers_outside),
        _ => false,
    }
}

/// What is wrong with `value` as `schema` sees it: one line per error, with where it is.
pub fn validate(schema: &Value, value: &Value) -> Result<(), Vec<String>> {
    let validator = jsonschema::validator_for(schema).map_err(|e| vec![format!("the schema is not valid: {e}")])?;
    let errors: Vec<String> = validator
        .iter_errors(value)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() { e.to_string() } else { format!("at {at}: {e}") }
        })
        .take(20)
        .collect();
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

/// Why `checks` cannot be run, in words (the field named as the start writes it).
pub fn check_checks(checks: &Checks) -> Result<(), String> {
    if let Some(schema) = &checks.result_schema {
        check_schema(schema)?;
    }
    if checks.verify.len() > MAX_CHECKS {
        return Err(format!("`verify`: at most {MAX_CHECKS} checks"));
    }
    for (i, c) in checks.verify.iter().enumerate() {
        check_one(c).map_err(|e| format!("`verify[{i}]`: {e}"))?;
    }
    if checks.max_verify_attempts.is_some_and(|n| !(1..=MAX_ATTEMPTS).contains(&n)) {
        return Err(format!("`max_verify_attempts`: 1 to {MAX_ATTEMPTS}"));
    }
    Ok(())
}

fn check_one(c: &Check) -> Result<(), String> {
    match (&c.command, &c.judge) {
        (Some(cmd), None) => {
            if cmd.trim().is_empty() || cmd.len() > 8192 || cmd.contains('\0') {
                return Err("`command`: a shell command of 1 to 8192 bytes".into());
            }
            if c.timeout_secs.is_some_and(|t| !(1..=3600).contains(&t)) {
                return Err("`timeout_secs`: 1 to 3600".into());
            }
            Ok(())
        }
        (None, Some(j)) => {
            if j.rubric.trim().is_empty() || j.rubric.len() > 16 * 1024 {
                return Err("`judge.rubric`: what the work is judged by, 1 to 16384 bytes".into());
            }
            if j.threshold.is_some_and(|t| !(0.0..=1.0).contains(&t)) {
                return Err("`judge.threshold`: a score from 0 to 1".into());
            }
            Ok(())
        }
        _ => Err("a check is `{\"command\": ...}` or `{\"judge\": {\"rubric\": ...}}`, one of them".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halyard_protocol::event::Judge;
    use serde_json::json;

    #[test]
    fn schemas_and_results_are_checked() {
        let schema = json!({"type": "object", "properties": {"files": {"type": "integer"}}, "required": ["files"]});
        assert_eq!(check_schema(&schema), Ok(()));
        assert!(check_schema(&json!("string")).is_err());
        assert!(check_schema(&json!({"$ref": "https://example.com/s.json"})).unwrap_err().contains("another document"));
        assert!(check_schema(&json!({"type": 12})).unwrap_err().contains("not a valid JSON Schema"));
        assert_eq!(validate(&schema, &json!({"files": 3})), Ok(()));
        let errors = validate(&schema, &json!({"files": "three"})).unwrap_err();
        assert!(errors[0].contains("/files"), "{errors:?}");
        assert!(!validate(&schema, &json!({})).unwrap_err().is_empty());
    }

    #[test]
    fn checks_are_one_of_a_command_or_a_judge() {
        let command = Check { command: Some("cargo test".into()), ..Default::default() };
        let judge = Check { judge: Some(Judge { rubric: "tests added".into(), ..Default::default() }), ..Default::default() };
        assert_eq!(check_checks(&Checks { verify: vec![command.clone(), judge.clone()], ..Default::default() }), Ok(()));
        let both = Check { judge: judge.judge.clone(), ..command };
        assert!(check_checks(&Checks { verify: vec![both], ..Default::default() }).unwrap_err().starts_with("`verify[0]`"));
        assert!(check_checks(&Checks { max_verify_attempts: Some(0), ..Default::default() }).is_err());
    }
}

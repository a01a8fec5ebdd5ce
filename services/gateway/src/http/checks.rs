//! Checks of what a request carries that need nothing but the value: ids from paths, budgets,
//! one-line labels and tags.

use crate::http::error::ApiError;

/// Parses a path id, saying which parameter was wrong.
pub fn parse_id<T: std::str::FromStr>(raw: &str, what: &str) -> Result<T, ApiError> {
    raw.parse().map_err(|_| ApiError::bad_request("invalid_id", format!("`{what}` must be a UUID, got {raw:?}")))
}

/// Checks the limits of a conversation's LLM use.
pub fn check_budget(max_budget_usd: Option<f64>, max_tokens: Option<u64>) -> Result<(), ApiError> {
    if max_budget_usd.is_some_and(|b| !b.is_finite() || b <= 0.0) {
        return Err(ApiError::bad_request("invalid_field", "`max_budget_usd` must be a positive number of US dollars"));
    }
    if max_tokens == Some(0) {
        return Err(ApiError::bad_request("invalid_field", "`max_tokens` must be at least 1"));
    }
    Ok(())
}

/// Checks a one-line text people read in lists (a title, a label): no control characters (NUL,
/// line breaks, escapes) and no bidirectional overrides or isolates, which make a text read
/// differently from what it is (U+202E before `txt.exe` shows it as `exe.txt`).
pub fn check_label(field: &str, text: &str) -> Result<(), ApiError> {
    let bidi = |c: char| matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}');
    match text.chars().find(|c| c.is_control() || bidi(*c)) {
        Some(c) => Err(ApiError::bad_request(
            "invalid_field",
            format!(
                "`{field}` holds the character U+{:04X}: control characters and bidirectional overrides are not allowed in it",
                c as u32
            ),
        )),
        None => Ok(()),
    }
}

/// Most tags a conversation has, and the longest key and value.
pub const MAX_TAGS: usize = 20;

const MAX_TAG_KEY: usize = 64;

const MAX_TAG_VALUE: usize = 256;

/// Refuses a tag key that is not 1 to 64 letters, digits, `_`, `-`, `.` or `/` (a key is
/// matched as `key:value` in `?tag=`, so it holds no colon), or a value that is not one line
/// of up to 256 characters.
pub fn check_tag(key: &str, value: Option<&str>) -> Result<(), ApiError> {
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/');
    if key.is_empty() || key.len() > MAX_TAG_KEY || !key.chars().all(plain) {
        return Err(ApiError::bad_request(
            "invalid_field",
            format!("the tag key `{key}` must be 1 to {MAX_TAG_KEY} letters, digits, `_`, `-`, `.` or `/`"),
        ));
    }
    if let Some(v) = value {
        if v.chars().count() > MAX_TAG_VALUE {
            return Err(ApiError::bad_request("invalid_field", format!("the tag `{key}` has a value over {MAX_TAG_VALUE} characters")));
        }
        check_label(&format!("tags.{key}"), v)?;
    }
    Ok(())
}

/// Refuses more than [`MAX_TAGS`] tags.
pub fn check_tag_count(n: usize) -> Result<(), ApiError> {
    if n > MAX_TAGS {
        return Err(ApiError::bad_request("invalid_field", format!("a conversation has at most {MAX_TAGS} tags; this would have {n}")));
    }
    Ok(())
}

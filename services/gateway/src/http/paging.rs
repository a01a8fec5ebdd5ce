//! Pages of a list: `limit` and the opaque `cursor` the API gave out.

use serde::Deserialize;

use crate::http::error::ApiError;

/// A page of a list: `limit` items after `cursor`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// How many items (1 to 100, 20 by default).
    #[serde(default)]
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<usize>,
    /// The `next_cursor` of the page before.
    #[serde(default)]
    pub cursor: Option<String>,
}

/// `limit` (1..=100, default 20) and the decoded `cursor` of a page request.
pub fn page_params(q: &PageQuery) -> Result<(usize, Option<Vec<u8>>), ApiError> {
    let limit = q.limit.unwrap_or(20);
    if !(1..=100).contains(&limit) {
        return Err(ApiError::bad_request("invalid_query", "`limit` must be between 1 and 100"));
    }
    let cursor = match &q.cursor {
        Some(c) => Some(from_hex(c).ok_or_else(|| ApiError::bad_request("invalid_query", "`cursor` is not one this API gave out"))?),
        None => None,
    };
    Ok((limit, cursor))
}

fn from_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

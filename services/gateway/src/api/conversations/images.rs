//! The images the agent's tools made, to the conversation's owner: the browser's screenshots,
//! one by id (`GET /conversations/{id}/screenshots/{screenshot_id}`, the id an observation
//! names) and the latest (`GET /conversations/{id}/browser/screenshot`, which the projection
//! follows from the observations), and the plots of Python cells
//! (`GET /conversations/{id}/images/{image_id}`). The bytes live in the object store, never in
//! the log (`halyard_platform::images`).

use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};

use halyard_protocol::ConversationId;

use crate::auth::User;
use crate::auth::access::readable;
use crate::http::api_doc::Refusals;
use crate::http::error::ApiError;
use crate::read_model::store::ConversationView;
use crate::state::AppState;

/// A screenshot of the conversation's browser, as a PNG.
#[utoipa::path(get, path = "/conversations/{id}/screenshots/{screenshot_id}", tag = "conversations",
    params(("id" = String, Path, format = Uuid), ("screenshot_id" = String, Path, description = "an observation's `screenshot_id`")),
    responses((status = 200, description = "the screenshot", content_type = "image/png", body = Vec<u8>), Refusals))]
pub async fn screenshot(
    State(state): State<AppState>,
    User(user): User,
    Path((id, screenshot_id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    by_id(&state, &user, &id, &screenshot_id, "screenshot").await
}

/// An image a Python cell of the conversation displayed (an observation's `image_ids`), as a
/// PNG.
#[utoipa::path(get, path = "/conversations/{id}/images/{image_id}", tag = "conversations",
    params(("id" = String, Path, format = Uuid), ("image_id" = String, Path, description = "one of an observation's `image_ids`")),
    responses((status = 200, description = "the image", content_type = "image/png", body = Vec<u8>), Refusals))]
pub async fn image(
    State(state): State<AppState>,
    User(user): User,
    Path((id, image_id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    by_id(&state, &user, &id, &image_id, "image").await
}

/// The owner's image `pic` of conversation `id` (`what` names it in a 404). An image never
/// changes: the browser may keep it.
async fn by_id(state: &AppState, user: &halyard_protocol::UserId, id: &str, pic: &str, what: &str) -> Result<Response, ApiError> {
    let (cid, view) = readable(state, user, id)?;
    let png = find(state, cid, &view, pic).await?.ok_or_else(|| ApiError::not_found(what))?;
    Ok(([(header::CONTENT_TYPE, "image/png"), (header::CACHE_CONTROL, "private, max-age=31536000, immutable")], png).into_response())
}

/// The latest screenshot of the conversation's browser, as a PNG; `Content-Location` names it
/// by id and `X-Browser-Url` says which page it shows. 404 `no_screenshot` before the agent
/// browses.
#[utoipa::path(get, path = "/conversations/{id}/browser/screenshot", tag = "conversations", params(("id" = String, Path, format = Uuid)),
    responses((status = 200, description = "the latest screenshot", content_type = "image/png", body = Vec<u8>), Refusals))]
pub async fn latest(State(state): State<AppState>, User(user): User, Path(id): Path<String>) -> Result<Response, ApiError> {
    let (cid, view) = readable(&state, &user, &id)?;
    let none = || ApiError::new(axum::http::StatusCode::NOT_FOUND, "no_screenshot", "the agent has not browsed in this conversation yet");
    let Some(shot) = view.browser.as_ref().and_then(|b| b.screenshot_id.clone()) else { return Err(none()) };
    let png = find(&state, cid, &view, &shot).await?.ok_or_else(none)?;
    let url = view.browser.as_ref().map(|b| b.url.clone()).unwrap_or_default();
    let location = format!("/api/v1/conversations/{cid}/screenshots/{shot}");
    let mut response = ([(header::CONTENT_TYPE, "image/png"), (header::CACHE_CONTROL, "no-cache")], png).into_response();
    let headers = response.headers_mut();
    if let Ok(v) = location.parse() {
        headers.insert(header::CONTENT_LOCATION, v);
    }
    if let Ok(v) = url.parse() {
        headers.insert("x-browser-url", v);
    }
    Ok(response)
}

/// The image `screenshot_id` of conversation `cid`: its own, or for a fork, one of the events
/// it copied from its source.
async fn find(state: &AppState, cid: ConversationId, view: &ConversationView, screenshot_id: &str) -> Result<Option<Vec<u8>>, ApiError> {
    let read = |owner: ConversationId| halyard_platform::images::get(&state.js, owner, screenshot_id);
    if let Some(png) = read(cid).await.map_err(ApiError::internal)? {
        return Ok(Some(png));
    }
    match view.start_request.as_ref().and_then(|r| r.fork.as_ref()) {
        Some(source) => read(source.conversation_id).await.map_err(ApiError::internal),
        None => Ok(None),
    }
}

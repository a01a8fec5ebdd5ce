//! The browser tools, named, described and shaped as OpenHands' (`browser_navigate`,
//! `browser_click`, `browser_type`, `browser_get_state`, `browser_get_content`,
//! `browser_scroll`, `browser_go_back`, `browser_list_tabs`, `browser_switch_tab`,
//! `browser_close_tab`), carried out by the sandbox's executor. Each answers with the page
//! afterwards and a PNG of it, which the run keeps in the conversation's screenshots; the model
//! is shown the PNG only when it asks (`browser_get_state` with `include_screenshot`).

use halyard_platform::executor_client::{ExecutorClient, ExecutorError};
use halyard_protocol::executor::{BROWSER_TOOLS, BrowserRequest};
use serde_json::{Value, json};

use super::outcome::{Rich, ToolOutcome, bool_arg, error, security_risk};

pub fn is_browser(tool: &str) -> bool {
    BROWSER_TOOLS.contains(&tool)
}

/// Browser tools that change nothing, not even where the browser is.
pub fn is_inert(tool: &str) -> bool {
    matches!(tool, "browser_get_state" | "browser_get_content" | "browser_list_tabs" | "browser_scroll")
}

fn tool(name: &str, description: &str, properties: Value, required: &[&str]) -> Value {
    json!({"type": "function", "function": {
        "name": name,
        "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required}
    }})
}

/// The ten tools' definitions, in OpenHands' order.
pub fn specs() -> Vec<Value> {
    let index = |what: &str| json!({"type": "integer", "minimum": 0, "description": format!("The index of the element to {what} (from browser_get_state)")});
    let tab_id =
        |what: &str| json!({"type": "string", "description": format!("4 Character Tab ID of the tab to {what} (from browser_list_tabs)")});
    vec![
        tool(
            "browser_navigate",
            "Navigate to a URL in the browser. This tool allows you to navigate to any web page (http or https; the sandbox's own servers are at localhost). You can optionally open the URL in a new tab.",
            json!({
                "url": {"type": "string", "description": "The URL to navigate to"},
                "new_tab": {"type": "boolean", "default": false, "description": "Whether to open in a new tab. Default: False"},
                "security_risk": security_risk()
            }),
            &["url", "security_risk"],
        ),
        tool(
            "browser_click",
            "Click an element on the page by its index. Use this tool to click on interactive elements like buttons, links, or form controls. The index comes from the browser_get_state tool output.",
            json!({
                "index": index("click"),
                "new_tab": {"type": "boolean", "default": false, "description": "Whether to open any resulting navigation in a new tab. Default: False"},
                "security_risk": security_risk()
            }),
            &["index", "security_risk"],
        ),
        tool(
            "browser_type",
            "Type text into an input field. Use this tool to enter text into form fields, search boxes, or other text input elements; what the field held is replaced. The index comes from the browser_get_state tool output.",
            json!({
                "index": index("type into"),
                "text": {"type": "string", "description": "The text to type"},
                "security_risk": security_risk()
            }),
            &["index", "text", "security_risk"],
        ),
        tool(
            "browser_get_state",
            "Get the current state of the page including all interactive elements. This tool returns the current page URL, title, and all interactive elements with their indices for clicking and typing, one per line as [index]<tag ...>text</tag>. Optionally includes a screenshot of the page.",
            json!({"include_screenshot": {"type": "boolean", "default": false, "description": "Whether to include a screenshot of the current page. Default: False"}}),
            &[],
        ),
        tool(
            "browser_get_content",
            "Extract the main content of the current page in clean markdown format. It has been filtered to remove noise and advertising content. Long pages come in parts: call it again with start_from_char to read on.",
            json!({
                "extract_links": {"type": "boolean", "default": false, "description": "Whether to include links in the content (default: False)"},
                "start_from_char": {"type": "integer", "minimum": 0, "default": 0, "description": "Character index to start from in the page content (default: 0)"}
            }),
            &[],
        ),
        tool(
            "browser_scroll",
            "Scroll the page up or down. Use this tool to scroll through page content when elements are not visible or when you need to see more content.",
            json!({"direction": {"type": "string", "enum": ["up", "down"], "default": "down", "description": "Direction to scroll. Options: 'up', 'down'. Default: 'down'"}}),
            &[],
        ),
        tool(
            "browser_go_back",
            "Go back to the previous page in browser history. Use this tool to navigate back to the previously visited page.",
            json!({}),
            &[],
        ),
        tool(
            "browser_list_tabs",
            "List all open browser tabs. This tool shows all currently open tabs with their IDs, titles, and URLs. Use the tab IDs with browser_switch_tab or browser_close_tab.",
            json!({}),
            &[],
        ),
        tool(
            "browser_switch_tab",
            "Switch to a different browser tab. Use this tool to switch between open tabs using the tab ID from browser_list_tabs.",
            json!({"tab_id": tab_id("switch to")}),
            &["tab_id"],
        ),
        tool(
            "browser_close_tab",
            "Close a browser tab (the current one when no tab_id is given). Use the tab ID from browser_list_tabs.",
            json!({"tab_id": tab_id("close")}),
            &[],
        ),
    ]
}

/// Carries out one browser tool call in the sandbox.
pub async fn execute(exec: &ExecutorClient, tool: &str, args: &Value) -> ToolOutcome {
    let req = BrowserRequest { tool: tool.to_owned(), arguments: args.clone() };
    match exec.browser(&req).await {
        Ok(r) => ToolOutcome::Rich(Rich {
            content: r.output,
            is_error: false,
            url: Some(r.url),
            screenshot_png: r.screenshot_png,
            images: Vec::new(),
            show: tool == "browser_get_state" && bool_arg(args, "include_screenshot"),
        }),
        Err(ExecutorError::Rejected { message, .. }) => error(message),
        Err(e) => error(format!("The sandbox's browser could not do it: {e}")),
    }
}

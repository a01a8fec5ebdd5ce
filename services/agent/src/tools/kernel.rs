//! `execute_ipython_cell`, OpenHands' Jupyter tool: a cell of Python in the sandbox's IPython
//! kernel (one per shell session, its state kept between cells, in the shell's working
//! directory), carried out by the executor. The plots a cell displays are kept like the
//! browser's screenshots and shown to a vision model; a cell past its timeout is interrupted.

use halyard_platform::executor_client::{ExecutorClient, ExecutorError};
use halyard_protocol::executor::CellRequest;
use serde_json::{Value, json};

use super::outcome::{Rich, ToolOutcome, error, security_risk, str_arg};

pub const TOOL: &str = "execute_ipython_cell";

pub fn spec() -> Value {
    json!({"type": "function", "function": {
        "name": TOOL,
        "description": "Run a cell of Python code in an IPython environment.\n* The assistant should define variables and import packages before using them.\n* The variable defined in the IPython environment will not be available outside the IPython environment (e.g., in terminal).\n* The cell runs in the terminal's current working directory; figures it displays (matplotlib) are shown to you as images.\n* A cell that runs too long (two minutes, unless the operator says otherwise) is interrupted.",
        "parameters": {"type": "object", "properties": {
            "code": {"type": "string", "description": "The Python code to execute. Supports magic commands like %pip."},
            "security_risk": security_risk()
        }, "required": ["code", "security_risk"]}
    }})
}

/// Runs one cell, interrupted after `timeout` seconds.
pub async fn execute(exec: &ExecutorClient, args: &Value, session: Option<&str>, timeout: f64) -> ToolOutcome {
    let Some(code) = str_arg(args, "code") else {
        return error("Missing required argument `code`.");
    };
    let req = CellRequest { code, timeout_secs: Some(timeout), session: session.map(str::to_owned) };
    match exec.ipython(&req).await {
        Ok(r) => {
            let mut content = String::new();
            if r.new_kernel {
                content.push_str("[A new Python kernel was started: nothing earlier cells defined is in it.]\n");
            }
            content.push_str(r.output.trim_end());
            if r.output.trim().is_empty() && r.images.is_empty() && !r.error {
                content.push_str("[Code executed successfully with no output]");
            }
            if !r.images.is_empty() {
                content.push_str(&format!("\n[{} image{} displayed]", r.images.len(), if r.images.len() == 1 { "" } else { "s" }));
            }
            if r.timed_out {
                content.push_str(&format!("\n[The cell ran longer than {timeout} seconds and was interrupted.]"));
            }
            ToolOutcome::Rich(Rich {
                content,
                is_error: r.error || r.timed_out,
                show: !r.images.is_empty(),
                images: r.images,
                ..Default::default()
            })
        }
        Err(ExecutorError::Rejected { message, .. }) => error(message),
        Err(e) => error(format!("The sandbox could not run the cell: {e}")),
    }
}

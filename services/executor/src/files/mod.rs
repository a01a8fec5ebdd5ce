//! The agent's file tools, run in the sandbox apart from its shell: the editor ([`editor`]),
//! finding files by name and by content ([`search`]), V4A patches ([`patch`]), and the user's
//! uploads and downloads ([`transfer`]).

pub mod editor;
pub mod patch;
pub mod search;
pub(crate) mod transfer;

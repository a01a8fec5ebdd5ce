//! Conversations: starting them (and trying a failed start again), what the user does to one
//! (messages, pause, resume, interrupt, confirm, delete...), its events (read, searched,
//! counted, one by one, followed over a WebSocket; read through [`crate::events`]) and its export.

pub mod export;
pub mod routes;
pub mod starts;
pub mod ws;

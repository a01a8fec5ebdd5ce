//! Conversations: starting them (and trying a failed start again) ([`starts`]), listing and
//! reading them ([`list`], shown as [`views`] says), what the user does to one ([`control`]:
//! messages, pause, resume, interrupt, confirm..., checked as [`checks`] says), its events ([`events`]: read, searched,
//! counted, one by one; followed over a WebSocket in [`ws`]; read through
//! [`crate::read_model::events`]), its export, the agent's plan ([`plan`]), and read-only share
//! links that show it live to people without an account ([`share`]).

pub mod agents;
pub mod checks;
pub mod control;
pub mod events;
pub mod export;
pub mod hooks;
pub mod images;
pub mod list;
pub mod network;
pub mod org_shared;
pub mod plan;
pub mod queue;
pub mod share;
pub mod starts;
pub mod views;
pub mod ws;

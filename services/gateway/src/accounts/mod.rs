//! Who is calling: users and API keys ([`registry`]), how a request proves it ([`auth`]), the
//! web workspace's sessions and WebSocket tickets, and the administrators' and users' own key
//! management ([`admin`]).

pub mod admin;
pub mod auth;
pub mod registry;
pub mod session;
pub mod tickets;

//! The read models: what the gateway answers reads from, kept in sled and derived from the bus by
//! [`crate::projection`] (which could rebuild them by replay). [`store`] holds conversations,
//! tasks, sandboxes, usage, audit and delivery rows; [`rows`] the stored forms of rows that are not
//! API types; [`events`] reads a conversation's event log; [`indexes`] gives a store written
//! before the newest indexes their rows.

pub mod batch;
pub mod events;
pub mod indexes;
pub mod layout;
pub mod rows;
pub mod store;

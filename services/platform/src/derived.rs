//! Deterministic ids. A step that may run twice (a redelivered command, a runner that took a run
//! over, a trigger its sender retried) names what it makes with an id derived from what caused
//! it, so the second time names the same thing and is dropped as a duplicate: by JetStream's
//! duplicate window, a KV create, or a webhook receiver's check of `webhook-id`. Every such id
//! in Halyard comes from [`derived_uuid`], in a [`Namespace`] that says what the id names and
//! carries exactly the inputs it is derived from.
//!
//! New namespaces hash ([`Namespace::Hashed`]: SHA-256 of length-prefixed parts, the first a
//! label of their own, as a version-8 UUID). The other namespaces predate this module and keep
//! the derivation they were written with, bit for bit: their ids are in event logs, read
//! models, KV keys and receivers' duplicate checks, and a changed derivation would make a
//! start redelivered across an upgrade a second sandbox, a retried trigger a second run, a
//! retried delivery a new `webhook-id`. The tests pin each namespace to ids the code it
//! replaced computed.

use sha2::{Digest, Sha256};
use uuid::Uuid;

/// What a derived id names, with what it is derived from.
#[derive(Debug, Clone, Copy)]
pub enum Namespace<'a> {
    /// Anything new: the parts, the first a label naming the use (`b"halyard-delegate"`).
    /// Also the agent's helpers, their commands and deletions.
    Hashed(&'a [&'a [u8]]),
    /// Automations: a run (`["run", automation, trigger key]`) and what it makes
    /// (`["task" | "start" | "message" | "record" | "conversation", run]`, `["tick", id, due]`).
    Automation(&'a [&'a str]),
    /// A start task's sandbox and commands: its id and a tag per purpose.
    StartTask { task: Uuid, tag: u8 },
    /// An event the agent appends for a command: the command's id and a tag per event.
    CommandEvent { command: Uuid, tag: u8 },
    /// A fork's copy of its source's event `seq`, under the fork's start command.
    ForkCopy { command: Uuid, seq: u64 },
    /// A webhook's delivery of an event: the `webhook-id` receivers see on every attempt.
    WebhookDelivery { webhook: &'a str, event: Uuid },
}

/// The id `namespace` derives: the same inputs give the same id on every replica and restart.
pub fn derived_uuid(namespace: Namespace<'_>) -> Uuid {
    match namespace {
        Namespace::Hashed(parts) => {
            let mut hash = Sha256::new();
            for part in parts {
                // Length-prefixed, so ("ab", "c") and ("a", "bc") differ.
                hash.update((part.len() as u64).to_be_bytes());
                hash.update(part);
            }
            uuid::Builder::from_custom_bytes(first_16(&hash.finalize())).into_uuid()
        }
        Namespace::Automation(parts) => {
            let mut hash = Sha256::new();
            for part in parts {
                hash.update(part.as_bytes());
                hash.update([0]);
            }
            version_8(first_16(&hash.finalize()))
        }
        Namespace::StartTask { task, tag } => {
            let mut bytes = *task.as_bytes();
            bytes[15] ^= tag;
            bytes[14] ^= 0x5a;
            Uuid::from_bytes(bytes)
        }
        Namespace::CommandEvent { command, tag } => {
            let mut bytes = *command.as_bytes();
            bytes[15] ^= tag;
            bytes[13] ^= 0x3c;
            Uuid::from_bytes(bytes)
        }
        Namespace::ForkCopy { command, seq } => {
            let mut bytes = *command.as_bytes();
            for (b, s) in bytes[8..].iter_mut().zip(seq.to_be_bytes()) {
                *b ^= s;
            }
            bytes[7] ^= 0xf0;
            Uuid::from_bytes(bytes)
        }
        Namespace::WebhookDelivery { webhook, event } => {
            let mut hash = Sha256::new();
            hash.update(webhook.as_bytes());
            hash.update(event.as_bytes());
            version_8(first_16(&hash.finalize()))
        }
    }
}

fn first_16(digest: &[u8]) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    bytes
}

/// The version (8, custom) and variant bits set by hand, as the automations and webhook
/// deliveries always did (`uuid::Builder::from_custom_bytes` sets the same bits).
fn version_8(mut bytes: [u8; 16]) -> Uuid {
    bytes[6] = (bytes[6] & 0x0f) | 0x80;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    Uuid::from_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TASK: &str = "0193a5c4-7d2e-7b31-9f00-1c2d3e4f5a6b";

    fn id(s: &str) -> Uuid {
        s.parse().unwrap()
    }

    /// Ids computed by the derivations this module replaced (`keys::derived_uuid`,
    /// `automations::decision::derived`, `conversations::start::derived`, the agent's
    /// `derived` and `copied_id`, `callbacks::ctx::delivery_id`) for these inputs: ids already
    /// written keep naming the same things.
    #[test]
    fn every_namespace_derives_the_ids_written_before_it() {
        let t = id(TASK);
        let parts: [&[u8]; 3] = [b"halyard-delegate", t.as_bytes(), b"conversation"];
        assert_eq!(derived_uuid(Namespace::Hashed(&parts)).to_string(), GOLDEN[0]);
        assert_eq!(derived_uuid(Namespace::Automation(&["run", "a1", "hook:1"])).to_string(), GOLDEN[1]);
        assert_eq!(derived_uuid(Namespace::StartTask { task: t, tag: 0xA1 }).to_string(), GOLDEN[2]);
        assert_eq!(derived_uuid(Namespace::CommandEvent { command: t, tag: 0x50 }).to_string(), GOLDEN[3]);
        assert_eq!(derived_uuid(Namespace::ForkCopy { command: t, seq: 1234 }).to_string(), GOLDEN[4]);
        assert_eq!(derived_uuid(Namespace::WebhookDelivery { webhook: "wh_1", event: t }).to_string(), GOLDEN[5]);
    }

    const GOLDEN: [&str; 6] = [
        "ed9f71ed-bd86-8682-8fe1-d7251aee2a1a",
        "0688990a-1567-88a0-a2fd-fcbf871bdf92",
        "0193a5c4-7d2e-7b31-9f00-1c2d3e4f00ca",
        "0193a5c4-7d2e-7b31-9f00-1c2d3e735a3b",
        "0193a5c4-7d2e-7bc1-9f00-1c2d3e4f5eb9",
        "032d5c78-8b49-8690-a77e-670845406ac7",
    ];

    #[test]
    fn inputs_that_differ_give_ids_that_differ() {
        let t = id(TASK);
        let a: [&[u8]; 2] = [b"ab", b"c"];
        let b: [&[u8]; 2] = [b"a", b"bc"];
        assert_ne!(derived_uuid(Namespace::Hashed(&a)), derived_uuid(Namespace::Hashed(&b)));
        assert_ne!(derived_uuid(Namespace::Automation(&["ab", "c"])), derived_uuid(Namespace::Automation(&["a", "bc"])));
        assert_ne!(derived_uuid(Namespace::StartTask { task: t, tag: 1 }), derived_uuid(Namespace::StartTask { task: t, tag: 2 }));
        assert_ne!(derived_uuid(Namespace::StartTask { task: t, tag: 1 }), t);
        assert_ne!(derived_uuid(Namespace::ForkCopy { command: t, seq: 1 }), derived_uuid(Namespace::ForkCopy { command: t, seq: 2 }));
        let other = derived_uuid(Namespace::WebhookDelivery { webhook: "wh_2", event: t });
        assert_ne!(derived_uuid(Namespace::WebhookDelivery { webhook: "wh_1", event: t }), other);
        // The hashed namespaces are version-8 UUIDs.
        assert_eq!(other.get_version_num(), 8);
        assert_eq!(derived_uuid(Namespace::Automation(&["x"])).get_version_num(), 8);
    }
}

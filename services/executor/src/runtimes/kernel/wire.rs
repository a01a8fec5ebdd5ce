//! Jupyter's messaging protocol (5.3) on ZeroMQ frames: a message is the delimiter
//! `<IDS|MSG>`, an HMAC-SHA256 of the next four frames (hex, with the connection's key), then
//! the header, the parent's header, the metadata and the content, each JSON. Messages whose
//! signature does not verify are dropped: the kernel's sockets are the sandbox's, but a key is
//! what the protocol asks for.

use bytes::Bytes;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use zeromq::ZmqMessage;

const DELIMITER: &[u8] = b"<IDS|MSG>";

/// One message as read.
#[derive(Debug)]
pub struct Message {
    pub msg_type: String,
    /// The `msg_id` of the request it answers.
    pub parent: String,
    pub content: Value,
}

fn signature(key: &[u8], parts: &[&[u8]]) -> String {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else { return String::new() };
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// A request of `msg_type` from session `session`: its id and its frames.
pub fn request(key: &[u8], session: &str, msg_type: &str, content: &Value) -> (String, ZmqMessage) {
    let msg_id = uuid::Uuid::new_v4().simple().to_string();
    let header = json!({
        "msg_id": msg_id,
        "session": session,
        "username": "halyard",
        "date": "1970-01-01T00:00:00.000000Z",
        "msg_type": msg_type,
        "version": "5.3",
    });
    let frames: Vec<Vec<u8>> =
        [&header, &json!({}), &json!({}), content].iter().map(|v| serde_json::to_vec(v).unwrap_or_default()).collect();
    let sig = signature(key, &frames.iter().map(Vec::as_slice).collect::<Vec<_>>());
    let mut parts = vec![Bytes::from_static(DELIMITER), Bytes::from(sig)];
    parts.extend(frames.into_iter().map(Bytes::from));
    let message = ZmqMessage::try_from(parts).unwrap_or_else(|_| ZmqMessage::from(""));
    (msg_id, message)
}

/// Reads a message; `None` if it is not one or its signature is wrong.
pub fn read(key: &[u8], message: ZmqMessage) -> Option<Message> {
    let frames = message.into_vec();
    let at = frames.iter().position(|f| f.as_ref() == DELIMITER)?;
    let rest = frames.get(at + 1..at + 6)?;
    let wanted = signature(key, &[&rest[1], &rest[2], &rest[3], &rest[4]]);
    // Constant time: the comparison does not stop at the first difference.
    let given = rest[0].as_ref();
    if given.len() != wanted.len() || given.iter().zip(wanted.as_bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) != 0 {
        return None;
    }
    let json = |f: &Bytes| serde_json::from_slice::<Value>(f).ok();
    let header = json(&rest[1])?;
    let parent = json(&rest[2]).unwrap_or(Value::Null);
    Some(Message {
        msg_type: header["msg_type"].as_str().unwrap_or_default().to_owned(),
        parent: parent["msg_id"].as_str().unwrap_or_default().to_owned(),
        content: json(&rest[4]).unwrap_or(Value::Null),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_reads_back_and_a_forged_one_does_not() {
        let (id, msg) = request(b"k3y", "s", "execute_request", &json!({"code": "1+1"}));
        let read_back = read(b"k3y", msg.clone()).expect("signed with the key");
        assert_eq!((read_back.msg_type.as_str(), read_back.content["code"].as_str()), ("execute_request", Some("1+1")));
        assert_eq!(id.len(), 32);
        assert!(read(b"other", msg).is_none(), "another key's signature is refused");
    }
}

//! Verifying a hook request on its raw bytes, before anything is parsed, in constant time, with
//! the scheme of the automation's kind. A timestamped scheme refuses a request older (or newer)
//! than its window, so a captured request cannot be replayed later; the delivery id it yields
//! is what replays within the window are recognised by.

use axum::http::HeaderMap;
use halyard_platform::keys::{constant_time_eq, webhook_signature};

/// How far a Standard Webhooks timestamp may be from now.
pub const STANDARD_WEBHOOKS_WINDOW_SECS: i64 = 300;

/// Why a request was refused (said in metrics and the log, never to the sender).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A header the scheme needs is missing or malformed.
    Missing,
    /// The timestamp is outside the window.
    Stale,
    /// No signature matched.
    BadSignature,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Missing => "missing_header",
            Self::Stale => "stale",
            Self::BadSignature => "bad_signature",
        }
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Result<&'a str, Refusal> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim).filter(|v| !v.is_empty()).ok_or(Refusal::Missing)
}

/// Standard Webhooks (`webhook-id`, `webhook-timestamp`, `webhook-signature` of
/// `v1,<base64>` entries separated by spaces): the delivery id if one signature matches.
pub fn standard_webhooks(secret: &str, headers: &HeaderMap, body: &[u8], now_s: i64) -> Result<String, Refusal> {
    let id = header(headers, "webhook-id")?;
    let timestamp: i64 = header(headers, "webhook-timestamp")?.parse().map_err(|_| Refusal::Missing)?;
    let signatures = header(headers, "webhook-signature")?;
    // Signed before the window is checked: a stale request with a bad signature is a bad one.
    let expected = webhook_signature(secret, id, timestamp, body).ok_or(Refusal::BadSignature)?;
    // Every entry is compared, whatever an earlier one gave: the time taken says nothing.
    let mut matched = false;
    for candidate in signatures.split(' ').filter(|s| !s.is_empty()) {
        matched |= constant_time_eq(candidate.as_bytes(), expected.as_bytes());
    }
    if !matched {
        return Err(Refusal::BadSignature);
    }
    if (now_s - timestamp).abs() > STANDARD_WEBHOOKS_WINDOW_SECS {
        return Err(Refusal::Stale);
    }
    Ok(id.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn headers(id: &str, ts: i64, sig: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("webhook-id", id.parse().unwrap());
        h.insert("webhook-timestamp", ts.to_string().parse().unwrap());
        h.insert("webhook-signature", sig.parse().unwrap());
        h
    }

    #[test]
    fn standard_webhooks_accepts_the_reference_vector_and_refuses_the_rest() {
        // The Standard Webhooks specification's own example.
        let body = br#"{"test": 2432232314}"#;
        let good = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
        let ts = 1_614_265_330;
        assert_eq!(
            standard_webhooks(SECRET, &headers("msg_p5jXN8AQM9LWM0D4loKWxJek", ts, good), body, ts).unwrap(),
            "msg_p5jXN8AQM9LWM0D4loKWxJek"
        );
        // One good signature among others (a secret being rotated) is enough.
        let two = format!("v1,bm90IHRoaXMgb25l {good}");
        assert!(standard_webhooks(SECRET, &headers("msg_p5jXN8AQM9LWM0D4loKWxJek", ts, &two), body, ts).is_ok());
        let refused = |h: HeaderMap, body: &[u8], now: i64| standard_webhooks(SECRET, &h, body, now).unwrap_err();
        assert_eq!(refused(headers("msg_p5jXN8AQM9LWM0D4loKWxJek", ts, good), br#"{"test": 2432232315}"#, ts), Refusal::BadSignature);
        assert_eq!(refused(headers("msg_other", ts, good), body, ts), Refusal::BadSignature);
        assert_eq!(refused(headers("msg_p5jXN8AQM9LWM0D4loKWxJek", ts, good), body, ts + 301), Refusal::Stale);
        assert_eq!(refused(HeaderMap::new(), body, ts), Refusal::Missing);
    }
}

//! Verifying a hook request on its raw bytes, before anything is parsed, in constant time, with
//! the scheme of the automation's kind. A timestamped scheme refuses a request older (or newer)
//! than its window, so a captured request cannot be replayed later; the delivery id it yields
//! is what replays within the window are recognised by.

use axum::http::HeaderMap;
use halyard_platform::keys::{constant_time_eq, to_hex, webhook_signature};

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

/// GitHub (`X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`, `X-GitHub-Delivery`,
/// `X-GitHub-Event`): the delivery id and the event. GitHub's scheme has no timestamp; its
/// delivery ids are what replays are recognised by.
pub fn github(secret: &str, headers: &HeaderMap, body: &[u8]) -> Result<(String, String), Refusal> {
    let given = header(headers, "x-hub-signature-256")?;
    let delivery = header(headers, "x-github-delivery")?;
    let event = header(headers, "x-github-event")?;
    let expected = format!("sha256={}", to_hex(&hmac_sha256(secret.as_bytes(), body).ok_or(Refusal::BadSignature)?));
    if !constant_time_eq(given.as_bytes(), expected.as_bytes()) {
        return Err(Refusal::BadSignature);
    }
    Ok((delivery.to_owned(), event.to_owned()))
}

/// GitLab (`X-Gitlab-Token`: the secret itself, `X-Gitlab-Event-UUID`, `X-Gitlab-Event`): the
/// delivery id and the event. The token is compared in constant time; GitLab's scheme signs
/// nothing, so the body is taken as sent over TLS.
pub fn gitlab(secret: &str, headers: &HeaderMap) -> Result<(String, String), Refusal> {
    let token = header(headers, "x-gitlab-token")?;
    let delivery = header(headers, "x-gitlab-event-uuid")?;
    let event = header(headers, "x-gitlab-event")?;
    if !constant_time_eq(token.as_bytes(), secret.as_bytes()) {
        return Err(Refusal::BadSignature);
    }
    Ok((delivery.to_owned(), event.to_owned()))
}

/// Forgejo and Gitea (`X-Forgejo-Signature` or `X-Gitea-Signature`: hex HMAC-SHA256 of the body;
/// `X-Forgejo-Delivery`/`X-Gitea-Delivery`, `X-Forgejo-Event`/`X-Gitea-Event`): the delivery id
/// and the event.
pub fn forgejo(secret: &str, headers: &HeaderMap, body: &[u8]) -> Result<(String, String), Refusal> {
    let either = |a: &str, b: &str| header(headers, a).or_else(|_| header(headers, b));
    let given = either("x-forgejo-signature", "x-gitea-signature")?;
    let delivery = either("x-forgejo-delivery", "x-gitea-delivery")?;
    let event = either("x-forgejo-event", "x-gitea-event")?;
    let expected = to_hex(&hmac_sha256(secret.as_bytes(), body).ok_or(Refusal::BadSignature)?);
    if !constant_time_eq(given.as_bytes(), expected.as_bytes()) {
        return Err(Refusal::BadSignature);
    }
    Ok((delivery.to_owned(), event.to_owned()))
}

/// `X-Hub-Signature: sha256=<hex HMAC-SHA256 of the body>`, as Jira and Bitbucket sign, with the
/// delivery id in `delivery_header` (Jira's `X-Atlassian-Webhook-Identifier`, Bitbucket's
/// `X-Request-UUID`: the same on the sender's retries of one delivery).
pub fn hub_signature(secret: &str, headers: &HeaderMap, body: &[u8], delivery_header: &str) -> Result<String, Refusal> {
    let given = header(headers, "x-hub-signature")?;
    let delivery = header(headers, delivery_header)?;
    let expected = format!("sha256={}", to_hex(&hmac_sha256(secret.as_bytes(), body).ok_or(Refusal::BadSignature)?));
    if !constant_time_eq(given.as_bytes(), expected.as_bytes()) {
        return Err(Refusal::BadSignature);
    }
    Ok(delivery.to_owned())
}

/// The user name of the basic-auth credentials Halyard makes for Azure DevOps service hooks.
pub const AZURE_USER: &str = "halyard";

/// Azure DevOps service hooks: `Authorization: Basic` with [`AZURE_USER`] and the automation's
/// secret, compared in constant time; the delivery id is the notification's `id` in the body
/// (the same on the service's retries), read once the credentials checked out.
pub fn azure_devops(secret: &str, headers: &HeaderMap, body: &[u8]) -> Result<(String, String), Refusal> {
    use base64::Engine;
    let given = header(headers, "authorization")?;
    let expected = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{AZURE_USER}:{secret}")));
    if !constant_time_eq(given.as_bytes(), expected.as_bytes()) {
        return Err(Refusal::BadSignature);
    }
    let payload: serde_json::Value = serde_json::from_slice(body).map_err(|_| Refusal::Missing)?;
    let id = payload["id"].as_str().ok_or(Refusal::Missing)?;
    Ok((id.to_owned(), payload["eventType"].as_str().unwrap_or_default().to_owned()))
}

/// How far a Linear request's `webhookTimestamp` may be from now (its SDK's own window).
pub const LINEAR_WINDOW_MS: i64 = 60_000;

/// Linear (`Linear-Signature`: hex HMAC-SHA256 of the body; `Linear-Delivery`): refuses a request
/// whose `webhookTimestamp` (read once the signature checked out) is more than a minute off.
pub fn linear(secret: &str, headers: &HeaderMap, body: &[u8], now_ms: i64) -> Result<String, Refusal> {
    let given = header(headers, "linear-signature")?;
    let expected = to_hex(&hmac_sha256(secret.as_bytes(), body).ok_or(Refusal::BadSignature)?);
    if !constant_time_eq(given.as_bytes(), expected.as_bytes()) {
        return Err(Refusal::BadSignature);
    }
    let payload: serde_json::Value = serde_json::from_slice(body).map_err(|_| Refusal::Missing)?;
    let ts = payload["webhookTimestamp"].as_i64().ok_or(Refusal::Missing)?;
    if (now_ms - ts).abs() > LINEAR_WINDOW_MS {
        return Err(Refusal::Stale);
    }
    let delivery = header(headers, "linear-delivery").map(str::to_owned);
    Ok(delivery.unwrap_or_else(|_| format!("{}-{ts}", payload["webhookId"].as_str().unwrap_or_default())))
}

/// How far a Slack request's timestamp may be from now.
pub const SLACK_WINDOW_SECS: i64 = 300;

/// Slack (`X-Slack-Signature: v0=<hex HMAC-SHA256 of "v0:<timestamp>:<body>">`,
/// `X-Slack-Request-Timestamp`): refuses a request older (or newer) than five minutes. The
/// delivery id is in the body (`event_id`), read once the signature checked out.
pub fn slack(secret: &str, headers: &HeaderMap, body: &[u8], now_s: i64) -> Result<(), Refusal> {
    let given = header(headers, "x-slack-signature")?;
    let timestamp = header(headers, "x-slack-request-timestamp")?;
    let ts: i64 = timestamp.parse().map_err(|_| Refusal::Missing)?;
    let mut base = format!("v0:{timestamp}:").into_bytes();
    base.extend_from_slice(body);
    let expected = format!("v0={}", to_hex(&hmac_sha256(secret.as_bytes(), &base).ok_or(Refusal::BadSignature)?));
    if !constant_time_eq(given.as_bytes(), expected.as_bytes()) {
        return Err(Refusal::BadSignature);
    }
    if (now_s - ts).abs() > SLACK_WINDOW_SECS {
        return Err(Refusal::Stale);
    }
    Ok(())
}

fn hmac_sha256(key: &[u8], body: &[u8]) -> Option<Vec<u8>> {
    use hmac::{Hmac, Mac};
    let mut mac = <Hmac<sha2::Sha256> as hmac::KeyInit>::new_from_slice(key).ok()?;
    mac.update(body);
    Some(mac.finalize().into_bytes().to_vec())
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

    #[test]
    fn slack_accepts_its_documented_example_and_refuses_the_rest() {
        // Slack's documentation ("Verifying requests from Slack").
        let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let mut h = HeaderMap::new();
        h.insert("x-slack-signature", "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503".parse().unwrap());
        h.insert("x-slack-request-timestamp", "1531420618".parse().unwrap());
        let secret = "8f742231b10e8888abcd99yyyzzz85a5";
        assert_eq!(slack(secret, &h, body, 1_531_420_618), Ok(()));
        assert_eq!(slack(secret, &h, body, 1_531_420_618 + 301), Err(Refusal::Stale));
        assert_eq!(slack("another", &h, body, 1_531_420_618), Err(Refusal::BadSignature));
        assert_eq!(slack(secret, &h, &body[1..], 1_531_420_618), Err(Refusal::BadSignature));
    }

    #[test]
    fn github_accepts_its_documented_example_and_refuses_the_rest() {
        // GitHub's documentation: secret "It's a Secret to Everybody", payload "Hello, World!".
        let sig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        let mut h = HeaderMap::new();
        h.insert("x-hub-signature-256", sig.parse().unwrap());
        h.insert("x-github-delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958".parse().unwrap());
        h.insert("x-github-event", "issues".parse().unwrap());
        let (delivery, event) = github("It's a Secret to Everybody", &h, b"Hello, World!").unwrap();
        assert_eq!((delivery.as_str(), event.as_str()), ("72d3162e-cc78-11e3-81ab-4c9367dc0958", "issues"));
        assert_eq!(github("It's a Secret to Everybody", &h, b"Hello, World?").unwrap_err(), Refusal::BadSignature);
        assert_eq!(github("another secret", &h, b"Hello, World!").unwrap_err(), Refusal::BadSignature);
        h.remove("x-github-delivery");
        assert_eq!(github("It's a Secret to Everybody", &h, b"Hello, World!").unwrap_err(), Refusal::Missing);
    }
}

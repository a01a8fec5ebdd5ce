//! Which network destinations webhooks may reach. Loopback, private and link-local addresses
//! (and the unspecified, multicast and documentation ones) are refused unless allowed by
//! configuration, so a webhook cannot be aimed at the inside of the deployment.

use std::net::IpAddr;

/// Why a destination is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DestinationError {
    #[error("the URL is invalid: {0}")]
    Invalid(String),
    #[error("{0} is a {1} address; such destinations are not allowed")]
    Forbidden(String, &'static str),
    #[error("cannot resolve {0}: {1}")]
    Unresolvable(String, String),
}

/// The class of an address that needs permission, if any.
pub fn restricted_class(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => {
            if v4.is_loopback() {
                Some("loopback")
            } else if v4.is_private() || v4.octets()[0] == 100 && (v4.octets()[1] & 0xc0) == 64 {
                Some("private")
            } else if v4.is_link_local() {
                Some("link-local")
            } else if v4.is_unspecified() || v4.is_broadcast() || v4.is_multicast() || v4.is_documentation() {
                Some("reserved")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return restricted_class(IpAddr::V4(v4));
            }
            let seg = v6.segments()[0];
            if v6.is_loopback() {
                Some("loopback")
            } else if seg & 0xfe00 == 0xfc00 {
                Some("private")
            } else if seg & 0xffc0 == 0xfe80 {
                Some("link-local")
            } else if v6.is_unspecified() || v6.is_multicast() {
                Some("reserved")
            } else {
                None
            }
        }
    }
}

/// Checks one address against the allowed classes.
pub fn check_ip(ip: IpAddr, allow: &[String]) -> Result<(), DestinationError> {
    match restricted_class(ip) {
        Some(class) if !allow.iter().any(|a| a == class) => Err(DestinationError::Forbidden(ip.to_string(), class)),
        _ => Ok(()),
    }
}

/// Parses and checks a webhook URL without network access: scheme, host, and (for IP literals
/// and `localhost`) the address class.
pub fn check_url(url: &str, allow: &[String]) -> Result<reqwest::Url, DestinationError> {
    let parsed = reqwest::Url::parse(url).map_err(|e| DestinationError::Invalid(e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(DestinationError::Invalid("only http and https URLs can receive webhooks".into()));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(DestinationError::Invalid("credentials in the URL are not allowed".into()));
    }
    match parsed.host() {
        Some(url::Host::Ipv4(ip)) => check_ip(IpAddr::V4(ip), allow)?,
        Some(url::Host::Ipv6(ip)) => check_ip(IpAddr::V6(ip), allow)?,
        Some(url::Host::Domain(d)) if d.eq_ignore_ascii_case("localhost") || d.ends_with(".localhost") => {
            check_ip(IpAddr::from([127, 0, 0, 1]), allow)?
        }
        Some(url::Host::Domain(_)) => {}
        None => return Err(DestinationError::Invalid("the URL has no host".into())),
    }
    Ok(parsed)
}

/// `s` as one component of a URL (a path segment or a query value): every byte but RFC 3986's
/// unreserved characters percent-encoded.
pub fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect()
}

/// `url` with `params` as its query, and no query at all when there are none:
/// `Url::parse_with_params` (and `query_pairs_mut`) leave a bare `?` for none, which strict
/// servers answer with 404.
pub fn with_query(url: &str, params: &[(&str, &str)]) -> Result<reqwest::Url, url::ParseError> {
    let mut url = reqwest::Url::parse(url)?;
    if !params.is_empty() {
        url.query_pairs_mut().extend_pairs(params);
    }
    Ok(url)
}

/// `host` or `host:port` of an http(s) URL, lower-case (`None` for anything else: a path, an
/// scp-like `git@host:path`).
pub fn url_host(url: &str) -> Option<String> {
    let parsed = reqwest::Url::parse(url).ok()?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return None;
    }
    let host = parsed.host_str()?.to_ascii_lowercase();
    Some(match parsed.port() {
        Some(port) => format!("{host}:{port}"),
        None => host,
    })
}

/// Checks a URL and every address its host resolves to (at delivery time).
pub async fn check_destination(url: &str, allow: &[String]) -> Result<reqwest::Url, DestinationError> {
    let parsed = check_url(url, allow)?;
    if let Some(url::Host::Domain(d)) = parsed.host() {
        let port = parsed.port_or_known_default().unwrap_or(443);
        let addrs = tokio::net::lookup_host((d, port)).await.map_err(|e| DestinationError::Unresolvable(d.to_owned(), e.to_string()))?;
        for addr in addrs {
            check_ip(addr.ip(), allow)?;
        }
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_component_keeps_only_unreserved_characters() {
        assert_eq!(percent_encode("a b/c"), "a%20b%2Fc");
        assert_eq!(percent_encode("gpt-4o_mini.2~x"), "gpt-4o_mini.2~x");
        assert_eq!(percent_encode("é?&="), "%C3%A9%3F%26%3D");
    }

    #[test]
    fn no_parameters_no_question_mark() {
        assert_eq!(with_query("http://127.0.0.1:9/v1/models", &[]).unwrap().as_str(), "http://127.0.0.1:9/v1/models");
        let url = with_query("http://127.0.0.1:9/v1/models", &[("limit", "1000")]).unwrap();
        assert_eq!(url.as_str(), "http://127.0.0.1:9/v1/models?limit=1000");
    }

    #[test]
    fn hosts_of_repository_urls() {
        assert_eq!(url_host("https://GitHub.com/o/r.git").as_deref(), Some("github.com"));
        assert_eq!(url_host("http://127.0.0.1:8080/r.git").as_deref(), Some("127.0.0.1:8080"));
        assert_eq!(url_host("/srv/repo"), None);
        assert_eq!(url_host("git@github.com:o/r.git"), None);
    }

    #[test]
    fn private_destinations_need_permission() {
        let none: Vec<String> = Vec::new();
        let loopback = vec!["loopback".to_owned()];
        assert!(check_url("http://127.0.0.1:9/x", &none).is_err());
        assert!(check_url("http://127.0.0.1:9/x", &loopback).is_ok());
        assert!(check_url("http://localhost:9/x", &none).is_err());
        assert!(check_url("http://10.1.2.3/x", &loopback).is_err());
        assert!(check_url("http://192.168.1.1/x", &none).is_err());
        assert!(check_url("http://169.254.169.254/latest", &loopback).is_err());
        assert!(check_url("http://[::1]/x", &none).is_err());
        assert!(check_url("http://[fd00::1]/x", &none).is_err());
        assert!(check_url("http://[::ffff:10.0.0.1]/x", &none).is_err());
        assert!(check_url("https://hooks.example.com/x", &none).is_ok());
        assert!(check_url("http://8.8.8.8/x", &none).is_ok());
        assert!(check_url("ftp://example.com/x", &none).is_err());
        assert!(check_url("http://user:pw@example.com/x", &none).is_err());
        assert!(check_url("not a url", &none).is_err());
    }
}

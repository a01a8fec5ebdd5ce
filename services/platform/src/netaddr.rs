//! Client addresses as the gateway judges them: CIDR ranges (trusted proxies), the group an
//! address counts in for limits (an IPv6 client owns a whole /64, so it is one client), and the
//! site a host name belongs to (apps must be served from another site than the web workspace).

use std::net::IpAddr;

/// An address range: `10.0.0.0/8`, `::1` (one address), `fd00::/8`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    bits: u8,
}

impl Cidr {
    pub fn parse(s: &str) -> Option<Self> {
        let (addr, bits) = match s.trim().split_once('/') {
            Some((a, b)) => (a.parse::<IpAddr>().ok()?, Some(b.parse::<u8>().ok()?)),
            None => (s.trim().parse::<IpAddr>().ok()?, None),
        };
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let bits = bits.unwrap_or(max);
        (bits <= max).then_some(Self { net: addr, bits })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        match (canonical(self.net), ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => prefix_eq(u128::from(u32::from(n)) << 96, u128::from(u32::from(a)) << 96, self.bits),
            (IpAddr::V6(n), IpAddr::V6(a)) => prefix_eq(u128::from(n), u128::from(a), self.bits),
            _ => false,
        }
    }
}

fn prefix_eq(a: u128, b: u128, bits: u8) -> bool {
    bits == 0 || (a ^ b) >> (128 - u32::from(bits)) == 0
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The key a client address counts under in per-client limits: IPv4 as it is, IPv6 by its /64
/// (one subscriber holds a whole /64 and can rotate through it at will).
pub fn client_group(ip: IpAddr) -> String {
    match canonical(ip) {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
    }
}

/// The client of a request that reached us from `peer` with these `X-Forwarded-For` values:
/// `peer` itself, unless it is a trusted proxy; then the nearest address in the header that is
/// not one (the right end is what our proxies saw; anything left of it the client may forge).
pub fn client_address<'a>(peer: IpAddr, forwarded_for: impl Iterator<Item = &'a str>, trusted: &[Cidr]) -> IpAddr {
    if !trusted.iter().any(|c| c.contains(peer)) {
        return peer;
    }
    let hops: Vec<&str> = forwarded_for.flat_map(|v| v.split(',')).map(str::trim).filter(|s| !s.is_empty()).collect();
    for hop in hops.iter().rev() {
        match hop.parse::<IpAddr>() {
            Ok(ip) if trusted.iter().any(|c| c.contains(ip)) => continue,
            Ok(ip) => return ip,
            // Garbage in the chain: the last proxy we trust is the best we know.
            Err(_) => return peer,
        }
    }
    peer
}

/// The site (registrable domain) of a host: an address is its own site, `localhost` and
/// `*.localhost` are the site `localhost`, and a name is its last two labels, or three under
/// the common second-level registries of country domains (`example.co.uk`). A close
/// approximation of the public suffix list, which errs towards calling two hosts one site.
pub fn site(host: &str) -> String {
    let host = host.trim().trim_end_matches('.').to_ascii_lowercase();
    let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
    if host.parse::<IpAddr>().is_ok() {
        return host;
    }
    let labels: Vec<&str> = host.split('.').filter(|l| !l.is_empty()).collect();
    let n = labels.len();
    if n <= 2 {
        return labels.last().filter(|l| **l == "localhost").map_or_else(|| labels.join("."), |l| (*l).to_owned());
    }
    if labels[n - 1] == "localhost" {
        return "localhost".into();
    }
    let second_level = ["co", "com", "net", "org", "gov", "edu", "ac", "or", "ne", "go"];
    let take = if labels[n - 1].len() == 2 && second_level.contains(&labels[n - 2]) { 3 } else { 2 };
    labels[n - take..].join(".")
}

/// The host of `http(s)://host[:port]/...` (or of a bare `host:port`).
pub fn host_of(url_or_addr: &str) -> &str {
    let rest = url_or_addr.split_once("://").map_or(url_or_addr, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split(']').next().unwrap_or_default();
    }
    // One colon: host:port. More: a bare IPv6 address.
    match authority.matches(':').count() {
        1 => authority.split(':').next().unwrap_or_default(),
        _ => authority,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ranges_hold_what_they_say() {
        let c = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(c.contains(ip("10.9.8.7")) && !c.contains(ip("11.0.0.1")));
        assert!(c.contains(ip("::ffff:10.1.1.1")), "a mapped address is the IPv4 one");
        assert!(Cidr::parse("::1").unwrap().contains(ip("::1")));
        assert!(Cidr::parse("fd00::/8").unwrap().contains(ip("fd12::1")));
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("1.2.3.4")));
        assert!(Cidr::parse("10.0.0.0/33").is_none() && Cidr::parse("proxy").is_none());
    }

    #[test]
    fn ipv6_clients_count_by_their_64() {
        assert_eq!(client_group(ip("2001:db8:1:2:aaaa::1")), client_group(ip("2001:db8:1:2:bbbb::9")));
        assert_ne!(client_group(ip("2001:db8:1:2::1")), client_group(ip("2001:db8:1:3::1")));
        assert_eq!(client_group(ip("::ffff:192.0.2.1")), "192.0.2.1");
    }

    #[test]
    fn forwarded_for_counts_only_behind_a_trusted_proxy() {
        let trusted = [Cidr::parse("10.0.0.0/8").unwrap()];
        // Not from a proxy: the header is the client's own words.
        assert_eq!(client_address(ip("203.0.113.5"), ["1.1.1.1"].into_iter(), &trusted), ip("203.0.113.5"));
        // From the proxy: the nearest untrusted hop, whatever the client put before it.
        assert_eq!(client_address(ip("10.0.0.2"), ["6.6.6.6, 198.51.100.7, 10.0.0.3"].into_iter(), &trusted), ip("198.51.100.7"));
        assert_eq!(client_address(ip("10.0.0.2"), std::iter::empty(), &trusted), ip("10.0.0.2"));
    }

    #[test]
    fn sites_are_registrable_domains() {
        assert_eq!(site("app.example.com"), "example.com");
        assert_eq!(site("x.y.example.co.uk"), "example.co.uk");
        assert_eq!(site("abc-worker-1.localhost"), "localhost");
        assert_eq!(site("127.0.0.1"), "127.0.0.1");
        assert_ne!(site("apps.example-usercontent.com"), site("halyard.example.com"));
        assert_eq!(host_of("http://[::1]:3000/x"), "::1");
        assert_eq!(host_of("127.0.0.1:3000"), "127.0.0.1");
        assert_eq!(host_of("https://user@halyard.example.com/"), "halyard.example.com");
    }
}

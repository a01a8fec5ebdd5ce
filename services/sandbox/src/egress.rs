//! A sandbox's network class ([`Egress`]: `open`, `internet`, `none`, and `policy` for the
//! sandboxes held to an outbound policy by domain, whose only way out is the egress proxy) and
//! the addresses the `internet` class may never reach, whichever kind of sandbox enforces it.

/// Where a sandbox may connect to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Egress {
    Open,
    Internet,
    None,
    /// An internal network whose one destination is the egress proxy on the host's side of it
    /// ([`crate::egress_proxy`]); never named by a spec, taken by a sandbox whose shape has
    /// egress rules.
    Policy,
}

/// Destinations an `internet` sandbox may not reach: private (RFC 1918), carrier-grade NAT,
/// loopback, link-local (cloud metadata services live there), benchmarking, multicast and
/// reserved ranges.
pub const BLOCKED_FOR_INTERNET: [&str; 9] = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "224.0.0.0/3",
];

impl Egress {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "" | "open" => Ok(Self::Open),
            "internet" => Ok(Self::Internet),
            "none" => Ok(Self::None),
            "policy" => Ok(Self::Policy),
            other => Err(format!("unknown egress `{other}`: use open, internet or none")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Internet => "internet",
            Self::None => "none",
            Self::Policy => "policy",
        }
    }

    /// Whether ports can be published on the host (not on an internal network).
    pub fn publishes_ports(self) -> bool {
        !matches!(self, Self::None | Self::Policy)
    }

    /// A network class with no way out but what the firewall lets through.
    pub fn internal(self) -> bool {
        matches!(self, Self::None | Self::Policy)
    }
}

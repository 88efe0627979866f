//! Declared egress: the origins a component may call over HTTP(S).
//!
//! A component lists origins in its manifest (`egress`, contract 0.4.0);
//! the host refuses every other request before a connection is made
//! ([`runtime::imports::http`](crate::runtime::imports)). An origin is
//! `SCHEME://HOST[:PORT]`:
//!
//! - scheme `http` or `https`;
//! - host a DNS name (`api.example.com`), `*.` and a domain of at least two
//!   labels for any name below it (`*.example.com` matches
//!   `a.example.com` and `a.b.example.com`, not `example.com`), or an IP
//!   address (`127.0.0.1`, `[::1]`);
//! - port a number or a range `LOW-HIGH`; the scheme's default (80, 443)
//!   when left out.
//!
//! Nothing else is accepted: no path, query, user information, and no bare
//! `*` unless the host runs with `--allow-wildcard-egress`. Names are
//! compared in lower case; an IP address matches only the same address
//! written as an IP (a name that resolves to it does not).
//!
//! ```
//! use capstan_host::manifest::egress::Egress;
//!
//! let egress = Egress::parse(&["https://*.example.com".to_owned(), "http://127.0.0.1:9093".to_owned()]).unwrap();
//! assert!(egress.allows("https", "api.example.com", 443).is_some());
//! assert!(egress.allows("http", "127.0.0.1", 9093).is_some());
//! assert!(egress.allows("http", "127.0.0.1", 9094).is_none());
//! assert!(egress.allows("http", "169.254.169.254", 80).is_none());
//! ```

use std::fmt;
use std::net::IpAddr;
use std::ops::RangeInclusive;

/// Most origins one manifest declares.
pub const MAX_ORIGINS: usize = 64;
/// Longest origin, in bytes.
pub const MAX_ORIGIN_LEN: usize = 300;

/// Why a declared origin is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("egress[{index}]: {reason}")]
pub struct Error {
    /// Position in `egress`.
    pub index: usize,
    /// What is wrong, naming the origin (cut to [`MAX_ORIGIN_LEN`]).
    pub reason: String,
}

/// A host part of an origin.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Host {
    /// Any host: a bare `*` (only with `--allow-wildcard-egress`).
    Any,
    /// Exactly this DNS name, lower case.
    Name(String),
    /// Any name below this domain (`*.example.com` is stored as
    /// `.example.com`).
    Below(String),
    /// This IP address.
    Ip(IpAddr),
}

/// One declared origin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// As declared (the metrics' `origin` label and what `inspect` shows).
    declared: String,
    https: bool,
    host: Host,
    ports: RangeInclusive<u16>,
}

impl Origin {
    /// The origin as declared.
    pub fn as_str(&self) -> &str {
        &self.declared
    }

    /// True if this is a bare `*` (any host).
    pub fn is_wildcard(&self) -> bool {
        self.host == Host::Any
    }

    /// The scheme, `http` or `https`.
    pub fn scheme(&self) -> &'static str {
        if self.https { "https" } else { "http" }
    }

    /// The ports it allows.
    pub fn ports(&self) -> RangeInclusive<u16> {
        self.ports.clone()
    }

    /// The IP address it names, if it names one (a NetworkPolicy can
    /// allow exactly that address; a name cannot be written as one).
    pub fn ip(&self) -> Option<IpAddr> {
        match self.host {
            Host::Ip(ip) => Some(ip),
            _ => None,
        }
    }

    fn matches(&self, https: bool, host: &str, port: u16) -> bool {
        if self.https != https || !self.ports.contains(&port) {
            return false;
        }
        match &self.host {
            Host::Any => true,
            Host::Name(name) => host.eq_ignore_ascii_case(name),
            Host::Below(domain) => {
                host.len() > domain.len()
                    && host.is_char_boundary(host.len() - domain.len())
                    && host[host.len() - domain.len()..].eq_ignore_ascii_case(domain)
            }
            Host::Ip(ip) => parse_ip(host).is_some_and(|h| h == *ip),
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.declared)
    }
}

/// The origins a component may call; empty (the default) allows none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Egress {
    origins: Vec<Origin>,
}

impl Egress {
    /// Parses and checks the declared origins (see the module docs).
    ///
    /// # Errors
    ///
    /// The first origin that is malformed, or more than [`MAX_ORIGINS`].
    pub fn parse(declared: &[String]) -> Result<Self, Error> {
        if declared.len() > MAX_ORIGINS {
            return Err(Error {
                index: MAX_ORIGINS,
                reason: format!("{} origins declared, at most {MAX_ORIGINS}", declared.len()),
            });
        }
        let origins = declared
            .iter()
            .enumerate()
            .map(|(index, text)| parse_origin(text).map_err(|reason| Error { index, reason }))
            .collect::<Result<_, _>>()?;
        Ok(Self { origins })
    }

    /// The declared origins, in order.
    pub fn origins(&self) -> &[Origin] {
        &self.origins
    }

    /// True if nothing is declared: every request is refused.
    pub fn is_empty(&self) -> bool {
        self.origins.is_empty()
    }

    /// The first declared origin a bare `*` (any host), if any: the host
    /// refuses it unless run with `--allow-wildcard-egress`.
    pub fn wildcard(&self) -> Option<&Origin> {
        self.origins.iter().find(|o| o.is_wildcard())
    }

    /// The declared origin that allows a request to `scheme://host:port`,
    /// if one does. `host` is the request's host as written (an IPv6
    /// address in brackets or not).
    pub fn allows(&self, scheme: &str, host: &str, port: u16) -> Option<&Origin> {
        let https = match scheme {
            "https" => true,
            "http" => false,
            _ => return None,
        };
        self.origins.iter().find(|o| o.matches(https, host, port))
    }
}

/// An IP address as a URL writes it: `127.0.0.1`, `[::1]` or `::1`.
fn parse_ip(host: &str) -> Option<IpAddr> {
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    bare.parse().ok()
}

/// A DNS name of labels `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 253
/// bytes, not all digits in the last label (that would be an IP).
fn is_dns_name(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
        && !name.rsplit('.').next().is_some_and(|tld| tld.bytes().all(|b| b.is_ascii_digit()))
}

fn parse_origin(text: &str) -> Result<Origin, String> {
    let shown = crate::cluster::bounded(text, MAX_ORIGIN_LEN);
    let bad = |why: &str| format!("{shown:?}: {why} (expected SCHEME://HOST[:PORT], e.g. https://api.example.com)");
    if text.len() > MAX_ORIGIN_LEN {
        return Err(bad(&format!("longer than {MAX_ORIGIN_LEN} bytes")));
    }
    let (scheme, rest) = text.split_once("://").ok_or_else(|| bad("no scheme"))?;
    let https = match scheme {
        "https" => true,
        "http" => false,
        _ => return Err(bad("the scheme must be http or https")),
    };
    if rest.contains(['/', '?', '#']) {
        return Err(bad("an origin has no path, query or fragment"));
    }
    if rest.contains('@') {
        return Err(bad("an origin has no user information; credentials come from Secrets"));
    }
    if !rest.starts_with('[') && rest.matches(':').count() > 1 {
        return Err(bad("an IPv6 address goes in brackets"));
    }
    // `[v6]:port`, `[v6]`, `host:port`, `host`.
    let (host, port) = if let Some(after) = rest.strip_prefix('[') {
        let (inside, tail) = after.split_once(']').ok_or_else(|| bad("an IPv6 address without its closing ]"))?;
        let port = match tail {
            "" => None,
            _ => Some(tail.strip_prefix(':').ok_or_else(|| bad("text after the IPv6 address"))?),
        };
        (&rest[..inside.len() + 2], port)
    } else {
        match rest.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (rest, None),
        }
    };
    let default = if https { 443 } else { 80 };
    let ports = match port {
        None => default..=default,
        Some(p) => parse_ports(p).ok_or_else(|| bad("the port must be 1-65535 or a range LOW-HIGH"))?,
    };
    let host = if host == "*" {
        Host::Any
    } else if let Some(ip) = parse_ip(host) {
        Host::Ip(ip)
    } else if let Some(domain) = host.strip_prefix("*.") {
        if !is_dns_name(domain) || !domain.contains('.') {
            return Err(bad("a wildcard covers the names below a domain of two labels or more, e.g. *.example.com"));
        }
        Host::Below(format!(".{}", domain.to_ascii_lowercase()))
    } else if is_dns_name(host) {
        Host::Name(host.to_ascii_lowercase())
    } else {
        return Err(bad("the host must be a DNS name, *.DOMAIN or an IP address"));
    };
    Ok(Origin { declared: text.to_owned(), https, host, ports })
}

fn parse_ports(text: &str) -> Option<RangeInclusive<u16>> {
    // Digits only, no sign and no leading zero: `080` is not a port.
    let one = |p: &str| {
        (p.bytes().all(|b| b.is_ascii_digit()) && !p.starts_with('0')).then(|| p.parse::<u16>().ok()).flatten()
    };
    match text.split_once('-') {
        Some((low, high)) => {
            let (low, high) = (one(low)?, one(high)?);
            (low <= high).then_some(low..=high)
        }
        None => one(text).map(|p| p..=p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn egress(origins: &[&str]) -> Egress {
        Egress::parse(&origins.iter().map(|o| (*o).to_owned()).collect::<Vec<_>>()).expect("valid")
    }

    fn refused(origin: &str) -> String {
        Egress::parse(&[origin.to_owned()]).expect_err(origin).reason
    }

    #[test]
    fn names_match_exactly_and_without_case() {
        let e = egress(&["https://API.example.com"]);
        assert!(e.allows("https", "api.example.com", 443).is_some());
        assert!(e.allows("https", "Api.Example.Com", 443).is_some());
        assert!(e.allows("http", "api.example.com", 80).is_none(), "scheme");
        assert!(e.allows("https", "api.example.com", 8443).is_none(), "port");
        assert!(e.allows("https", "api.example.com.evil.test", 443).is_none());
        assert!(e.allows("https", "evilapi.example.com", 443).is_none());
        assert!(e.allows("ftp", "api.example.com", 443).is_none());
    }

    #[test]
    fn a_wildcard_covers_names_below_its_domain_only() {
        let e = egress(&["https://*.example.com"]);
        assert!(e.allows("https", "a.example.com", 443).is_some());
        assert!(e.allows("https", "a.b.example.com", 443).is_some());
        assert!(e.allows("https", "example.com", 443).is_none());
        assert!(e.allows("https", "badexample.com", 443).is_none());
        assert!(e.allows("https", "a.example.com.evil.test", 443).is_none());
    }

    #[test]
    fn ports_and_ranges() {
        let e = egress(&["http://127.0.0.1:9000-9100", "http://alertmanager.monitoring.svc:9093"]);
        assert!(e.allows("http", "127.0.0.1", 9000).is_some());
        assert!(e.allows("http", "127.0.0.1", 9100).is_some());
        assert!(e.allows("http", "127.0.0.1", 9101).is_none());
        assert!(e.allows("http", "127.0.0.1", 80).is_none());
        let hit = e.allows("http", "alertmanager.monitoring.svc", 9093).expect("declared");
        assert_eq!(hit.as_str(), "http://alertmanager.monitoring.svc:9093");
    }

    #[test]
    fn ip_addresses_match_only_themselves() {
        let e = egress(&["http://127.0.0.1:8080", "https://[::1]:8443"]);
        assert!(e.allows("http", "127.0.0.1", 8080).is_some());
        assert!(e.allows("http", "127.0.0.2", 8080).is_none());
        assert!(e.allows("http", "localhost", 8080).is_none(), "a name is not its address");
        assert!(e.allows("https", "[::1]", 8443).is_some());
        assert!(e.allows("https", "[0:0:0:0:0:0:0:1]", 8443).is_some(), "the same address, written longer");
        assert!(e.allows("http", "169.254.169.254", 80).is_none());
    }

    #[test]
    fn nothing_declared_allows_nothing() {
        let e = Egress::default();
        assert!(e.is_empty());
        assert!(e.allows("https", "example.com", 443).is_none());
    }

    #[test]
    fn a_bare_star_parses_but_is_marked() {
        let e = egress(&["https://*", "https://api.example.com"]);
        assert_eq!(e.wildcard().map(Origin::as_str), Some("https://*"));
        assert!(e.allows("https", "anything.test", 443).is_some());
        assert!(egress(&["https://api.example.com"]).wildcard().is_none());
    }

    #[test]
    fn malformed_origins_are_refused_with_the_reason() {
        assert!(refused("api.example.com").contains("no scheme"));
        assert!(refused("ftp://example.com").contains("http or https"));
        assert!(refused("https://example.com/path").contains("no path"));
        assert!(refused("https://example.com?q").contains("no path"));
        assert!(refused("https://user:pw@example.com").contains("user information"));
        assert!(refused("https://example.com:0").contains("port"));
        assert!(refused("https://example.com:65536").contains("port"));
        assert!(refused("https://example.com:9100-9000").contains("port"));
        assert!(refused("https://example.com:+80").contains("port"));
        assert!(refused("https://example.com:080").contains("port"));
        assert!(refused("https://*.com").contains("two labels"));
        assert!(refused("https://a.*.example.com").contains("host"));
        assert!(refused("https://exa_mple.com").contains("host"));
        assert!(refused("https://").contains("host"));
        assert!(refused("https://::1").contains("brackets"));
        assert!(refused("https://[::1").contains("closing"));
        assert!(refused("https://[::1]x").contains("after the IPv6"));
        assert!(refused("https://1.2.3.999").contains("host"));
        let long = format!("https://{}.example.com", "a".repeat(400));
        assert!(refused(&long).contains("longer than"));
        let many: Vec<String> = (0..=MAX_ORIGINS).map(|i| format!("https://h{i}.example.com")).collect();
        assert!(Egress::parse(&many).expect_err("too many").reason.contains("at most 64"));
    }
}

//! The NetworkPolicy of the host's Pods (`capstan gen manifest
//! --network-policy`): who may reach the host, and whom the host may reach.
//!
//! ```
//! use capstan_host::tooling::generate::Options;
//! use capstan_host::tooling::generate::network::Policy;
//!
//! let policy = Policy::new().pod_cidr("10.244.0.0/16".parse()?).api_server_cidr("172.18.0.2/32".parse()?);
//! let options = Options::default().network_policy(policy);
//! # let _ = options;
//! # Ok::<(), capstan_host::tooling::generate::network::Error>(())
//! ```
//!
//! One NetworkPolicy named `--name` (`capstan`) in the host's namespace
//! selects the host's Pods (by the labels of the Deployment's pod
//! template) and isolates them both ways (`policyTypes: [Ingress,
//! Egress]`). It allows, all over TCP unless said otherwise:
//!
//! | | port | peers | for |
//! |---|---|---|---|
//! | ingress | [`HEALTH_PORT`] (8080) | anywhere | the kubelet's probes, Prometheus |
//! | ingress | [`WEBHOOK_PORT`] (9443), only if a component serves webhooks | `0.0.0.0/0` except each IPv4 [Pod CIDR](Policy::pod_cidr); `::/0` except each IPv6 one | the API server, not other Pods |
//! | egress | 53, UDP and TCP | Pods labelled `k8s-app: kube-dns` in any namespace | DNS (CoreDNS keeps that label) |
//! | egress | 443 and 6443 ([`API_SERVER_PORTS`]) | each [API server CIDR](Policy::api_server_cidr), else anywhere | the API server |
//! | egress | each declared origin's port or range (`endPort`) | an IP address's `/32` or `/128`; anywhere for a name | the components' [declared egress](crate::manifest::egress) |
//! | egress | the port of each registry a component is given by (`oci://`), 443 by default | likewise | pulling and following components |
//! | egress | the trace collector's port, with [`Options::traces`] | likewise | exporting traces |
//!
//! Rules to the same peers are merged into one, ports that overlap or
//! touch are joined into a range, and peers allowed the same ports share a
//! rule; everything is sorted, so the same components and options give
//! the same policy.
//!
//! # Caveats
//!
//! - **Names.** A NetworkPolicy cannot name a host: an origin or a
//!   registry given by name (or `*.domain`, or `*`) is allowed to every
//!   address, on its ports only. The host's own check of each request
//!   against the declared origins is what holds the name; only an origin
//!   written as an IP address narrows the address.
//! - **"Anywhere" is a rule without peers**, not an `ipBlock` of
//!   `0.0.0.0/0`: CNIs differ on whether an ipBlock matches Pod and node
//!   addresses (Cilium matches Pods by identity, not address, and nodes
//!   only when configured to), and a name may well resolve to a Service
//!   in the cluster (`alertmanager.monitoring.svc`).
//! - **The API server** is reached at the `kubernetes` Service's IP, which
//!   most CNIs rewrite to the endpoint's address before the policy
//!   applies: an ipBlock of the Service IP matches nothing. An API server
//!   CIDR is for the endpoints' addresses (`kubectl get endpointslices -n
//!   default -l kubernetes.io/service-name=kubernetes`). Without one, the
//!   API server's ports are allowed to every address.
//! - **The webhook port** keeps out other Pods, not a client on a node's
//!   network. An address family without a Pod CIDR is not admitted at
//!   all (give one per family in a dual-stack cluster). Where the API
//!   server's calls come from a Pod address (a proxy such as Konnectivity
//!   running as Pods) or from a node address the CNI does not match with
//!   an ipBlock, the calls are refused: make a test call after applying.
//! - A CNI that does not enforce NetworkPolicy ignores it. Anything else
//!   the host is set up to reach (an OTLP collector, `--otlp-endpoint`)
//!   needs a NetworkPolicy of its own: NetworkPolicies add up.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

use super::{Component, HEALTH_PORT, Options, WEBHOOK_PORT, to_value};

/// The ports egress to the API server is allowed on: 443 (managed
/// clusters, and the `kubernetes` Service) and 6443 (kubeadm and most
/// self-run API servers).
pub const API_SERVER_PORTS: [u16; 2] = [443, 6443];

/// DNS, over UDP and TCP.
const DNS_PORT: u16 = 53;

/// The port of a registry named without one: the host speaks HTTPS to
/// every registry in the cluster (the Deployment passes no
/// `--insecure-registry`; a loopback registry, spoken to over HTTP, is the
/// Pod itself, which no NetworkPolicy governs).
const REGISTRY_PORT: u16 = 443;

/// Why a network policy cannot be generated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A CIDR does not parse, or has bits set past its prefix.
    #[error("invalid CIDR {0:?}: expected ADDRESS/PREFIX with no bits set past the prefix, e.g. 10.244.0.0/16")]
    Cidr(String),
    /// A component serves webhooks and no Pod CIDR was given: the webhook
    /// port would be open to other Pods.
    #[error(
        "a component serves webhooks: the network policy needs the Pod network's address range (--pod-cidr CIDR) \
         to admit the webhook port from outside it only"
    )]
    PodCidrRequired,
    /// A Pod CIDR covers its whole address family.
    #[error("pod CIDR {0} covers every address of its family: give the Pod network's address range")]
    PodCidrCoversAll(Cidr),
}

/// A block of IP addresses, `ADDRESS/PREFIX` (`10.244.0.0/16`,
/// `fd00:10:244::/56`), as an ipBlock takes it: no bits set past the
/// prefix.
///
/// ```
/// use capstan_host::tooling::generate::network::Cidr;
///
/// let cidr: Cidr = "10.244.0.0/16".parse().unwrap();
/// assert_eq!(cidr.to_string(), "10.244.0.0/16");
/// assert!("10.244.0.1/16".parse::<Cidr>().is_err(), "bits past the prefix");
/// assert_eq!(Cidr::address("fd00::7".parse().unwrap()).to_string(), "fd00::7/128");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cidr {
    address: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Exactly `address`: `/32`, or `/128` for IPv6 (an IPv4-mapped IPv6
    /// address is taken as the IPv4 address).
    pub fn address(address: IpAddr) -> Self {
        let address = address.to_canonical();
        Self { address, prefix: max_prefix(address) }
    }

    /// Every address of a family: `0.0.0.0/0` or `::/0`.
    fn everything(ipv6: bool) -> Self {
        let address = if ipv6 { IpAddr::from([0u16; 8]) } else { IpAddr::from([0u8; 4]) };
        Self { address, prefix: 0 }
    }

    /// True for an IPv6 block.
    pub fn is_ipv6(&self) -> bool {
        self.address.is_ipv6()
    }
}

fn max_prefix(address: IpAddr) -> u8 {
    if address.is_ipv4() { 32 } else { 128 }
}

impl FromStr for Cidr {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let invalid = || Error::Cidr(s.to_owned());
        let (address, prefix) = s.split_once('/').ok_or_else(invalid)?;
        let address: IpAddr = address.parse().map_err(|_| invalid())?;
        // Digits only, no sign and no leading zero.
        if prefix.is_empty()
            || !prefix.bytes().all(|b| b.is_ascii_digit())
            || (prefix.len() > 1 && prefix.starts_with('0'))
        {
            return Err(invalid());
        }
        let prefix: u8 = prefix.parse().map_err(|_| invalid())?;
        let max = max_prefix(address);
        if prefix > max {
            return Err(invalid());
        }
        let bits = match address {
            IpAddr::V4(a) => u128::from(u32::from(a)),
            IpAddr::V6(a) => u128::from(a),
        };
        let past_prefix = u32::from(max - prefix);
        let mask = 1u128.checked_shl(past_prefix).map_or(u128::MAX, |m| m - 1);
        if bits & mask != 0 {
            return Err(invalid());
        }
        Ok(Self { address, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix)
    }
}

/// What the NetworkPolicy needs to know of the cluster (see the [module
/// docs](self)). Every default is documented on its builder method.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct Policy {
    pod_cidrs: Vec<Cidr>,
    api_server_cidrs: Vec<Cidr>,
}

impl Policy {
    /// A policy with no Pod CIDR and no API server CIDR.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an address range of the Pod network (`--pod-cidr`): the
    /// webhook port admits every address of its family but these.
    /// Default: none; required when a component serves webhooks
    /// ([`Error::PodCidrRequired`]), one per address family in a
    /// dual-stack cluster.
    pub fn pod_cidr(mut self, cidr: Cidr) -> Self {
        self.pod_cidrs.push(cidr);
        self
    }

    /// Adds an address range of the API server's endpoints
    /// (`--api-server-cidr`; not the `kubernetes` Service's IP, see the
    /// [caveats](self#caveats)): egress on [`API_SERVER_PORTS`] goes there
    /// only. Default: none, those ports to any address.
    pub fn api_server_cidr(mut self, cidr: Cidr) -> Self {
        self.api_server_cidrs.push(cidr);
        self
    }

    fn check(&self) -> Result<(), Error> {
        match self.pod_cidrs.iter().find(|c| c.prefix == 0) {
            Some(all) => Err(Error::PodCidrCoversAll(*all)),
            None => Ok(()),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Protocol {
    Tcp,
    Udp,
}

impl Protocol {
    fn as_str(self) -> &'static str {
        match self {
            Self::Tcp => "TCP",
            Self::Udp => "UDP",
        }
    }
}

/// A protocol and an inclusive range of ports.
type Ports = (Protocol, u16, u16);

/// Where egress goes, in the order rules are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum To {
    /// The cluster's DNS Pods.
    Dns,
    /// Any address: a rule without peers.
    Anywhere,
    /// An ipBlock.
    Block(Cidr),
}

impl To {
    fn peer(self) -> Option<NetworkPolicyPeer> {
        match self {
            Self::Dns => Some(NetworkPolicyPeer {
                namespace_selector: Some(LabelSelector::default()),
                pod_selector: Some(LabelSelector {
                    match_labels: Some(BTreeMap::from([("k8s-app".to_owned(), "kube-dns".to_owned())])),
                    ..LabelSelector::default()
                }),
                ..NetworkPolicyPeer::default()
            }),
            Self::Anywhere => None,
            Self::Block(cidr) => Some(block(cidr, Vec::new())),
        }
    }
}

fn block(cidr: Cidr, except: Vec<String>) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        ip_block: Some(IPBlock { cidr: cidr.to_string(), except: (!except.is_empty()).then_some(except) }),
        ..NetworkPolicyPeer::default()
    }
}

/// `ports`, sorted, with ranges of a protocol that overlap or touch
/// joined.
fn join(ports: &BTreeSet<Ports>) -> Vec<Ports> {
    let mut joined: Vec<Ports> = Vec::new();
    for &(protocol, low, high) in ports {
        match joined.last_mut() {
            Some(last) if last.0 == protocol && u32::from(low) <= u32::from(last.2) + 1 => last.2 = last.2.max(high),
            _ => joined.push((protocol, low, high)),
        }
    }
    joined
}

fn port((protocol, low, high): Ports) -> NetworkPolicyPort {
    NetworkPolicyPort {
        port: Some(IntOrString::Int(i32::from(low))),
        end_port: (high > low).then_some(i32::from(high)),
        protocol: Some(protocol.as_str().to_owned()),
    }
}

/// The address and port of a registry as a reference names it
/// (`ghcr.io`, `10.0.0.5:5000`; `[fd00::5]:5000`, should references ever
/// take IPv6 addresses).
fn registry_peer(registry: &str) -> (To, u16) {
    let (host, port) = match registry.rsplit_once(':') {
        Some((host, port)) if !port.ends_with(']') => (host, port.parse().ok()),
        _ => (registry, None),
    };
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    (host.parse().map_or(To::Anywhere, |ip| To::Block(Cidr::address(ip))), port.unwrap_or(REGISTRY_PORT))
}

/// What the host's Pods send to: DNS, the API server, the components'
/// declared origins and their registries, as rules, merged and sorted.
fn egress(
    components: &[Component],
    options: &Options,
    policy: &Policy,
) -> Result<Vec<NetworkPolicyEgressRule>, super::Error> {
    let mut allowed: BTreeMap<To, BTreeSet<Ports>> = BTreeMap::new();
    let mut allow = |to: To, ports: Ports| allowed.entry(to).or_default().insert(ports);
    allow(To::Dns, (Protocol::Udp, DNS_PORT, DNS_PORT));
    allow(To::Dns, (Protocol::Tcp, DNS_PORT, DNS_PORT));
    let api_server: Vec<To> = if policy.api_server_cidrs.is_empty() {
        vec![To::Anywhere]
    } else {
        policy.api_server_cidrs.iter().copied().map(To::Block).collect()
    };
    for to in api_server {
        for p in API_SERVER_PORTS {
            allow(to, (Protocol::Tcp, p, p));
        }
    }
    for c in components {
        for origin in c.manifest.egress.origins() {
            let to = origin.ip().map_or(To::Anywhere, |ip| To::Block(Cidr::address(ip)));
            let ports = origin.ports();
            allow(to, (Protocol::Tcp, *ports.start(), *ports.end()));
        }
        if let Some(reference) = &c.reference {
            let parsed: crate::serve::oci::Reference = reference
                .parse()
                .map_err(|error| super::Error::Reference { controller: c.manifest.name.clone(), error })?;
            let (to, p) = registry_peer(parsed.registry());
            allow(to, (Protocol::Tcp, p, p));
        }
    }
    if let Some(traces) = &options.traces {
        let to = traces.ip().map_or(To::Anywhere, |ip| To::Block(Cidr::address(ip)));
        allow(to, (Protocol::Tcp, traces.port(), traces.port()));
    }
    // Peers allowed the same ports share a rule; a rule without peers
    // (anywhere) stands alone, since it has no list to share.
    let mut rules: Vec<(Vec<To>, Vec<Ports>)> = Vec::new();
    for (to, ports) in allowed {
        let ports = join(&ports);
        match rules.iter_mut().find(|(peers, p)| *p == ports && to != To::Anywhere && peers[0] != To::Anywhere) {
            Some((peers, _)) => peers.push(to),
            None => rules.push((vec![to], ports)),
        }
    }
    Ok(rules
        .into_iter()
        .map(|(peers, ports)| NetworkPolicyEgressRule {
            ports: Some(ports.into_iter().map(port).collect()),
            to: peers.into_iter().map(To::peer).collect(),
        })
        .collect())
}

/// What may reach the host's Pods: the health port from anywhere, and with
/// webhooks the webhook port from outside the Pod network.
fn ingress(policy: &Policy, with_webhooks: bool) -> Result<Vec<NetworkPolicyIngressRule>, Error> {
    let health = u16::try_from(HEALTH_PORT).expect("HEALTH_PORT is a port number");
    let health = (Protocol::Tcp, health, health);
    let mut rules = vec![NetworkPolicyIngressRule { from: None, ports: Some(vec![port(health)]) }];
    if with_webhooks {
        if policy.pod_cidrs.is_empty() {
            return Err(Error::PodCidrRequired);
        }
        let from = [false, true]
            .into_iter()
            .filter_map(|ipv6| {
                let except: BTreeSet<Cidr> = policy.pod_cidrs.iter().copied().filter(|c| c.is_ipv6() == ipv6).collect();
                (!except.is_empty())
                    .then(|| block(Cidr::everything(ipv6), except.iter().map(Cidr::to_string).collect()))
            })
            .collect();
        rules.push(NetworkPolicyIngressRule {
            from: Some(from),
            ports: Some(vec![port((Protocol::Tcp, WEBHOOK_PORT, WEBHOOK_PORT))]),
        });
    }
    Ok(rules)
}

/// The NetworkPolicy of the host's Pods (see the [module docs](self));
/// `with_webhooks` when the host serves the components' webhooks.
///
/// # Errors
///
/// [`Error::PodCidrRequired`] with webhooks and no Pod CIDR,
/// [`Error::PodCidrCoversAll`], and [`super::Error::Reference`] for a
/// component reference that does not parse.
pub(crate) fn network_policy(
    components: &[Component],
    options: &Options,
    policy: &Policy,
    with_webhooks: bool,
) -> Result<Value, super::Error> {
    policy.check().map_err(super::Error::NetworkPolicy)?;
    let labels = options.labels(None);
    let object = NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(options.name.clone()),
            namespace: Some(options.namespace.clone()),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector { match_labels: Some(labels), ..LabelSelector::default() }),
            policy_types: Some(vec!["Ingress".to_owned(), "Egress".to_owned()]),
            ingress: Some(ingress(policy, with_webhooks).map_err(super::Error::NetworkPolicy)?),
            egress: Some(egress(components, options, policy)?),
        }),
    };
    to_value(&object)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::manifest::egress::Egress;
    use crate::manifest::{AdmissionWebhook, Manifest, Operation};
    use crate::object::Gvk;

    /// A component of controller `name` declaring `origins` as egress.
    fn component(name: &str, origins: &[&str]) -> Component {
        let mut manifest = Manifest::bare(name, Gvk::new("", "v1", "ConfigMap"));
        let origins: Vec<String> = origins.iter().map(|o| (*o).to_owned()).collect();
        manifest.egress = Egress::parse(&origins).expect("valid origins");
        Component::new(manifest, Vec::new())
    }

    /// `component`, serving a validating webhook.
    fn with_webhook(mut c: Component) -> Component {
        c.manifest.roles.admission = vec![AdmissionWebhook {
            name: "validate.example.com".into(),
            mutating: false,
            kinds: vec![Gvk::new("", "v1", "ConfigMap")],
            operations: vec![Operation::Create],
            ignore_failures: false,
            timeout: std::time::Duration::from_secs(5),
            side_effects_on_dry_run: false,
            namespace_selector: None,
            object_selector: None,
        }];
        c
    }

    fn cidr(s: &str) -> Cidr {
        s.parse().expect(s)
    }

    fn generate(components: &[Component], policy: Policy) -> Result<Value, super::super::Error> {
        super::super::manifest(components, &Options::default().network_policy(policy)).map(|objects| {
            objects.into_iter().find(|o| o["kind"] == "NetworkPolicy").expect("a NetworkPolicy is generated")
        })
    }

    #[test]
    fn a_trace_collector_is_allowed_on_its_port_at_its_address_or_anywhere_for_a_name() {
        use super::super::trace::Traces;
        use crate::telemetry::Protocol;
        let policy_with = |endpoint: &str| {
            let traces = Traces::new(endpoint, Protocol::Grpc).expect("valid endpoint");
            let options = Options::default().network_policy(Policy::new()).traces(traces);
            let objects = super::super::manifest(&[component("a", &[])], &options).expect("generates");
            objects.into_iter().find(|o| o["kind"] == "NetworkPolicy").expect("a NetworkPolicy is generated")
        };
        let egress = &policy_with("http://10.0.0.9:4317")["spec"]["egress"];
        assert_eq!(egress.as_array().map(Vec::len), Some(3), "{egress}");
        assert_eq!(
            egress[2],
            json!({"to": [{"ipBlock": {"cidr": "10.0.0.9/32"}}], "ports": [{"port": 4317, "protocol": "TCP"}]})
        );
        let egress = &policy_with("https://otel-collector.observability")["spec"]["egress"];
        assert_eq!(
            egress[1],
            json!({"ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]}),
            "a name on 443 is anywhere on 443, which the API server's rule already allows: {egress}"
        );
        assert_eq!(egress.as_array().map(Vec::len), Some(2), "{egress}");
    }

    #[test]
    fn without_egress_or_webhooks_the_host_gets_its_health_port_dns_and_the_api_server() {
        let policy = generate(&[component("a", &[])], Policy::new()).expect("generates");
        let labels = json!({"app.kubernetes.io/name": "capstan", "app.kubernetes.io/part-of": "capstan"});
        assert_eq!(policy["metadata"]["name"], "capstan");
        assert_eq!(policy["metadata"]["namespace"], "capstan-system");
        assert_eq!(policy["spec"]["podSelector"], json!({"matchLabels": labels}));
        assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
        assert_eq!(policy["spec"]["ingress"], json!([{"ports": [{"port": 8080, "protocol": "TCP"}]}]));
        let dns = json!({"namespaceSelector": {}, "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}});
        assert_eq!(
            policy["spec"]["egress"],
            json!([
                {"to": [dns], "ports": [{"port": 53, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]},
                {"ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]},
            ])
        );
    }

    #[test]
    fn the_pod_selector_selects_the_deployments_pods() {
        let options = Options::default().name("ops").network_policy(Policy::new());
        let objects = super::super::manifest(&[component("a", &[])], &options).expect("generates");
        let find = |kind: &str| objects.iter().find(|o| o["kind"] == kind).expect(kind);
        let pod_labels = &find("Deployment")["spec"]["template"]["metadata"]["labels"];
        assert_eq!(find("NetworkPolicy")["spec"]["podSelector"]["matchLabels"], *pod_labels);
        assert_eq!(find("NetworkPolicy")["metadata"]["name"], "ops");
    }

    #[test]
    fn the_webhook_port_admits_every_address_but_the_pod_network() {
        let c = [with_webhook(component("a", &[]))];
        let policy = Policy::new().pod_cidr(cidr("10.244.0.0/16")).pod_cidr(cidr("10.96.0.0/12"));
        let ingress = &generate(&c, policy).expect("generates")["spec"]["ingress"];
        assert_eq!(
            ingress[1],
            json!({"from": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.96.0.0/12", "10.244.0.0/16"]}}],
                   "ports": [{"port": 9443, "protocol": "TCP"}]})
        );
        // Dual-stack: one block per family given, and none for a family
        // without a Pod CIDR.
        let policy = Policy::new().pod_cidr(cidr("fd00:10:244::/56")).pod_cidr(cidr("10.244.0.0/16"));
        let from = &generate(&c, policy).expect("generates")["spec"]["ingress"][1]["from"];
        assert_eq!(
            *from,
            json!([{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.244.0.0/16"]}},
                   {"ipBlock": {"cidr": "::/0", "except": ["fd00:10:244::/56"]}}])
        );
        let v6 = Policy::new().pod_cidr(cidr("fd00:10:244::/56"));
        let from = &generate(&c, v6).expect("generates")["spec"]["ingress"][1]["from"];
        assert_eq!(*from, json!([{"ipBlock": {"cidr": "::/0", "except": ["fd00:10:244::/56"]}}]));
    }

    #[test]
    fn webhooks_without_a_pod_cidr_are_refused_naming_the_flag() {
        let c = [with_webhook(component("a", &[]))];
        let err = generate(&c, Policy::new()).expect_err("the webhook port would be open to Pods");
        assert!(matches!(err, super::super::Error::NetworkPolicy(Error::PodCidrRequired)), "{err}");
        assert!(err.to_string().contains("--pod-cidr"), "{err}");
        let err = generate(&c, Policy::new().pod_cidr(cidr("0.0.0.0/0"))).expect_err("covers every address");
        assert!(matches!(err, super::super::Error::NetworkPolicy(Error::PodCidrCoversAll(_))), "{err}");
        // Without webhooks, no Pod CIDR is needed.
        generate(&[component("a", &[])], Policy::new()).expect("no webhook port");
    }

    #[test]
    fn an_ip_origin_is_its_address_and_a_name_is_any_address_on_its_ports() {
        let c = [component("a", &["http://10.0.0.7:9093", "https://api.example.com", "http://alertmanager.svc:9093"])];
        let egress = &generate(&c, Policy::new()).expect("generates")["spec"]["egress"];
        assert_eq!(
            egress[1],
            json!({"ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"},
                             {"port": 9093, "protocol": "TCP"}]}),
            "names: any address, on their ports, merged with the API server's"
        );
        assert_eq!(
            egress[2],
            json!({"to": [{"ipBlock": {"cidr": "10.0.0.7/32"}}], "ports": [{"port": 9093, "protocol": "TCP"}]})
        );
        let v6 = [component("a", &["https://[fd00::7]:8443", "https://[::ffff:10.0.0.8]"])];
        let egress = &generate(&v6, Policy::new()).expect("generates")["spec"]["egress"];
        assert_eq!(egress[2]["to"], json!([{"ipBlock": {"cidr": "10.0.0.8/32"}}]), "IPv4-mapped: the IPv4 address");
        assert_eq!(egress[3]["to"], json!([{"ipBlock": {"cidr": "fd00::7/128"}}]));
        assert_eq!(egress[3]["ports"], json!([{"port": 8443, "protocol": "TCP"}]));
    }

    #[test]
    fn a_port_range_becomes_port_and_end_port_and_ranges_that_touch_are_joined() {
        let c = [
            component("a", &["http://10.0.0.7:9000-9100", "http://10.0.0.7:9101"]),
            component("b", &["http://10.0.0.7:9050", "http://10.0.0.7:20000-20010"]),
        ];
        let egress = &generate(&c, Policy::new()).expect("generates")["spec"]["egress"];
        assert_eq!(
            egress[2],
            json!({"to": [{"ipBlock": {"cidr": "10.0.0.7/32"}}],
                   "ports": [{"port": 9000, "endPort": 9101, "protocol": "TCP"},
                             {"port": 20000, "endPort": 20010, "protocol": "TCP"}]})
        );
    }

    #[test]
    fn api_server_cidrs_and_peers_with_the_same_ports_share_a_rule() {
        let policy = Policy::new().api_server_cidr(cidr("172.18.0.0/24")).api_server_cidr(cidr("10.0.0.1/32"));
        let egress =
            &generate(&[component("a", &["https://10.0.0.9:6443"])], policy).expect("generates")["spec"]["egress"];
        assert_eq!(egress.as_array().map(Vec::len), Some(3), "{egress}");
        assert_eq!(
            egress[1]["to"],
            json!([{"ipBlock": {"cidr": "10.0.0.1/32"}}, {"ipBlock": {"cidr": "172.18.0.0/24"}}])
        );
        assert_eq!(egress[1]["ports"], json!([{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]));
        assert_eq!(egress[2]["to"], json!([{"ipBlock": {"cidr": "10.0.0.9/32"}}]), "other ports: a rule of its own");
    }

    #[test]
    fn the_registries_of_referenced_components_are_allowed_on_their_ports() {
        let c = [
            component("a", &[]).reference("oci://ghcr.io/ops/a:v1"),
            component("b", &[]).reference("oci://10.0.0.5:5000/ops/b:v1"),
            component("c", &[]).reference("oci://registry.lan:8443/ops/c:v1"),
            component("d", &[]).reference("oci://10.0.0.6:5000/ops/d:v1"),
        ];
        let egress = &generate(&c, Policy::new()).expect("generates")["spec"]["egress"];
        assert_eq!(
            egress[1]["ports"],
            json!([{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"},
                   {"port": 8443, "protocol": "TCP"}])
        );
        assert_eq!(
            egress[2],
            json!({"to": [{"ipBlock": {"cidr": "10.0.0.5/32"}}, {"ipBlock": {"cidr": "10.0.0.6/32"}}],
                   "ports": [{"port": 5000, "protocol": "TCP"}]})
        );
        let v6: Cidr = "fd00::5/128".parse().expect("valid");
        assert_eq!(registry_peer("[fd00::5]:5000"), (To::Block(v6), 5000));
        assert_eq!(registry_peer("[fd00::5]"), (To::Block(v6), 443));
        assert_eq!(registry_peer("docker.io"), (To::Anywhere, 443));
    }

    #[test]
    fn the_output_does_not_depend_on_the_order_of_components_or_origins() {
        let a = component("a", &["http://10.0.0.7:9093", "https://*.example.com", "http://10.0.0.2:80"]);
        let b = component("b", &["http://10.0.0.2:81", "https://[fd00::1]:8443-8444"]);
        let policy = Policy::new().api_server_cidr(cidr("10.0.0.1/32")).api_server_cidr(cidr("10.0.0.0/32"));
        let reversed = Policy::new().api_server_cidr(cidr("10.0.0.0/32")).api_server_cidr(cidr("10.0.0.1/32"));
        let one = generate(&[a.clone(), b.clone()], policy.clone()).expect("generates");
        assert_eq!(one, generate(&[a.clone(), b.clone()], policy).expect("again"));
        let mut b2 = b.clone();
        b2.manifest.egress =
            Egress::parse(&["https://[fd00::1]:8443-8444".to_owned(), "http://10.0.0.2:81".to_owned()]).expect("valid");
        let mut a2 = a;
        a2.manifest.egress = Egress::parse(&[
            "http://10.0.0.2:80".to_owned(),
            "https://*.example.com".to_owned(),
            "http://10.0.0.7:9093".to_owned(),
        ])
        .expect("valid");
        let two = super::super::manifest(&[b2, a2], &Options::default().network_policy(reversed)).expect("generates");
        let two = two.iter().find(|o| o["kind"] == "NetworkPolicy").expect("generated");
        assert_eq!(one["spec"], two["spec"]);
        // 10.0.0.2 on 80 and 81: one range.
        let peers: Vec<&Value> = one["spec"]["egress"].as_array().expect("rules").iter().collect();
        let ten_two = peers.iter().find(|r| r["to"][0]["ipBlock"]["cidr"] == "10.0.0.2/32").expect("10.0.0.2");
        assert_eq!(ten_two["ports"], json!([{"port": 80, "endPort": 81, "protocol": "TCP"}]));
    }

    #[test]
    fn off_by_default_and_left_out_without_the_deployment() {
        let c = [component("a", &["https://api.example.com"])];
        let kinds = |options: &Options| -> Vec<String> {
            let objects = super::super::manifest(&c, options).expect("generates");
            objects.iter().filter_map(|o| o["kind"].as_str().map(str::to_owned)).collect()
        };
        assert!(!kinds(&Options::default()).contains(&"NetworkPolicy".to_owned()));
        let without = Options::default().skip_deployment(true).network_policy(Policy::new());
        assert!(!kinds(&without).contains(&"NetworkPolicy".to_owned()), "no host Pod to select");
        let files = super::super::files(&c, &Options::default().network_policy(Policy::new())).expect("generates");
        let paths: Vec<String> = files.iter().map(|f| f.path.display().to_string()).collect();
        let at = |p: &str| paths.iter().position(|x| x == p).expect(p);
        assert!(at("network-policy.yaml") < at("deployment.yaml"), "in place before the Pod starts: {paths:?}");
    }

    #[test]
    fn a_kustomize_overlay_adds_the_policy() {
        let c = [component("a", &["https://api.example.com"])];
        let options = Options::default().network_policy(Policy::new());
        let files = super::super::kustomize(&c, &options, Some("../base")).expect("generates");
        let kustomization = files.last().expect("kustomization");
        assert!(
            kustomization.objects[0]["resources"]
                .as_array()
                .expect("resources")
                .contains(&json!("network-policy.yaml")),
            "{:?}",
            kustomization.objects[0]
        );
    }

    #[test]
    fn cidrs_parse_as_an_ip_block_takes_them() {
        assert_eq!(cidr("10.244.0.0/16").to_string(), "10.244.0.0/16");
        assert_eq!(cidr("FD00:10:244::/56").to_string(), "fd00:10:244::/56");
        assert_eq!(cidr("0.0.0.0/0").to_string(), "0.0.0.0/0");
        assert_eq!(cidr("::/0").to_string(), "::/0");
        assert_eq!(cidr("10.0.0.1/32").to_string(), "10.0.0.1/32");
        for bad in ["10.244.0.1/16", "10.244.0.0", "10.244.0.0/33", "fd00::/129", "10.0.0.0/016", "10.0.0.0/+8", "x/8"]
        {
            assert_eq!(bad.parse::<Cidr>(), Err(Error::Cidr(bad.to_owned())), "{bad}");
        }
    }

    #[test]
    fn error_messages_read_right() {
        assert_eq!(
            Error::Cidr("10.0.0.1/8".into()).to_string(),
            "invalid CIDR \"10.0.0.1/8\": expected ADDRESS/PREFIX with no bits set past the prefix, e.g. 10.244.0.0/16"
        );
        assert_eq!(
            Error::PodCidrRequired.to_string(),
            "a component serves webhooks: the network policy needs the Pod network's address range (--pod-cidr \
             CIDR) to admit the webhook port from outside it only"
        );
        assert_eq!(
            Error::PodCidrCoversAll(cidr("::/0")).to_string(),
            "pod CIDR ::/0 covers every address of its family: give the Pod network's address range"
        );
    }
}

//! Where the host in the cluster sends its traces: the `OTEL_*`
//! variables of its Deployment and, with a NetworkPolicy, the egress to
//! the collector.
//!
//! ```
//! use capstan_host::telemetry::Protocol;
//! use capstan_host::tooling::generate::trace::Traces;
//!
//! let traces = Traces::new("http://otel-collector.observability:4317", Protocol::Grpc)
//!     .unwrap()
//!     .sampler("parentbased_traceidratio", Some("0.1"))
//!     .unwrap();
//! assert_eq!(traces.port(), 4317);
//! assert!(Traces::new("otel-collector:4317", Protocol::Grpc).is_err(), "no scheme");
//! ```

use std::net::IpAddr;

use k8s_openapi::api::core::v1::EnvVar;

use crate::telemetry::{Protocol, Sampler};

/// Why a collector cannot be written into the Deployment.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The endpoint is not an `http://` or `https://` URL with a host.
    #[error("OTLP endpoint {endpoint:?}: {reason}")]
    Endpoint {
        /// The endpoint given.
        endpoint: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The service name is empty, too long or has control characters.
    #[error("OTLP service name {0:?}: give 1 to 253 printable characters")]
    ServiceName(String),
    /// The sampler or its argument (see [`Sampler::parse`]).
    #[error(transparent)]
    Sampler(#[from] crate::telemetry::Error),
}

/// The collector and what the host sends it: written into the host's
/// Deployment as the variables `capstan run` reads
/// (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_PROTOCOL`,
/// `OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`).
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub struct Traces {
    endpoint: String,
    host: String,
    port: u16,
    protocol: Protocol,
    service_name: Option<String>,
    sampler: Option<(String, Option<String>)>,
}

impl Traces {
    /// The collector's base URL (`http://otel-collector:4318` over HTTP,
    /// `http://otel-collector:4317` over gRPC), as `capstan run`'s
    /// `--otlp-endpoint` takes it.
    ///
    /// # Errors
    ///
    /// [`Error::Endpoint`] for anything but an `http://` or `https://` URL
    /// with a host, and for one with credentials in it (give them as
    /// `OTEL_EXPORTER_OTLP_HEADERS` from a Secret instead).
    pub fn new(endpoint: &str, protocol: Protocol) -> Result<Self, Error> {
        let fail = |reason| Error::Endpoint { endpoint: endpoint.to_owned(), reason };
        if endpoint.len() > 2048 || endpoint.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(fail("give a URL of at most 2048 characters without spaces"));
        }
        let uri: hyper::Uri = endpoint.parse().map_err(|_| fail("not a URL"))?;
        let default_port = match uri.scheme_str() {
            Some("http") => 80,
            Some("https") => 443,
            _ => return Err(fail("give an http:// or https:// URL")),
        };
        let authority = uri.authority().ok_or_else(|| fail("the URL names no host"))?;
        if authority.as_str().contains('@') {
            return Err(fail("credentials do not belong in the URL: set OTEL_EXPORTER_OTLP_HEADERS from a Secret"));
        }
        let host = authority.host();
        if host.is_empty() {
            return Err(fail("the URL names no host"));
        }
        let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host).to_owned();
        let port = authority.port_u16().unwrap_or(default_port);
        Ok(Self { endpoint: endpoint.to_owned(), host, port, protocol, service_name: None, sampler: None })
    }

    /// The spans' `service.name`. Default: the host's name
    /// ([`Options::name`](super::Options::name)).
    ///
    /// # Errors
    ///
    /// [`Error::ServiceName`] for an empty name, one over 253 characters
    /// or one with control characters.
    pub fn service_name(mut self, name: &str) -> Result<Self, Error> {
        if name.is_empty() || name.chars().count() > 253 || name.chars().any(char::is_control) {
            return Err(Error::ServiceName(name.to_owned()));
        }
        self.service_name = Some(name.to_owned());
        Ok(self)
    }

    /// Which traces are exported (`OTEL_TRACES_SAMPLER` and its
    /// argument). Default: the host's, every one.
    ///
    /// # Errors
    ///
    /// [`Error::Sampler`] for a sampler or ratio the host would refuse at
    /// start.
    pub fn sampler(mut self, name: &str, arg: Option<&str>) -> Result<Self, Error> {
        Sampler::parse(name, arg)?;
        self.sampler = Some((name.to_owned(), arg.map(str::to_owned)));
        Ok(self)
    }

    /// The collector's port: the URL's, else 80 for `http://` and 443 for
    /// `https://`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The collector's address when the URL gives one instead of a name.
    pub fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }

    /// The variables of the host's container; `default_service` is the
    /// service name unless one was given.
    pub(crate) fn env(&self, default_service: &str) -> Vec<EnvVar> {
        let var = |name: &str, value: &str| EnvVar {
            name: name.to_owned(),
            value: Some(value.to_owned()),
            ..EnvVar::default()
        };
        let mut env = vec![
            var("OTEL_EXPORTER_OTLP_ENDPOINT", &self.endpoint),
            var("OTEL_EXPORTER_OTLP_PROTOCOL", self.protocol.as_str()),
            var("OTEL_SERVICE_NAME", self.service_name.as_deref().unwrap_or(default_service)),
        ];
        if let Some((sampler, arg)) = &self.sampler {
            env.push(var("OTEL_TRACES_SAMPLER", sampler));
            if let Some(arg) = arg {
                env.push(var("OTEL_TRACES_SAMPLER_ARG", arg));
            }
        }
        env
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_gives_its_port_or_the_schemes_and_its_address() {
        let t = Traces::new("http://otel-collector.observability:4318", Protocol::HttpProtobuf).expect("valid");
        assert_eq!((t.port(), t.ip()), (4318, None));
        let t = Traces::new("https://collector.example.com", Protocol::Grpc).expect("valid");
        assert_eq!(t.port(), 443);
        let t = Traces::new("http://10.0.0.9", Protocol::HttpProtobuf).expect("valid");
        assert_eq!((t.port(), t.ip()), (80, Some("10.0.0.9".parse().expect("ip"))));
        let t = Traces::new("http://[fd00::9]:4317", Protocol::Grpc).expect("valid");
        assert_eq!((t.port(), t.ip()), (4317, Some("fd00::9".parse().expect("ip"))));
    }

    #[test]
    fn what_the_host_would_refuse_or_should_not_carry_is_refused() {
        for bad in [
            "otel-collector:4317",
            "grpc://otel-collector:4317",
            "http://",
            "http://user:token@collector:4318",
            "http://collector:4318/\nx",
            "",
        ] {
            let err = Traces::new(bad, Protocol::HttpProtobuf).expect_err(bad);
            assert!(matches!(err, Error::Endpoint { .. }), "{bad}: {err}");
        }
        let t = Traces::new("http://c:4318", Protocol::HttpProtobuf).expect("valid");
        assert!(t.clone().sampler("sometimes", None).is_err());
        assert!(t.clone().sampler("traceidratio", Some("2")).is_err());
        assert!(t.clone().service_name("").is_err());
        assert!(t.service_name("a\nb").is_err());
    }

    #[test]
    fn the_variables_name_the_collector_protocol_service_and_sampler() {
        let t = Traces::new("http://c:4317", Protocol::Grpc).expect("valid");
        let env = |t: &Traces| {
            t.env("capstan").into_iter().map(|v| (v.name, v.value.unwrap_or_default())).collect::<Vec<_>>()
        };
        assert_eq!(
            env(&t),
            [
                ("OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(), "http://c:4317".to_owned()),
                ("OTEL_EXPORTER_OTLP_PROTOCOL".to_owned(), "grpc".to_owned()),
                ("OTEL_SERVICE_NAME".to_owned(), "capstan".to_owned()),
            ]
        );
        let t = t.service_name("shop-operators").expect("valid").sampler("traceidratio", Some("0.25")).expect("valid");
        let env = env(&t);
        assert_eq!(env[2].1, "shop-operators");
        assert_eq!(env[3], ("OTEL_TRACES_SAMPLER".to_owned(), "traceidratio".to_owned()));
        assert_eq!(env[4], ("OTEL_TRACES_SAMPLER_ARG".to_owned(), "0.25".to_owned()));
    }
}

//! `--webhook-failure-policy`: the operator's `failurePolicy` for a
//! component's admission webhooks, over what the component declares.
//!
//! The API server applies a webhook's `failurePolicy` when a call fails,
//! and so also while no host answers (a crash, a host being replaced): a
//! `Fail` webhook then refuses every write of its kinds, cluster-wide. The
//! component author chooses the default; the operator, who knows whether
//! a write unchecked for a while is worse than no write at all, has the
//! last word here, per webhook or for all of a component's webhooks.
//!
//! ```
//! use capstan_host::serve::webhook::policy::{FailurePolicies, FailurePolicy, Override};
//!
//! let overrides: Vec<Override> = ["greeter=Ignore", "greeter/validate.greetings.example.com=Fail"]
//!     .iter()
//!     .map(|s| s.parse())
//!     .collect::<Result<_, _>>()?;
//! let policies = FailurePolicies::new(overrides)?;
//! // The webhook named wins over the component-wide choice.
//! assert_eq!(policies.get("greeter", "validate.greetings.example.com"), Some(FailurePolicy::Fail));
//! assert_eq!(policies.get("greeter", "default.greetings.example.com"), Some(FailurePolicy::Ignore));
//! assert_eq!(policies.get("other", "validate.other.example.com"), None);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Errors
//!
//! A choice is checked when a component it names loads
//! ([`FailurePolicies::check`]): naming a webhook the component does not
//! declare, or a component that declares no admission webhook, rejects
//! that version. Conversion has no `failurePolicy` in Kubernetes, so none
//! can be chosen for it.

use super::Error;
use crate::manifest::{AdmissionWebhook, Manifest, is_dns1123_label, is_webhook_name};

/// What the API server does with a request when the call to a webhook
/// fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailurePolicy {
    /// The request is refused.
    Fail,
    /// The request goes through unchecked.
    Ignore,
}

impl FailurePolicy {
    /// The `failurePolicy` value: `Fail` or `Ignore`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fail => "Fail",
            Self::Ignore => "Ignore",
        }
    }

    /// The policy `webhook` declares.
    pub fn declared(webhook: &AdmissionWebhook) -> Self {
        if webhook.ignore_failures { Self::Ignore } else { Self::Fail }
    }
}

impl std::fmt::Display for FailurePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One `--webhook-failure-policy` value:
/// `COMPONENT/WEBHOOK=Ignore|Fail`, or `COMPONENT=Ignore|Fail` for every
/// admission webhook of the component.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Override {
    /// The component (its controller name).
    pub component: String,
    /// The webhook, or `None` for all of the component's.
    pub webhook: Option<String>,
    /// The policy chosen.
    pub policy: FailurePolicy,
}

impl Override {
    /// What it names: `COMPONENT/WEBHOOK` or `COMPONENT`.
    pub fn target(&self) -> String {
        match &self.webhook {
            Some(webhook) => format!("{}/{webhook}", self.component),
            None => self.component.clone(),
        }
    }
}

impl std::fmt::Display for Override {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.target(), self.policy)
    }
}

impl std::str::FromStr for Override {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (target, policy) =
            s.split_once('=').ok_or_else(|| format!("{s:?} is not COMPONENT[/WEBHOOK]=Ignore|Fail"))?;
        let policy = match policy {
            "Ignore" => FailurePolicy::Ignore,
            "Fail" => FailurePolicy::Fail,
            other => return Err(format!("{s:?}: the policy is Ignore or Fail, not {other:?}")),
        };
        let (component, webhook) = match target.split_once('/') {
            Some((component, webhook)) => (component, Some(webhook)),
            None => (target, None),
        };
        if !is_dns1123_label(component) {
            return Err(format!("{s:?}: {component:?} is not a component name (a DNS-1123 label)"));
        }
        if let Some(webhook) = webhook.filter(|w| !is_webhook_name(w)) {
            return Err(format!(
                "{s:?}: {webhook:?} is not a webhook name (fully qualified, like validate.example.com)"
            ));
        }
        Ok(Self { component: component.to_owned(), webhook: webhook.map(str::to_owned), policy })
    }
}

/// The operator's failure policies, by component and webhook; empty by
/// default: every webhook keeps the policy its component declares.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FailurePolicies {
    overrides: Vec<Override>,
}

impl FailurePolicies {
    /// The policies of `overrides`. The same target given twice alike
    /// counts once.
    ///
    /// # Errors
    ///
    /// [`Error::PolicyTwice`] when one target is given both policies.
    pub fn new(overrides: impl IntoIterator<Item = Override>) -> Result<Self, Error> {
        let mut kept: Vec<Override> = Vec::new();
        for o in overrides {
            match kept.iter().find(|k| k.component == o.component && k.webhook == o.webhook) {
                Some(k) if k.policy == o.policy => {}
                Some(_) => return Err(Error::PolicyTwice(o.target())),
                None => kept.push(o),
            }
        }
        Ok(Self { overrides: kept })
    }

    /// Whether no policy is chosen.
    pub fn is_empty(&self) -> bool {
        self.overrides.is_empty()
    }

    /// The choices, in the order given.
    pub fn overrides(&self) -> &[Override] {
        &self.overrides
    }

    /// The policy chosen for `webhook` of `component`: the one naming the
    /// webhook, else the component's, else `None` (the declared one holds).
    pub fn get(&self, component: &str, webhook: &str) -> Option<FailurePolicy> {
        let of = |w: Option<&str>| {
            self.overrides.iter().find(|o| o.component == component && o.webhook.as_deref() == w).map(|o| o.policy)
        };
        of(Some(webhook)).or_else(|| of(None))
    }

    /// The `failurePolicy` of `webhook` of `manifest`'s component as
    /// installed: the operator's choice, else the declared one.
    pub fn of(&self, manifest: &Manifest, webhook: &AdmissionWebhook) -> FailurePolicy {
        self.get(&manifest.name, &webhook.name).unwrap_or_else(|| FailurePolicy::declared(webhook))
    }

    /// Checks the choices naming `manifest`'s component against what it
    /// declares.
    ///
    /// # Errors
    ///
    /// [`Error::PolicyUnmatched`] for a choice naming a webhook the
    /// component does not declare, or a component that declares no
    /// admission webhook.
    pub fn check(&self, manifest: &Manifest) -> Result<(), Error> {
        let admission = &manifest.roles.admission;
        for o in self.overrides.iter().filter(|o| o.component == manifest.name) {
            let matched = match &o.webhook {
                Some(name) => admission.iter().any(|w| &w.name == name),
                None => !admission.is_empty(),
            };
            if !matched {
                let declared = if admission.is_empty() {
                    "none; conversion has no failure policy".to_owned()
                } else {
                    admission.iter().map(|w| w.name.as_str()).collect::<Vec<_>>().join(", ")
                };
                return Err(Error::PolicyUnmatched { target: o.target(), component: o.component.clone(), declared });
            }
        }
        Ok(())
    }

    /// The components named that are not among `names`, each once.
    pub fn unmatched_components<'a>(&'a self, names: &[&str]) -> Vec<&'a str> {
        let mut unmatched: Vec<&str> = Vec::new();
        for o in &self.overrides {
            if !names.contains(&o.component.as_str()) && !unmatched.contains(&o.component.as_str()) {
                unmatched.push(&o.component);
            }
        }
        unmatched
    }

    /// Checks that every component named is among `names`.
    ///
    /// # Errors
    ///
    /// [`Error::PolicyComponent`] naming the first that is not.
    pub fn check_components(&self, names: &[&str]) -> Result<(), Error> {
        match self.unmatched_components(names).first() {
            None => Ok(()),
            Some(component) => Err(Error::PolicyComponent {
                component: (*component).to_owned(),
                known: if names.is_empty() { "none".to_owned() } else { names.join(", ") },
            }),
        }
    }

    /// The command line that chooses them again: a
    /// `--webhook-failure-policy VALUE` pair per choice.
    pub fn args(&self) -> Vec<String> {
        self.overrides.iter().flat_map(|o| ["--webhook-failure-policy".to_owned(), o.to_string()]).collect()
    }
}

/// One admission webhook a component serves, as `GET /status` lists it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookStatus {
    /// Its name.
    pub name: String,
    /// `validating` or `mutating`.
    #[serde(rename = "type")]
    pub webhook_type: &'static str,
    /// The `failurePolicy` the host installs: `Fail` or `Ignore`.
    pub failure_policy: &'static str,
    /// Who chose it: `component` (declared) or `operator`
    /// (`--webhook-failure-policy`).
    pub failure_policy_from: &'static str,
}

impl WebhookStatus {
    /// The status of each admission webhook of `manifest` under
    /// `policies`.
    pub fn of(manifest: &Manifest, policies: &FailurePolicies) -> Vec<Self> {
        manifest
            .roles
            .admission
            .iter()
            .map(|w| Self {
                name: w.name.clone(),
                webhook_type: if w.mutating { "mutating" } else { "validating" },
                failure_policy: policies.of(manifest, w).as_str(),
                failure_policy_from: if policies.get(&manifest.name, &w.name).is_some() {
                    "operator"
                } else {
                    "component"
                },
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::Gvk;

    fn parse(s: &str) -> Result<Override, String> {
        s.parse()
    }

    fn policies(values: &[&str]) -> FailurePolicies {
        FailurePolicies::new(values.iter().map(|v| parse(v).expect("valid"))).expect("no conflict")
    }

    fn webhook(name: &str, ignore_failures: bool) -> AdmissionWebhook {
        AdmissionWebhook {
            name: name.into(),
            mutating: false,
            kinds: vec![Gvk::new("examples.capstan.dev", "v1alpha1", "Greeting")],
            operations: vec![],
            ignore_failures,
            timeout: std::time::Duration::from_secs(10),
            side_effects_on_dry_run: false,
            namespace_selector: None,
            object_selector: None,
        }
    }

    fn manifest(name: &str, webhooks: Vec<AdmissionWebhook>) -> Manifest {
        let mut m = Manifest::bare(name, Gvk::new("examples.capstan.dev", "v1alpha1", "Greeting"));
        m.roles.admission = webhooks;
        m
    }

    #[test]
    fn a_choice_names_a_component_and_maybe_a_webhook() {
        let o = parse("greeter/validate.greetings.example.com=Ignore").expect("valid");
        assert_eq!(o.component, "greeter");
        assert_eq!(o.webhook.as_deref(), Some("validate.greetings.example.com"));
        assert_eq!(o.policy, FailurePolicy::Ignore);
        assert_eq!(o.to_string(), "greeter/validate.greetings.example.com=Ignore", "prints as it parses");
        let o = parse("greeter=Fail").expect("valid");
        assert_eq!((o.webhook, o.policy), (None, FailurePolicy::Fail));
    }

    #[test]
    fn a_malformed_choice_is_refused_saying_why() {
        for (bad, says) in [
            ("greeter", "is not COMPONENT[/WEBHOOK]=Ignore|Fail"),
            ("greeter=ignore", "the policy is Ignore or Fail"),
            ("greeter=", "the policy is Ignore or Fail"),
            ("Greeter=Ignore", "is not a component name"),
            ("=Ignore", "is not a component name"),
            ("greeter/validate=Ignore", "is not a webhook name"),
            ("greeter/=Ignore", "is not a webhook name"),
        ] {
            let err = parse(bad).expect_err(bad);
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn the_webhook_named_wins_over_its_component_and_the_declared_policy_is_the_last_resort() {
        let p = policies(&["greeter=Ignore", "greeter/strict.greetings.example.com=Fail"]);
        let m = manifest(
            "greeter",
            vec![webhook("strict.greetings.example.com", true), webhook("validate.greetings.example.com", false)],
        );
        assert_eq!(p.of(&m, &m.roles.admission[0]), FailurePolicy::Fail);
        assert_eq!(p.of(&m, &m.roles.admission[1]), FailurePolicy::Ignore);
        let other = manifest("other", vec![webhook("validate.other.example.com", false)]);
        assert_eq!(p.of(&other, &other.roles.admission[0]), FailurePolicy::Fail, "declared");
        let statuses = WebhookStatus::of(&m, &p);
        assert_eq!((statuses[1].failure_policy, statuses[1].failure_policy_from), ("Ignore", "operator"));
        let statuses = WebhookStatus::of(&other, &p);
        assert_eq!((statuses[0].failure_policy, statuses[0].failure_policy_from), ("Fail", "component"));
        assert_eq!(serde_json::to_value(&statuses[0]).expect("serialises")["type"], "validating");
    }

    #[test]
    fn one_target_given_both_policies_is_refused_and_alike_twice_counts_once() {
        let twice = ["greeter=Ignore", "greeter=Ignore"].map(|v| parse(v).expect("valid"));
        assert_eq!(FailurePolicies::new(twice).expect("alike").overrides().len(), 1);
        let both = ["greeter/v.example.com=Ignore", "greeter/v.example.com=Fail"].map(|v| parse(v).expect("valid"));
        let err = FailurePolicies::new(both).expect_err("conflict");
        assert!(matches!(&err, Error::PolicyTwice(t) if t == "greeter/v.example.com"), "{err:?}");
    }

    #[test]
    fn a_choice_naming_what_the_component_does_not_declare_is_refused() {
        let m = manifest("greeter", vec![webhook("validate.greetings.example.com", false)]);
        policies(&["greeter/validate.greetings.example.com=Ignore", "other=Ignore"]).check(&m).expect("matches");
        let err = policies(&["greeter/typo.greetings.example.com=Ignore"]).check(&m).expect_err("no such webhook");
        assert!(
            matches!(&err, Error::PolicyUnmatched { declared, .. } if declared == "validate.greetings.example.com")
        );
        let converts_only = manifest("greeter", vec![]);
        let err = policies(&["greeter=Ignore"]).check(&converts_only).expect_err("no admission webhook");
        assert!(err.to_string().contains("conversion has no failure policy"), "{err}");
    }

    #[test]
    fn components_not_run_are_named_once_and_the_choices_print_as_a_command_line() {
        let p = policies(&["greeter=Ignore", "other=Ignore", "other/v.other.example.com=Fail"]);
        assert_eq!(p.unmatched_components(&["greeter"]), ["other"]);
        assert!(p.unmatched_components(&["greeter", "other"]).is_empty());
        p.check_components(&["greeter", "other", "third"]).expect("all run");
        let err = p.check_components(&["greeter"]).expect_err("other does not run");
        assert!(
            matches!(&err, Error::PolicyComponent { component, known } if component == "other" && known == "greeter")
        );
        assert_eq!(
            p.args(),
            [
                "--webhook-failure-policy",
                "greeter=Ignore",
                "--webhook-failure-policy",
                "other=Ignore",
                "--webhook-failure-policy",
                "other/v.other.example.com=Fail"
            ]
        );
    }
}

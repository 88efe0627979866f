//! Webhooks for a `Greeting`, written as guest logic: a component that
//! serves no reconcile loop, only admission and conversion.
//!
//! It shows:
//!
//! - a **validating** webhook: `spec.message` must not be empty,
//!   `spec.replicas` must be between 0 and 10, and `spec.message` cannot
//!   change on update;
//! - a **defaulting** (mutating) webhook: `spec.replicas` defaults to 1;
//! - **conversion** between `v1alpha1` (`spec.message`, `spec.replicas`) and
//!   `v1` (`spec.greeting.text`, `spec.greeting.replicas`), with
//!   [`capstan_guest::conversion::between`].
//!
//! For the host's tests, a Greeting annotated `examples.capstan.dev/trap:
//! "true"` makes the validating webhook trap and one annotated
//! `examples.capstan.dev/loop: "true"` makes it loop until its deadline
//! (its failure policy is `Fail`: the API server refuses the Greeting);
//! one annotated
//! `examples.capstan.dev/trap-lenient: "true"` makes a second validating
//! webhook trap, whose failure policy is `Ignore` (the Greeting is stored).
//!
//! Built with the `v2` feature it is a second version for the host's
//! hot-swap test (`tests/tests/webhook_lifecycle.rs`): `spec.replicas` may
//! go up to 20, and it declares neither the defaulting webhook nor the
//! lenient one.
//!
//! Run it (the host serves the webhooks and installs their configurations):
//!
//! ```text
//! capstan run --install-crds --webhook-listen 127.0.0.1:9443 --install-webhooks \
//!     target/guests/greeter-webhooks.wasm
//! ```

#![allow(clippy::duplicated_attributes, reason = "kube's derive repeats its keys by design")]

use capstan_guest::admission::{Operation, Request, Verdict, Webhook};
use capstan_guest::conversion::between;
use capstan_guest::kube::CustomResource;
use capstan_guest::kube::core::CustomResourceExt;
use capstan_guest::prelude::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The annotation that makes the validating webhook trap (for tests).
pub const TRAP_ANNOTATION: &str = "examples.capstan.dev/trap";
/// The annotation that makes the validating webhook loop (for tests).
pub const LOOP_ANNOTATION: &str = "examples.capstan.dev/loop";
/// The annotation that makes the lenient webhook trap (for tests).
pub const TRAP_LENIENT_ANNOTATION: &str = "examples.capstan.dev/trap-lenient";
/// The webhook with failure policy `Ignore`.
pub const LENIENT: &str = "lenient.greetings.webhooks.examples.capstan.dev";
/// Most replicas the validating webhook accepts (20 with the `v2`
/// feature).
pub const MAX_REPLICAS: i32 = if cfg!(feature = "v2") { 20 } else { 10 };

/// A `Greeting`, version `v1alpha1` (the stored version).
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "webhooks.examples.capstan.dev",
    version = "v1alpha1",
    kind = "Greeting",
    plural = "greetings",
    namespaced
)]
#[serde(rename_all = "camelCase")]
pub struct GreetingSpec {
    /// What to say. Must not be empty; cannot change.
    pub message: String,
    /// How many replicas; 0 to 10, default 1 (set by the defaulting webhook).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
}

/// Version `v1` of the same kind.
pub mod v1 {
    use super::*;

    /// A `Greeting`, version `v1`.
    #[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
    #[kube(
        group = "webhooks.examples.capstan.dev",
        version = "v1",
        kind = "Greeting",
        plural = "greetings",
        namespaced
    )]
    #[serde(rename_all = "camelCase")]
    pub struct GreetingSpec {
        /// The greeting.
        pub greeting: Text,
    }

    /// What `v1alpha1` spelt as `spec.message` and `spec.replicas`.
    #[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
    pub struct Text {
        /// What to say.
        pub text: String,
        /// How many replicas.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub replicas: Option<i32>,
    }
}

/// The webhooks.
#[derive(Default)]
pub struct GreetingWebhooks;

impl Component for GreetingWebhooks {
    fn manifest(&self) -> Manifest {
        let crd = kube::core::crd::merge_crds(vec![Greeting::crd(), v1::Greeting::crd()], "v1alpha1")
            .expect("the two versions describe the same kind");
        let manifest = Manifest::new("greeter-webhooks").primary::<Greeting>().crd(&crd).webhook(
            Webhook::validating("validate.greetings.webhooks.examples.capstan.dev")
                .kind::<Greeting>()
                .operations(&[Operation::Create, Operation::Update])
                .timeout_seconds(5),
        );
        if cfg!(feature = "v2") {
            return manifest.converts::<Greeting>();
        }
        manifest
            .webhook(Webhook::validating(LENIENT).kind::<Greeting>().ignore_failures().timeout_seconds(5))
            .webhook(
                Webhook::mutating("default.greetings.webhooks.examples.capstan.dev")
                    .kind::<Greeting>()
                    .operations(&[Operation::Create, Operation::Update])
                    .timeout_seconds(5),
            )
            .converts::<Greeting>()
    }
}

impl Admission for GreetingWebhooks {
    type Resource = Greeting;

    fn validate(&self, request: &Request<Greeting>) -> Verdict {
        let Some(greeting) = &request.object else { return Verdict::allow() };
        if request.webhook == LENIENT {
            if greeting.annotations().get(TRAP_LENIENT_ANNOTATION).is_some_and(|v| v == "true") {
                panic!("asked to trap by the {TRAP_LENIENT_ANNOTATION} annotation");
            }
            return Verdict::allow();
        }
        if greeting.annotations().get(TRAP_ANNOTATION).is_some_and(|v| v == "true") {
            panic!("asked to trap by the {TRAP_ANNOTATION} annotation");
        }
        if greeting.annotations().get(LOOP_ANNOTATION).is_some_and(|v| v == "true") {
            loop {
                std::hint::black_box(());
            }
        }
        if greeting.spec.message.trim().is_empty() {
            return Verdict::deny("spec.message must not be empty").code(422);
        }
        if let Some(r) = greeting.spec.replicas.filter(|r| !(0..=MAX_REPLICAS).contains(r)) {
            return Verdict::deny(format!("spec.replicas must be between 0 and {MAX_REPLICAS}, not {r}")).code(422);
        }
        if let Some(old) = &request.old_object
            && old.spec.message != greeting.spec.message
        {
            return Verdict::deny("spec.message cannot change").code(422);
        }
        Verdict::allow()
    }

    fn mutate(&self, _request: &Request<Greeting>, greeting: &mut Greeting) -> Verdict {
        if greeting.spec.replicas.is_none() {
            greeting.spec.replicas = Some(1);
            return Verdict::allow().warn("spec.replicas defaulted to 1");
        }
        Verdict::allow()
    }
}

fn up(old: Greeting) -> v1::Greeting {
    let text = v1::Text { text: old.spec.message, replicas: old.spec.replicas };
    v1::Greeting::new(&old.metadata.name.unwrap_or_default(), v1::GreetingSpec { greeting: text })
}

fn down(new: v1::Greeting) -> Greeting {
    let spec = GreetingSpec { message: new.spec.greeting.text, replicas: new.spec.greeting.replicas };
    Greeting::new(&new.metadata.name.unwrap_or_default(), spec)
}

impl Conversion for GreetingWebhooks {
    fn convert(&self, object: serde_json::Value, desired_api_version: &str) -> Result<serde_json::Value, String> {
        between::<Greeting, v1::Greeting>(object, desired_api_version, up, down)
    }
}

capstan_guest::export!(admission: GreetingWebhooks, conversion: GreetingWebhooks);

//! The glue between the generated bindings and a [`Controller`]: the
//! [`export!`](crate::export) macro and what it calls.

use crate::Controller;
use crate::context::{Context, EventKind};
use crate::error::Error;
use crate::wit::capstan::operator::types as wit;

/// Exports a [`Controller`] as the component's `controller` interface.
/// Use it once per component, at the crate root:
///
/// ```ignore
/// capstan_guest::export!(Greeter);
/// ```
#[macro_export]
macro_rules! export {
    ($controller:ty) => {
        const _: () = {
            struct CapstanExport;

            impl $crate::wit::exports::capstan::operator::controller::Guest for CapstanExport {
                fn manifest() -> $crate::wit::capstan::operator::types::ControllerManifest {
                    $crate::__private::manifest::<$controller>()
                }

                fn reconcile(
                    request: $crate::wit::capstan::operator::types::ReconcileRequest,
                ) -> ::std::result::Result<
                    $crate::wit::capstan::operator::types::Outcome,
                    $crate::wit::capstan::operator::types::Failure,
                > {
                    $crate::__private::reconcile::<$controller>(request)
                }
            }

    $crate::wit::export_operator!(CapstanExport with_types_in $crate::wit);
        };
    };
}

/// Called by the code [`export!`](crate::export) generates.
#[doc(hidden)]
pub mod __private {
    use kube::Resource;

    use super::*;

    pub fn manifest<C: Controller>() -> wit::ControllerManifest {
        C::default().manifest().into_wit()
    }

    pub fn reconcile<C: Controller>(request: wit::ReconcileRequest) -> Result<wit::Outcome, wit::Failure> {
        let object: C::Resource = serde_json::from_slice(&request.object)
            .map_err(|e| Error::terminal(format!("object does not match the controller's type: {e}")))?;
        let meta = object.meta();
        let failed = request.failed_children.into_iter().map(crate::context::FailedChild::from).collect();
        let ctx = Context::new(request.event.into(), meta.namespace.clone(), meta.name.clone().unwrap_or_default())
            .with_failed_children(failed);
        let controller = C::default();
        let outcome = match ctx.event() {
            EventKind::Added => controller.add(&ctx, object),
            EventKind::Modified => controller.modify(&ctx, object),
            EventKind::Deleted => controller.delete(&ctx, object),
            EventKind::Resync => controller.reconcile(&ctx, object),
        };
        Ok(outcome?.into_wit())
    }
}

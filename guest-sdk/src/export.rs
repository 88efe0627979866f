//! The glue between the generated bindings and the role traits: the
//! [`export!`](crate::export) macro and what it calls.

use crate::context::{Context, EventKind};
use crate::error::Error;
use crate::wit::capstan::operator::types as wit;
use crate::{Admission, Controller, Conversion, Scheduler};

/// Exports the component's roles. Use it once per component, at the crate
/// root, naming the type that serves each role (any mix, in this order):
///
/// ```ignore
/// // A controller (the manifest comes from `Controller::manifest`):
/// capstan_guest::export!(Greeter);
/// // A controller that also serves webhooks and converts its CRD:
/// capstan_guest::export!(controller: Greeter, admission: Greeter, conversion: Greeter);
/// // No controller: the first type named declares the manifest through
/// // `capstan_guest::Component`.
/// capstan_guest::export!(scheduler: ZoneSpread);
/// ```
///
/// Roles not named answer "not served"; the host never calls them, since
/// the manifest does not declare them.
#[macro_export]
macro_rules! export {
    ($controller:ty) => {
        $crate::export!(controller: $controller);
    };
    ($($role:ident : $ty:ty),+ $(,)?) => {
        $crate::__export!(@munch [] [] [] [] $($role : $ty,)+);
    };
}

/// The machinery of [`export!`]: sorts the named roles into slots, then
/// writes the bindings' `Guest` implementations.
#[doc(hidden)]
#[macro_export]
macro_rules! __export {
    (@munch [$($c:ty)?] [$($a:ty)?] [$($v:ty)?] [$($s:ty)?] controller : $t:ty, $($rest:tt)*) => {
        $crate::__export!(@munch [$t] [$($a)?] [$($v)?] [$($s)?] $($rest)*);
    };
    (@munch [$($c:ty)?] [$($a:ty)?] [$($v:ty)?] [$($s:ty)?] admission : $t:ty, $($rest:tt)*) => {
        $crate::__export!(@munch [$($c)?] [$t] [$($v)?] [$($s)?] $($rest)*);
    };
    (@munch [$($c:ty)?] [$($a:ty)?] [$($v:ty)?] [$($s:ty)?] conversion : $t:ty, $($rest:tt)*) => {
        $crate::__export!(@munch [$($c)?] [$($a)?] [$t] [$($s)?] $($rest)*);
    };
    (@munch [$($c:ty)?] [$($a:ty)?] [$($v:ty)?] [$($s:ty)?] scheduler : $t:ty, $($rest:tt)*) => {
        $crate::__export!(@munch [$($c)?] [$($a)?] [$($v)?] [$t] $($rest)*);
    };
    (@munch [$($c:ty)?] [$($a:ty)?] [$($v:ty)?] [$($s:ty)?]) => {
        const _: () = {
            struct CapstanExport;

            impl $crate::wit::exports::capstan::operator::controller::Guest for CapstanExport {
                fn manifest() -> $crate::wit::capstan::operator::types::ComponentManifest {
                    let manifest = $crate::__first!(
                        $( <$c as $crate::Controller>::manifest(&<$c as ::core::default::Default>::default()), )?
                        $( <$a as $crate::Component>::manifest(&<$a as ::core::default::Default>::default()), )?
                        $( <$v as $crate::Component>::manifest(&<$v as ::core::default::Default>::default()), )?
                        $( <$s as $crate::Component>::manifest(&<$s as ::core::default::Default>::default()), )?
                    );
                    let reconcile = $crate::__first!($( { let _ = ::core::marker::PhantomData::<$c>; true }, )? false,);
                    manifest.into_wit(reconcile)
                }

                fn reconcile(
                    request: $crate::wit::capstan::operator::types::ReconcileRequest,
                ) -> ::std::result::Result<
                    $crate::wit::capstan::operator::types::Outcome,
                    $crate::wit::capstan::operator::types::Failure,
                > {
                    <$crate::__pick!($($c)? ; $crate::__private::NotServed) as $crate::__private::Serve>::reconcile(request)
                }
            }

            impl $crate::wit::exports::capstan::operator::admission::Guest for CapstanExport {
                fn review(
                    request: $crate::wit::capstan::operator::types::AdmissionRequest,
                ) -> $crate::wit::capstan::operator::types::AdmissionResponse {
                    <$crate::__pick!($($a)? ; $crate::__private::NotServed) as $crate::__private::ServeAdmission>::review(request)
                }
            }

            impl $crate::wit::exports::capstan::operator::conversion::Guest for CapstanExport {
                fn convert(
                    request: $crate::wit::capstan::operator::types::ConversionRequest,
                ) -> ::std::result::Result<::std::vec::Vec<::std::vec::Vec<u8>>, ::std::string::String> {
                    <$crate::__pick!($($v)? ; $crate::__private::NotServed) as $crate::__private::ServeConversion>::convert(request)
                }
            }

            impl $crate::wit::exports::capstan::operator::scheduler::Guest for CapstanExport {
                fn schedule(
                    request: $crate::wit::capstan::operator::types::ScheduleRequest,
                ) -> ::std::result::Result<::std::string::String, $crate::wit::capstan::operator::types::Unschedulable> {
                    <$crate::__pick!($($s)? ; $crate::__private::NotServed) as $crate::__private::ServeScheduler>::schedule(request)
                }
            }

            $crate::wit::export_operator!(CapstanExport with_types_in $crate::wit);
        };
    };
}

/// The first of a list of expressions.
#[doc(hidden)]
#[macro_export]
macro_rules! __first {
    ($first:expr, $($rest:expr,)*) => {
        $first
    };
}

/// The type given, or the default.
#[doc(hidden)]
#[macro_export]
macro_rules! __pick {
    ($t:ty ; $default:ty) => {
        $t
    };
    ( ; $default:ty) => {
        $default
    };
}

/// Called by the code [`export!`](crate::export) generates.
#[doc(hidden)]
pub mod __private {
    use kube::Resource;

    use super::*;

    /// Stands in for a role the component does not serve.
    pub struct NotServed;

    fn not_served(role: &str) -> String {
        format!("this component does not serve {role}")
    }

    /// The controller role, served or not.
    pub trait Serve {
        fn reconcile(request: wit::ReconcileRequest) -> Result<wit::Outcome, wit::Failure>;
    }

    impl<C: Controller> Serve for C {
        fn reconcile(request: wit::ReconcileRequest) -> Result<wit::Outcome, wit::Failure> {
            reconcile::<C>(request)
        }
    }

    impl Serve for NotServed {
        fn reconcile(_: wit::ReconcileRequest) -> Result<wit::Outcome, wit::Failure> {
            Err(Error::terminal(not_served("reconcile")).into())
        }
    }

    /// The admission role, served or not.
    pub trait ServeAdmission {
        fn review(request: wit::AdmissionRequest) -> wit::AdmissionResponse;
    }

    impl<A: Admission> ServeAdmission for A {
        fn review(request: wit::AdmissionRequest) -> wit::AdmissionResponse {
            crate::admission::review::<A>(request)
        }
    }

    impl ServeAdmission for NotServed {
        fn review(_: wit::AdmissionRequest) -> wit::AdmissionResponse {
            crate::admission::Verdict::deny(not_served("admission")).code(500).into_wit(None)
        }
    }

    /// The conversion role, served or not.
    pub trait ServeConversion {
        fn convert(request: wit::ConversionRequest) -> Result<Vec<wit::Json>, String>;
    }

    impl<V: Conversion> ServeConversion for V {
        fn convert(request: wit::ConversionRequest) -> Result<Vec<wit::Json>, String> {
            crate::conversion::convert::<V>(request)
        }
    }

    impl ServeConversion for NotServed {
        fn convert(_: wit::ConversionRequest) -> Result<Vec<wit::Json>, String> {
            Err(not_served("conversion"))
        }
    }

    /// The scheduler role, served or not.
    pub trait ServeScheduler {
        fn schedule(request: wit::ScheduleRequest) -> Result<String, wit::Unschedulable>;
    }

    impl<S: Scheduler> ServeScheduler for S {
        fn schedule(request: wit::ScheduleRequest) -> Result<String, wit::Unschedulable> {
            crate::scheduler::schedule::<S>(request)
        }
    }

    impl ServeScheduler for NotServed {
        fn schedule(_: wit::ScheduleRequest) -> Result<String, wit::Unschedulable> {
            Err(wit::Unschedulable { reasons: vec![not_served("scheduling")] })
        }
    }

    pub fn reconcile<C: Controller>(request: wit::ReconcileRequest) -> Result<wit::Outcome, wit::Failure> {
        let object: C::Resource = serde_json::from_slice(&request.object)
            .map_err(|e| Error::terminal(format!("object does not match the controller's type: {e}")))?;
        let meta = object.meta();
        let failed = request.failed_children.into_iter().map(crate::context::FailedChild::from).collect();
        let ctx = Context::new(request.event.into(), meta.namespace.clone(), meta.name.clone().unwrap_or_default())
            .with_failed_children(failed)
            .in_cluster(request.cluster)
            .with_members(request.members);
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

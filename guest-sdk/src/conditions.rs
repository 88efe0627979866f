//! Status conditions, the way controller-runtime's `SetStatusCondition`
//! keeps them: one entry per type, `lastTransitionTime` moved only when the
//! status changes, so a reconcile that finds nothing new writes nothing new.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// Sets the condition `new.type_` in `conditions`: adds it, or updates the
/// entry of that type. `lastTransitionTime` is kept when the status is
/// unchanged (whatever `new` carries) and set to now when it changes, or
/// when it is added without one. Returns true if anything changed.
///
/// ```
/// use capstan_guest::conditions::{condition, set_condition, find_condition};
///
/// let mut conditions = Vec::new();
/// assert!(set_condition(&mut conditions, condition("Ready", "False", "InvalidSpec", "no schedule")));
/// let first = find_condition(&conditions, "Ready").unwrap().last_transition_time.clone();
/// // Same status, other message: the transition time stays.
/// assert!(set_condition(&mut conditions, condition("Ready", "False", "InvalidSpec", "still none")));
/// assert_eq!(find_condition(&conditions, "Ready").unwrap().last_transition_time, first);
/// assert!(!set_condition(&mut conditions, condition("Ready", "False", "InvalidSpec", "still none")));
/// ```
pub fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(existing) => {
            if existing.status == new.status {
                new.last_transition_time = existing.last_transition_time.clone();
            } else if new.last_transition_time.0 == Timestamp::UNIX_EPOCH {
                new.last_transition_time = Time(now());
            }
            if *existing == new {
                return false;
            }
            *existing = new;
            true
        }
        None => {
            if new.last_transition_time.0 == Timestamp::UNIX_EPOCH {
                new.last_transition_time = Time(now());
            }
            conditions.push(new);
            true
        }
    }
}

/// Removes the condition of `type_`; returns true if there was one.
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// The condition of `type_`, if present.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// True if the condition of `type_` is present with status `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find_condition(conditions, type_).is_some_and(|c| c.status == "True")
}

/// A condition with no transition time yet (set by [`set_condition`]) and
/// no observed generation (set it with `..`, or leave it out).
pub fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
        observed_generation: None,
    }
}

/// Now, to the second (the API server stores seconds).
fn now() -> Timestamp {
    let now = Timestamp::now();
    Timestamp::from_second(now.as_second()).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_status_moves_the_transition_time_and_an_unchanged_one_keeps_it() {
        let mut list = Vec::new();
        let mut old = condition("Ready", "True", "Ok", "");
        old.last_transition_time = Time(Timestamp::from_second(1_000).expect("valid"));
        set_condition(&mut list, old);
        set_condition(&mut list, condition("Ready", "True", "Ok", "more"));
        assert_eq!(list[0].last_transition_time.0.as_second(), 1_000);
        assert_eq!(list[0].message, "more");
        set_condition(&mut list, condition("Ready", "False", "Broken", ""));
        assert!(list[0].last_transition_time.0.as_second() > 1_000);
        assert_eq!(list.len(), 1);
        assert!(remove_condition(&mut list, "Ready"));
        assert!(!is_true(&list, "Ready"));
    }
}

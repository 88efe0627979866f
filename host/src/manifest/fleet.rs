//! Where a component runs among the clusters one host serves (contract
//! 0.4.0): a *uniform* controller runs on its own in every cluster (or in
//! the clusters its manifest names); a *fleet* controller reconciles the
//! primary objects of its home cluster only, and places children in its
//! member clusters (see docs/multicluster.md).

use super::{Error, MAX_ENTRIES, is_dns1123_label};
use crate::runtime::bindings::capstan::operator::types as wit;

/// A fleet controller's clusters, validated: names are DNS-1123 labels,
/// none twice, the home not among the members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fleet {
    /// The cluster whose primary objects the controller reconciles.
    pub home: String,
    /// The member clusters by name; empty: every cluster but the home.
    pub members: Vec<String>,
}

impl Fleet {
    /// Whether children may be placed in (and read from) the cluster named
    /// `cluster`: a member named, or, when none is, any cluster but the
    /// home.
    ///
    /// ```
    /// use capstan_host::manifest::Fleet;
    ///
    /// let any = Fleet { home: "default".into(), members: vec![] };
    /// assert!(any.has_member("west") && !any.has_member("default"));
    /// let named = Fleet { home: "default".into(), members: vec!["west".into()] };
    /// assert!(named.has_member("west") && !named.has_member("east"));
    /// ```
    pub fn has_member(&self, cluster: &str) -> bool {
        cluster != self.home && (self.members.is_empty() || self.members.iter().any(|m| m == cluster))
    }

    /// The members among `engaged` (the clusters a host serves now), in
    /// the order given.
    pub fn engaged<'a>(&self, engaged: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        engaged.into_iter().filter(|c| self.has_member(c)).map(str::to_owned).collect()
    }
}

/// Checks one list of cluster names: labels, none twice, at most
/// [`MAX_ENTRIES`].
fn names(field: &'static str, names: &[String]) -> Result<(), Error> {
    if names.len() > MAX_ENTRIES {
        return Err(Error::Range { field, value: names.len() as u64, range: "0..=64" });
    }
    for (i, name) in names.iter().enumerate() {
        let bad = |reason: String| Error::Role { field: format!("{field}[{i}]"), reason };
        if !is_dns1123_label(name) {
            return Err(bad(format!("cluster name {:?} is not a DNS-1123 label", crate::cluster::bounded(name, 64))));
        }
        if names[..i].contains(name) {
            return Err(bad(format!("cluster {name} is named twice")));
        }
    }
    Ok(())
}

/// The clusters a uniform controller names and its fleet, checked.
///
/// # Errors
///
/// [`Error::Role`] naming the field of a bad or repeated cluster name, a
/// home among the members, or a fleet that does not reconcile;
/// [`Error::Range`] for more than [`MAX_ENTRIES`] names.
pub(super) fn parse(
    clusters: Vec<String>,
    fleet: Option<wit::Fleet>,
    reconciles: bool,
) -> Result<(Vec<String>, Option<Fleet>), Error> {
    names("clusters", &clusters)?;
    let Some(fleet) = fleet else { return Ok((clusters, None)) };
    names("fleet.members", &fleet.members)?;
    if !is_dns1123_label(&fleet.home) {
        return Err(Error::Role {
            field: "fleet.home".into(),
            reason: format!("cluster name {:?} is not a DNS-1123 label", crate::cluster::bounded(&fleet.home, 64)),
        });
    }
    if fleet.members.contains(&fleet.home) {
        return Err(Error::Role {
            field: "fleet.members".into(),
            reason: format!("the home cluster {} is not a member of its own fleet", fleet.home),
        });
    }
    if !reconciles {
        return Err(Error::Role {
            field: "fleet".into(),
            reason: "a fleet places the children of reconciled objects: declare the reconcile role".into(),
        });
    }
    Ok((clusters, Some(Fleet { home: fleet.home, members: fleet.members })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet(home: &str, members: &[&str]) -> Option<wit::Fleet> {
        Some(wit::Fleet { home: home.into(), members: members.iter().map(|m| (*m).to_owned()).collect() })
    }

    #[test]
    fn cluster_names_are_labels_named_once_and_a_home_is_no_member() {
        let (clusters, f) = parse(vec!["west".into()], fleet("default", &["west", "east"]), true).expect("valid");
        assert_eq!(clusters, ["west"]);
        assert_eq!(f.expect("a fleet").members, ["west", "east"]);
        let error = |clusters: Vec<String>, fleet, reconciles| {
            parse(clusters, fleet, reconciles).expect_err("refused").to_string()
        };
        assert_eq!(
            error(vec!["West".into()], None, true),
            r#"clusters[0]: cluster name "West" is not a DNS-1123 label"#
        );
        assert_eq!(error(vec![], fleet("default", &["a", "a"]), true), "fleet.members[1]: cluster a is named twice");
        assert_eq!(
            error(vec![], fleet("a", &["a"]), true),
            "fleet.members: the home cluster a is not a member of its own fleet"
        );
        assert_eq!(error(vec![], fleet("", &[]), true), r#"fleet.home: cluster name "" is not a DNS-1123 label"#);
        assert!(error(vec![], fleet("default", &[]), false).starts_with("fleet: a fleet places the children"));
        let many: Vec<String> = (0..65).map(|i| format!("c{i}")).collect();
        assert_eq!(error(many, None, true), "clusters: 65 is out of range (allowed: 0..=64)");
    }

    #[test]
    fn the_members_engaged_are_those_named_or_every_cluster_but_home() {
        let any = Fleet { home: "default".into(), members: vec![] };
        assert_eq!(any.engaged(["default", "west", "east"]), ["west", "east"]);
        let named = Fleet { home: "hub".into(), members: vec!["east".into()] };
        assert_eq!(named.engaged(["default", "west", "east"]), ["east"]);
    }
}

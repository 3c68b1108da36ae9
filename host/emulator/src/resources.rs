//! The resources the emulator serves, described once and used by routing, discovery, tables
//! and validation.

/// One served resource (a group, version and plural), as discovery describes it.
#[derive(Debug)]
pub(crate) struct ResourceInfo {
    /// API group; empty for the core group.
    pub group: &'static str,
    /// API version.
    pub version: &'static str,
    /// Plural resource name, as in URLs.
    pub plural: &'static str,
    /// Singular resource name.
    pub singular: &'static str,
    /// Kind of one object.
    pub kind: &'static str,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// Short names kubectl accepts.
    pub short_names: &'static [&'static str],
    /// Whether PUT on a missing object creates it (`AllowCreateOnUpdate`).
    pub allow_create_on_update: bool,
    /// Whether PUT without a resourceVersion is accepted (`AllowUnconditionalUpdate`).
    pub allow_unconditional_update: bool,
    /// Field selectors beyond `metadata.name` and `metadata.namespace`.
    pub extra_field_selectors: &'static [&'static str],
    /// Whether `status` is a subresource (`.../NAME/status`): writes to the object keep the
    /// stored status, writes to the subresource change only the status.
    pub status_subresource: bool,
}

/// Field selectors the events resources accept, in addition to the metadata ones.
const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reportingController",
];

/// Every served resource. Index positions are resource ids used by the store.
pub(crate) static RESOURCES: &[ResourceInfo] = &[
    ResourceInfo {
        group: "",
        version: "v1",
        plural: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        namespaced: false,
        short_names: &["ns"],
        allow_create_on_update: false,
        allow_unconditional_update: true,
        extra_field_selectors: &["status.phase"],
        status_subresource: false,
    },
    ResourceInfo {
        group: "",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        allow_create_on_update: true,
        allow_unconditional_update: true,
        extra_field_selectors: EVENT_FIELDS,
        status_subresource: false,
    },
    ResourceInfo {
        group: "coordination.k8s.io",
        version: "v1",
        plural: "leases",
        singular: "lease",
        kind: "Lease",
        namespaced: true,
        short_names: &[],
        allow_create_on_update: true,
        allow_unconditional_update: false,
        extra_field_selectors: &[],
        status_subresource: false,
    },
    ResourceInfo {
        group: "coordination.k8s.io",
        version: "v1beta1",
        plural: "leasecandidates",
        singular: "leasecandidate",
        kind: "LeaseCandidate",
        namespaced: true,
        short_names: &[],
        allow_create_on_update: true,
        allow_unconditional_update: false,
        extra_field_selectors: &["spec.leaseName"],
        status_subresource: false,
    },
    // Pods as far as an election controller reads them: the kubelet's report in the status
    // subresource (written by tests as a kubelet would), finalizers for a deletion in progress.
    ResourceInfo {
        group: "",
        version: "v1",
        plural: "pods",
        singular: "pod",
        kind: "Pod",
        namespaced: true,
        short_names: &["po"],
        allow_create_on_update: false,
        allow_unconditional_update: true,
        extra_field_selectors: &["spec.nodeName", "status.phase"],
        status_subresource: true,
    },
    ResourceInfo {
        group: "events.k8s.io",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        allow_create_on_update: true,
        allow_unconditional_update: true,
        extra_field_selectors: EVENT_FIELDS,
        status_subresource: false,
    },
];

/// Resource id of namespaces.
pub(crate) const NAMESPACES: usize = 0;
/// Resource id of leases.
pub(crate) const LEASES: usize = 2;
/// Resource id of lease candidates.
pub(crate) const LEASE_CANDIDATES: usize = 3;

/// The API groups served under `/apis`, with their versions (preferred first).
pub(crate) static GROUPS: &[(&str, &[&str])] = &[
    ("coordination.k8s.io", &["v1", "v1beta1"]),
    ("events.k8s.io", &["v1"]),
];

impl ResourceInfo {
    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `plural.group` (or `plural` for the core group), as error messages name resources.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `Kind.group` (or `Kind` for the core group), as Invalid messages name kinds.
    pub fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.to_string()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    /// Whether the field selector `field` is supported for this resource.
    pub fn supports_field(&self, field: &str) -> bool {
        field == "metadata.name"
            || (field == "metadata.namespace" && self.namespaced)
            || self.extra_field_selectors.contains(&field)
    }

    /// The verbs this resource supports, as discovery lists them.
    pub fn verbs(&self) -> &'static [&'static str] {
        if self.plural == "namespaces" {
            &[
                "create", "delete", "get", "list", "patch", "update", "watch",
            ]
        } else {
            &[
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch",
            ]
        }
    }
}

/// Finds the resource with the given group, version and plural name.
pub(crate) fn find(group: &str, version: &str, plural: &str) -> Option<usize> {
    RESOURCES
        .iter()
        .position(|r| r.group == group && r.version == version && r.plural == plural)
}

/// What the emulator serves, as a sentence's list (`v1 Namespaces, ... and events.k8s.io/v1
/// Events`), for the 404 of everything else.
pub(crate) fn served_summary() -> String {
    let served: Vec<String> = RESOURCES
        .iter()
        .map(|r| {
            let status = if r.status_subresource {
                " (with status)"
            } else {
                ""
            };
            format!("{} {}s{status}", r.api_version(), r.kind)
        })
        .collect();
    match served.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// Whether `group`/`version` is served at all.
pub(crate) fn version_served(group: &str, version: &str) -> bool {
    RESOURCES
        .iter()
        .any(|r| r.group == group && r.version == version)
}

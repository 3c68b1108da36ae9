//! The `OldestEmulationVersion` ranking, shared by the built-in plugin, the other strategies that
//! break ties with it, and the host's native benchmark and `status` preview.
//!
//! Upstream (spec §4): lowest emulation version, then lowest binary version, then oldest
//! `creationTimestamp`; a candidate whose versions do not parse (tolerantly) is ineligible. Unlike
//! upstream, a full tie is broken by candidate name, so the answer never depends on list order.

use crate::time::Timestamp;
use crate::version::Version;
use core::cmp::Ordering;

/// How one eligible candidate ranks under `OldestEmulationVersion`; smaller is better.
#[derive(Debug, Clone)]
pub struct OldestEmulationRank<'a> {
    /// The emulation version, compared first.
    pub emulation: Version,
    /// The binary version, compared second.
    pub binary: Version,
    /// The creation time, compared third; an unknown time ranks after every known one.
    pub created: Option<Timestamp>,
    /// The candidate name, the final tie-break.
    pub name: &'a str,
}

impl<'a> OldestEmulationRank<'a> {
    /// Ranks a candidate, or returns `None` when it is ineligible because a version does not parse.
    #[must_use]
    pub fn new(
        name: &'a str,
        binary_version: &str,
        emulation_version: &str,
        created: Option<Timestamp>,
    ) -> Option<Self> {
        Some(Self {
            emulation: Version::parse_tolerant(emulation_version).ok()?,
            binary: Version::parse_tolerant(binary_version).ok()?,
            created,
            name,
        })
    }

    /// Compares only the versions: `Equal` means neither candidate is strictly older.
    #[must_use]
    pub fn cmp_versions(&self, other: &Self) -> Ordering {
        self.emulation
            .cmp(&other.emulation)
            .then_with(|| self.binary.cmp(&other.binary))
    }
}

impl PartialEq for OldestEmulationRank<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for OldestEmulationRank<'_> {}

impl Ord for OldestEmulationRank<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        let created = match (self.created, other.created) {
            (Some(a), Some(b)) => a.cmp(&b),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        };
        self.cmp_versions(other)
            .then(created)
            .then_with(|| self.name.cmp(other.name))
    }
}

impl PartialOrd for OldestEmulationRank<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Picks the best-ranked candidate name, or `None` when no candidate is eligible.
pub fn pick_oldest_emulation_version<'a>(
    ranks: impl IntoIterator<Item = OldestEmulationRank<'a>>,
) -> Option<&'a str> {
    ranks.into_iter().min().map(|rank| rank.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    type Case<'a> = (&'static str, &'a str, &'a str, Option<i64>);

    fn pick(cands: &[Case<'_>]) -> Option<&'static str> {
        pick_oldest_emulation_version(cands.iter().filter_map(|(n, b, e, c)| {
            OldestEmulationRank::new(n, b, e, c.map(Timestamp::from_secs))
        }))
    }

    #[test]
    fn upstream_integration_example_elects_baz3() {
        let cands = [
            ("baz1", "1.20.0", "1.20.0", Some(1)),
            ("baz2", "1.20.0", "1.19.0", Some(1)),
            ("baz3", "1.19.0", "1.19.0", Some(1)),
            ("baz4", "1.20.0", "1.19.0", Some(1)),
        ];
        assert_eq!(pick(&cands), Some("baz3"));
    }

    #[test]
    fn ranking_rules_in_order() {
        let table: &[(&str, &[Case<'_>], Option<&str>)] = &[
            ("empty", &[], None),
            (
                "emulation first",
                &[
                    ("a", "1.30.0", "1.30.0", Some(1)),
                    ("b", "1.31.0", "1.29.0", Some(9)),
                ],
                Some("b"),
            ),
            (
                "binary second",
                &[
                    ("a", "1.31.0", "1.30.0", Some(1)),
                    ("b", "1.30.0", "1.30.0", Some(9)),
                ],
                Some("b"),
            ),
            (
                "oldest creation third",
                &[
                    ("a", "1.30.0", "1.30.0", Some(9)),
                    ("b", "1.30.0", "1.30.0", Some(1)),
                ],
                Some("b"),
            ),
            (
                "name breaks full tie",
                &[
                    ("b", "1.30.0", "1.30.0", Some(1)),
                    ("a", "1.30.0", "1.30.0", Some(1)),
                ],
                Some("a"),
            ),
            (
                "unknown creation ranks last",
                &[
                    ("a", "1.30.0", "1.30.0", None),
                    ("b", "1.30.0", "1.30.0", Some(5)),
                ],
                Some("b"),
            ),
            (
                "unparseable ineligible",
                &[
                    ("a", "x", "1.0.0", Some(1)),
                    ("b", "1.31.0", "1.31.0", Some(9)),
                ],
                Some("b"),
            ),
            ("missing ineligible", &[("a", "1.30.0", "", Some(1))], None),
            (
                "pre-release below release",
                &[
                    ("a", "1.31.0", "1.31.0", Some(1)),
                    ("b", "1.31.0", "1.31.0-rc.1", Some(9)),
                ],
                Some("b"),
            ),
            (
                "build metadata ignored",
                &[
                    ("a", "1.31.0+z", "1.31.0+z", Some(1)),
                    ("b", "1.31.0+a", "1.31.0+a", Some(9)),
                ],
                Some("a"),
            ),
            (
                "tolerant v prefix",
                &[
                    ("a", "v1.31", "v1.31", Some(1)),
                    ("b", "1.32.0", "1.32.0", Some(0)),
                ],
                Some("a"),
            ),
        ];
        for (case, cands, want) in table {
            assert_eq!(pick(cands), *want, "{case}");
            let reversed: Vec<_> = cands.iter().rev().cloned().collect();
            assert_eq!(pick(&reversed), *want, "{case} (reversed)");
        }
    }
}

//! An election request as `conclave:strategy@0.2.0` and later hand it to a plugin: candidates in
//! name order, versions parsed once by the host and given an order that compares like the
//! versions, and the holder's position among the candidates.
//!
//! The engine lowers this into a component; the SDK builds the same from an [`ElectionRequest`]
//! when a plugin runs natively (its tests, the host's native benchmark). One implementation keeps
//! both paths handing a rule the same data.

use crate::request::{CandidateView, ElectionRequest};
use crate::version::Version;
use alloc::string::String;
use alloc::vec::Vec;

/// A version as the host parsed it, with its place among the request's versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedVersion {
    /// The major version.
    pub major: u64,
    /// The minor version.
    pub minor: u64,
    /// The patch version.
    pub patch: u64,
    /// Whether it has a pre-release part.
    pub pre_release: bool,
    /// Dense rank among all versions of the request (binary and emulation together): equal
    /// versions have equal orders, lower is older.
    pub order: u32,
}

/// One candidate of a [`PreparedRequest`].
#[derive(Debug, Clone, Copy)]
pub struct PreparedCandidate<'a> {
    /// The candidate as the controller sees it.
    pub view: &'a CandidateView,
    /// `spec.binaryVersion`, parsed tolerantly; `None` when it does not parse.
    pub binary_version: Option<ParsedVersion>,
    /// `spec.emulationVersion`, parsed tolerantly; `None` when empty or it does not parse.
    pub emulation_version: Option<ParsedVersion>,
}

/// An [`ElectionRequest`] prepared for a 0.2 plugin.
#[derive(Debug, Clone)]
pub struct PreparedRequest<'a> {
    /// The request it was prepared from.
    pub request: &'a ElectionRequest,
    /// The candidates, sorted by name.
    pub candidates: Vec<PreparedCandidate<'a>>,
    /// The position of `lease.holder` in `candidates`.
    pub holder_index: Option<u32>,
    /// The position of `lease.preferred_holder` in `candidates`.
    pub preferred_holder_index: Option<u32>,
}

/// Why a request cannot be handed to a 0.2 plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrepareError {
    /// Two candidates have the same name, so a position would not name one identity.
    DuplicateName(String),
    /// More candidates than a `u32` position can address.
    TooManyCandidates(usize),
}

impl core::fmt::Display for PrepareError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::DuplicateName(name) => write!(f, "candidate {name:?} is listed twice"),
            Self::TooManyCandidates(count) => write!(f, "{count} candidates are too many"),
        }
    }
}

impl core::error::Error for PrepareError {}

/// Distinct versions are collected by linear search up to this many (the usual case: a cluster
/// runs two or three versions); past it, every version is sorted.
const LINEAR_LOOKUP: usize = 16;

/// Bits of each of major, minor and patch in a [`packed`] key.
const PACKED_BITS: u32 = 21;

/// A plain release as one integer that orders like the version, or `None` for a pre-release or
/// a number too large to pack.
fn packed(version: &Version) -> Option<u64> {
    let fits = |n: u64| n < 1 << PACKED_BITS;
    (version.pre.is_empty() && fits(version.major) && fits(version.minor) && fits(version.patch))
        .then_some(
            (version.major << (2 * PACKED_BITS)) | (version.minor << PACKED_BITS) | version.patch,
        )
}

/// The dense order of each of `versions` (`None` stays unused, as 0).
fn orders(versions: &[Option<Version>]) -> Vec<u32> {
    let keys: Option<Vec<Option<u64>>> = versions
        .iter()
        .map(|version| version.as_ref().map_or(Some(None), |v| packed(v).map(Some)))
        .collect();
    match keys {
        Some(keys) => packed_orders(&keys),
        None => general_orders(versions),
    }
}

/// Dense orders of packed keys: a small sorted set of the distinct ones, found by binary search.
fn packed_orders(keys: &[Option<u64>]) -> Vec<u32> {
    let mut distinct: Vec<u64> = Vec::with_capacity(LINEAR_LOOKUP);
    for key in keys.iter().flatten() {
        if !distinct.contains(key) {
            if distinct.len() == LINEAR_LOOKUP {
                distinct = keys.iter().flatten().copied().collect();
                break;
            }
            distinct.push(*key);
        }
    }
    distinct.sort_unstable();
    distinct.dedup();
    keys.iter()
        .map(|key| key.map_or(0, |key| distinct.partition_point(|d| *d < key) as u32))
        .collect()
}

/// Dense orders by full semver comparison, for requests with pre-releases.
fn general_orders(versions: &[Option<Version>]) -> Vec<u32> {
    let mut slots: Vec<usize> = (0..versions.len())
        .filter(|i| versions[*i].is_some())
        .collect();
    let version = |slot: usize| {
        versions[slot]
            .as_ref()
            .expect("only parsed slots are sorted")
    };
    slots.sort_unstable_by(|a, b| version(*a).cmp(version(*b)));
    let mut orders = alloc::vec![0; versions.len()];
    let mut order = 0;
    for (rank, slot) in slots.iter().enumerate() {
        if rank > 0 && version(slots[rank - 1]) != version(*slot) {
            order += 1;
        }
        orders[*slot] = order;
    }
    orders
}

fn parse(text: &str) -> Option<Version> {
    Version::parse_tolerant(text).ok()
}

impl<'a> PreparedRequest<'a> {
    /// Prepares `request`: sorts its candidates by name (cheaply when they already are, as the
    /// controller's are), parses every version once and orders them.
    ///
    /// # Errors
    ///
    /// [`PrepareError`] when two candidates share a name or there are more than `u32::MAX`.
    pub fn new(request: &'a ElectionRequest) -> Result<Self, PrepareError> {
        let count = request.candidates.len();
        if u32::try_from(count).is_err() {
            return Err(PrepareError::TooManyCandidates(count));
        }
        let mut views: Vec<&CandidateView> = request.candidates.iter().collect();
        if !views.is_sorted_by(|a, b| a.name < b.name) {
            views.sort_unstable_by(|a, b| a.name.cmp(&b.name));
            if let Some(pair) = views.windows(2).find(|pair| pair[0].name == pair[1].name) {
                return Err(PrepareError::DuplicateName(pair[0].name.clone()));
            }
        }

        // Binary and emulation version of candidate `i` at `2 * i` and `2 * i + 1`.
        let versions: Vec<Option<Version>> = views
            .iter()
            .flat_map(|view| [parse(&view.binary_version), parse(&view.emulation_version)])
            .collect();
        let order_of = orders(&versions);
        let finish = |slot: usize| {
            versions[slot].as_ref().map(|version| ParsedVersion {
                major: version.major,
                minor: version.minor,
                patch: version.patch,
                pre_release: !version.pre.is_empty(),
                order: order_of[slot],
            })
        };
        let candidates: Vec<PreparedCandidate<'a>> = views
            .into_iter()
            .enumerate()
            .map(|(i, view)| PreparedCandidate {
                view,
                binary_version: finish(2 * i),
                emulation_version: finish(2 * i + 1),
            })
            .collect();
        let position = |name: Option<&str>| {
            let name = name?;
            candidates
                .binary_search_by(|c| c.view.name.as_str().cmp(name))
                .ok()
                .map(|i| i as u32)
        };
        Ok(Self {
            holder_index: position(request.lease.holder.as_deref()),
            preferred_holder_index: position(request.lease.preferred_holder.as_deref()),
            candidates,
            request,
        })
    }

    /// The name of the candidate at `position`, as a 0.2 plugin answers; `None` past the end.
    #[must_use]
    pub fn name_at(&self, position: u32) -> Option<&'a str> {
        self.candidates
            .get(position as usize)
            .map(|c| c.view.name.as_str())
    }
}

/// The `(key, value)` pairs of `pairs` (labels or annotations) a plugin reads: every one when
/// `all`, else those under one of `keys`. In the order of `pairs`, which is by key.
pub fn read_pairs<'a, 'k, K: AsRef<str>>(
    pairs: &'a [(String, String)],
    all: bool,
    keys: &'k [K],
) -> impl Iterator<Item = &'a (String, String)> + use<'a, 'k, K> {
    pairs
        .iter()
        .filter(move |(key, _)| all || keys.iter().any(|wanted| wanted.as_ref() == key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::LeaseView;
    use alloc::string::ToString;

    fn candidate(name: &str, binary: &str, emulation: &str) -> CandidateView {
        CandidateView {
            name: name.into(),
            binary_version: binary.into(),
            emulation_version: emulation.into(),
            ..CandidateView::default()
        }
    }

    fn request(candidates: Vec<CandidateView>, holder: Option<&str>) -> ElectionRequest {
        ElectionRequest {
            lease: LeaseView {
                holder: holder.map(String::from),
                ..LeaseView::default()
            },
            candidates,
            ..ElectionRequest::default()
        }
    }

    #[test]
    fn candidates_come_in_name_order_with_the_holder_found() {
        let request = request(
            alloc::vec![
                candidate("c", "1.31.0", "1.30.0"),
                candidate("a", "1.31.0", "1.31.0"),
                candidate("b", "1.30.0", "1.30.0"),
            ],
            Some("c"),
        );
        let prepared = PreparedRequest::new(&request).unwrap();
        let names: Vec<&str> = prepared
            .candidates
            .iter()
            .map(|c| c.view.name.as_str())
            .collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(prepared.holder_index, Some(2));
        assert_eq!(prepared.preferred_holder_index, None);
        assert_eq!(prepared.name_at(1), Some("b"));
        assert_eq!(prepared.name_at(3), None);
    }

    #[test]
    fn a_holder_that_is_not_a_candidate_has_no_position() {
        let request = request(
            alloc::vec![candidate("a", "1.31.0", "1.31.0")],
            Some("gone"),
        );
        assert_eq!(PreparedRequest::new(&request).unwrap().holder_index, None);
    }

    #[test]
    fn orders_compare_like_the_versions() {
        let versions = [
            "1.31.0",
            "1.30.0",
            "v1.30",
            "1.31.0-rc.1",
            "1.31.0-alpha.2",
            "1.31.0-alpha.10",
            "1.29.9",
            "1.31.0+build.7",
            "2.0.0",
        ];
        let candidates = versions
            .iter()
            .enumerate()
            .map(|(i, v)| candidate(&i.to_string(), v, "1.30.0"))
            .collect();
        let request = request(candidates, None);
        let prepared = PreparedRequest::new(&request).unwrap();
        for a in &prepared.candidates {
            for b in &prepared.candidates {
                let (pa, pb) = (a.binary_version.unwrap(), b.binary_version.unwrap());
                let expected = Version::parse_tolerant(&a.view.binary_version)
                    .unwrap()
                    .cmp(&Version::parse_tolerant(&b.view.binary_version).unwrap());
                assert_eq!(
                    pa.order.cmp(&pb.order),
                    expected,
                    "{} vs {}",
                    a.view.binary_version,
                    b.view.binary_version
                );
            }
        }
        let rc = prepared
            .candidates
            .iter()
            .find(|c| c.view.binary_version == "1.31.0-rc.1");
        assert!(rc.unwrap().binary_version.unwrap().pre_release);
        let orders: Vec<u32> = prepared
            .candidates
            .iter()
            .map(|c| c.binary_version.unwrap().order)
            .collect();
        assert_eq!(
            orders.iter().max(),
            Some(&6),
            "dense: 7 distinct versions, {orders:?}"
        );
    }

    #[test]
    fn orders_stay_right_past_the_linear_lookup() {
        let candidates = (0..100u64)
            .map(|i| {
                candidate(
                    &alloc::format!("c{i:03}"),
                    &alloc::format!("1.{}.0", 99 - i),
                    "1.0.0",
                )
            })
            .collect();
        let request = request(candidates, None);
        let prepared = PreparedRequest::new(&request).unwrap();
        for c in &prepared.candidates {
            let minor = c.binary_version.unwrap().minor;
            // "1.0.0" (every emulation version) is also minor 0: orders start at it.
            assert_eq!(
                u64::from(c.binary_version.unwrap().order),
                minor,
                "{}",
                c.view.name
            );
            assert_eq!(c.emulation_version.unwrap().order, 0);
        }
    }

    #[test]
    fn unparseable_and_empty_versions_have_none() {
        let request = request(alloc::vec![candidate("a", "latest", "")], None);
        let prepared = PreparedRequest::new(&request).unwrap();
        assert_eq!(prepared.candidates[0].binary_version, None);
        assert_eq!(prepared.candidates[0].emulation_version, None);
    }

    #[test]
    fn read_pairs_are_all_or_the_keys_asked_for() {
        let pairs: Vec<(String, String)> = [("a", "1"), ("b", "2"), ("c", "3")]
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        let keys = |all, wanted: &[&str]| -> Vec<&str> {
            read_pairs(&pairs, all, wanted)
                .map(|(k, _)| k.as_str())
                .collect()
        };
        assert_eq!(keys(true, &[]), ["a", "b", "c"]);
        assert_eq!(keys(false, &["c", "a", "z"]), ["a", "c"]);
        assert!(keys(false, &[]).is_empty());
    }

    #[test]
    fn duplicate_names_are_refused() {
        let request = request(
            alloc::vec![
                candidate("b", "1.0.0", ""),
                candidate("a", "1.0.0", ""),
                candidate("b", "1.0.0", "")
            ],
            None,
        );
        assert_eq!(
            PreparedRequest::new(&request).unwrap_err(),
            PrepareError::DuplicateName("b".into())
        );
    }
}

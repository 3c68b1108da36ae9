//! What a rule reads: [`Reads`], and conveniences on the request's WIT types.

use crate::bindings::{self, Candidate, CandidateFields};
use alloc::string::{String, ToString};

/// The candidate fields a rule reads beyond versions and times, as [`Strategy::READS`]
/// (crate::Strategy::READS) declares them; the host sends only these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reads {
    /// Fields read whole.
    pub fields: CandidateFields,
    /// Label keys read, when not every label is ([`CandidateFields::LABELS`]).
    pub label_keys: &'static [&'static str],
    /// Annotation keys read, when not every annotation is ([`CandidateFields::ANNOTATIONS`]).
    pub annotation_keys: &'static [&'static str],
}

impl Reads {
    /// Every field: the default, right for a first version of a rule.
    pub const EVERYTHING: Self = Self {
        fields: CandidateFields::all(),
        label_keys: &[],
        annotation_keys: &[],
    };

    /// Versions and times only: the fastest request.
    pub const NOTHING: Self = Self {
        fields: CandidateFields::empty(),
        label_keys: &[],
        annotation_keys: &[],
    };

    /// Whether the candidates' labels under `key` are sent.
    #[must_use]
    pub fn label(&self, key: &str) -> bool {
        self.fields.contains(CandidateFields::LABELS) || self.label_keys.contains(&key)
    }

    /// Whether the candidates' annotations under `key` are sent.
    #[must_use]
    pub fn annotation(&self, key: &str) -> bool {
        self.fields.contains(CandidateFields::ANNOTATIONS) || self.annotation_keys.contains(&key)
    }

    /// As the WIT record `info` returns.
    pub(crate) fn to_wit(self) -> bindings::Reads {
        bindings::Reads {
            fields: self.fields,
            label_keys: self.label_keys.iter().map(ToString::to_string).collect(),
            annotation_keys: self
                .annotation_keys
                .iter()
                .map(ToString::to_string)
                .collect(),
        }
    }
}

/// The candidates with their positions, the value `elect` answers with.
pub fn positions(candidates: &[Candidate]) -> impl Iterator<Item = (u32, &Candidate)> {
    // The host never sends more than u32::MAX candidates.
    (0..=u32::MAX).zip(candidates)
}

fn lookup<'a>(pairs: Option<&'a [(String, String)]>, key: &str) -> Option<&'a str> {
    let pairs = pairs?;
    let found = pairs.binary_search_by(|(k, _)| k.as_str().cmp(key)).ok()?;
    Some(pairs[found].1.as_str())
}

impl Candidate {
    /// The candidate's name.
    ///
    /// # Panics
    ///
    /// When the strategy does not read names (`CandidateFields::NAME` in
    /// [`Strategy::READS`](crate::Strategy::READS)): the host did not send them, and a rule that
    /// needs them must say so.
    #[must_use]
    pub fn name(&self) -> &str {
        self.name.as_deref().expect(
            "the strategy reads candidate names but does not declare CandidateFields::NAME in \
             Strategy::READS",
        )
    }

    /// The value of a label the strategy reads, if the candidate has it.
    #[must_use]
    pub fn label(&self, key: &str) -> Option<&str> {
        lookup(self.labels.as_deref(), key)
    }

    /// The value of an annotation the strategy reads, if the candidate has it.
    #[must_use]
    pub fn annotation(&self, key: &str) -> Option<&str> {
        lookup(self.annotations.as_deref(), key)
    }
}

//! What a rule reads ([`Reads`]: candidate fields, and whether it reads the clock), and the
//! candidates of a request seen one at a time ([`Candidate`]) although they arrive as columns.

use crate::bindings::{self, CandidateColumns, CandidateFields};
use alloc::string::ToString;
use conclave_core::columns::UNKNOWN_TIME;

/// The candidate fields a rule reads beyond versions and times, as [`Strategy::READS`]
/// (crate::Strategy::READS) declares them (the host sends only these), and whether its answer may
/// depend on the request's `now` ([`now`](Self::now)).
///
/// Both constants say the rule reads `now`, the answer that is always safe; a rule that never
/// compares anything with `now` says so explicitly:
///
/// ```
/// use conclave_strategy::Reads;
/// const READS: Reads = Reads { now: false, ..Reads::NOTHING };
/// assert!(!READS.now);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reads {
    /// Fields read whole.
    pub fields: CandidateFields,
    /// Label keys read, when not every label is ([`CandidateFields::LABELS`]).
    pub label_keys: &'static [&'static str],
    /// Annotation keys read, when not every annotation is ([`CandidateFields::ANNOTATIONS`]).
    pub annotation_keys: &'static [&'static str],
    /// Whether the answer may depend on `request.now`: the rule compares it with a candidate's
    /// times or with anything else. `now` arrives either way. With `false` the controller does
    /// not call the plugin for a renewal of the Lease by its holder that changes nothing else
    /// (the request would differ only in `now`); a rule that reads `now` all the same decides on
    /// a stale clock until something else changes. `lease.expired` does not count: the host
    /// reads the clock for it and asks again when the Lease expires.
    pub now: bool,
}

impl Reads {
    /// Every field, and `now`: the default, right for a first version of a rule.
    pub const EVERYTHING: Self = Self {
        fields: CandidateFields::all(),
        label_keys: &[],
        annotation_keys: &[],
        now: true,
    };

    /// Versions and times only (`now` among them): the fastest request.
    pub const NOTHING: Self = Self {
        fields: CandidateFields::empty(),
        label_keys: &[],
        annotation_keys: &[],
        now: true,
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
            now: self.now,
        }
    }
}

impl bindings::PackedStrings {
    /// String `index`, if there is one.
    #[must_use]
    pub fn get(&self, index: usize) -> Option<&str> {
        let end = *self.ends.get(index)? as usize;
        let start = match index {
            0 => 0,
            _ => self.ends[index - 1] as usize,
        };
        self.text.get(start..end)
    }
}

impl bindings::StringColumn {
    /// The value of candidate `position`, if it has one.
    #[must_use]
    pub fn get(&self, position: usize) -> Option<&str> {
        self.dictionary.get(self.entry(position)?)
    }

    /// Which of the [distinct values](Self::distinct_values) candidate `position` has, if it has
    /// one. Candidates with the same value share an entry, so a rule that maps values to
    /// something (a zone to its rank) can map each distinct value once, not once per candidate.
    #[must_use]
    pub fn entry(&self, position: usize) -> Option<usize> {
        match *self.values.get(position)? {
            0 => None,
            entry => Some(entry as usize - 1),
        }
    }

    /// The distinct values, in entry order ([`entry`](Self::entry)); one item per entry, an
    /// entry the host sent malformed as the empty string.
    pub fn distinct_values(&self) -> impl Iterator<Item = &str> {
        (0..self.dictionary.ends.len()).map(|index| self.dictionary.get(index).unwrap_or_default())
    }
}

/// A version the host parsed, with its order among the request's versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedVersion {
    /// The major version.
    pub major: u64,
    /// The minor version.
    pub minor: u64,
    /// The patch version.
    pub patch: u64,
    /// Whether it has a pre-release part, which sorts before its release.
    pub pre_release: bool,
    /// Where it stands among the request's versions: lower is older, equal versions have equal
    /// orders. Compare versions by this.
    pub order: u32,
}

/// One candidate of a request: a view of its entry in every column.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    columns: &'a CandidateColumns,
    position: u32,
}

fn time(times: &[i64], position: u32) -> Option<i64> {
    times
        .get(position as usize)
        .copied()
        .filter(|time| *time != UNKNOWN_TIME)
}

/// The column of `key` among `columns`, which the host sends sorted by key.
fn column_of<'a>(
    columns: &'a [bindings::KeyedColumn],
    key: &str,
) -> Option<&'a bindings::StringColumn> {
    let found = columns
        .binary_search_by(|column| column.key.as_str().cmp(key))
        .ok()?;
    Some(&columns[found].column)
}

fn keyed<'a>(columns: &'a [bindings::KeyedColumn], key: &str, position: u32) -> Option<&'a str> {
    column_of(columns, key)?.get(position as usize)
}

fn every_key(
    columns: &[bindings::KeyedColumn],
    position: u32,
) -> impl Iterator<Item = (&str, &str)> {
    columns.iter().filter_map(move |column| {
        Some((column.key.as_str(), column.column.get(position as usize)?))
    })
}

impl<'a> Candidate<'a> {
    /// Its position in the request, the value `elect` answers with.
    #[must_use]
    pub fn position(&self) -> u32 {
        self.position
    }

    fn version(&self, orders: &[u32]) -> Option<ParsedVersion> {
        let order = *orders.get(self.position as usize)?;
        let version = self.columns.versions.get(order as usize)?;
        Some(ParsedVersion {
            major: version.major,
            minor: version.minor,
            patch: version.patch,
            pre_release: version.pre_release,
            order,
        })
    }

    /// `spec.binaryVersion`, parsed; `None` when it does not parse.
    #[must_use]
    pub fn binary_version(&self) -> Option<ParsedVersion> {
        self.version(&self.columns.binary_version)
    }

    /// `spec.emulationVersion`, parsed; `None` when it is empty or does not parse.
    #[must_use]
    pub fn emulation_version(&self) -> Option<ParsedVersion> {
        self.version(&self.columns.emulation_version)
    }

    /// `metadata.creationTimestamp` in microseconds since the Unix epoch, if known.
    #[must_use]
    pub fn creation_time(&self) -> Option<i64> {
        time(&self.columns.creation_time, self.position)
    }

    /// `spec.renewTime` in microseconds since the Unix epoch, if it ever renewed.
    #[must_use]
    pub fn renew_time(&self) -> Option<i64> {
        time(&self.columns.renew_time, self.position)
    }

    /// `spec.pingTime` in microseconds since the Unix epoch, if it was ever pinged.
    #[must_use]
    pub fn ping_time(&self) -> Option<i64> {
        time(&self.columns.ping_time, self.position)
    }

    /// The candidate's name.
    ///
    /// # Panics
    ///
    /// When the strategy does not read names (`CandidateFields::NAME` in
    /// [`Strategy::READS`](crate::Strategy::READS)): the host did not send them, and a rule that
    /// needs them must say so.
    #[must_use]
    pub fn name(&self) -> &'a str {
        self.columns
            .names
            .as_ref()
            .and_then(|names| names.get(self.position as usize))
            .expect(
                "the strategy reads candidate names but does not declare CandidateFields::NAME \
                 in Strategy::READS",
            )
    }

    fn text(&self, column: Option<&'a bindings::StringColumn>, field: &str) -> &'a str {
        let Some(column) = column else {
            panic!(
                "the strategy reads the candidates' {field} but does not declare it in \
                 Strategy::READS"
            );
        };
        column.get(self.position as usize).unwrap_or_default()
    }

    /// `spec.strategy`.
    ///
    /// # Panics
    ///
    /// When the strategy does not read it (`CandidateFields::STRATEGY`).
    #[must_use]
    pub fn strategy(&self) -> &'a str {
        self.text(self.columns.strategy.as_ref(), "strategy")
    }

    /// `spec.binaryVersion` as written.
    ///
    /// # Panics
    ///
    /// When the strategy does not read it (`CandidateFields::VERSION_TEXT`).
    #[must_use]
    pub fn binary_version_text(&self) -> &'a str {
        self.text(self.columns.binary_version_text.as_ref(), "version text")
    }

    /// `spec.emulationVersion` as written; empty when it is.
    ///
    /// # Panics
    ///
    /// When the strategy does not read it (`CandidateFields::VERSION_TEXT`).
    #[must_use]
    pub fn emulation_version_text(&self) -> &'a str {
        self.text(self.columns.emulation_version_text.as_ref(), "version text")
    }

    /// The value of a label the strategy reads, if the candidate has it.
    #[must_use]
    pub fn label(&self, key: &str) -> Option<&'a str> {
        keyed(&self.columns.labels, key, self.position)
    }

    /// The value of an annotation the strategy reads, if the candidate has it.
    #[must_use]
    pub fn annotation(&self, key: &str) -> Option<&'a str> {
        keyed(&self.columns.annotations, key, self.position)
    }

    /// The labels the strategy reads that the candidate has, as `(key, value)` sorted by key.
    pub fn labels(&self) -> impl Iterator<Item = (&'a str, &'a str)> + use<'a> {
        every_key(&self.columns.labels, self.position)
    }

    /// The annotations the strategy reads that the candidate has, as `(key, value)` sorted by
    /// key.
    pub fn annotations(&self) -> impl Iterator<Item = (&'a str, &'a str)> + use<'a> {
        every_key(&self.columns.annotations, self.position)
    }
}

impl CandidateColumns {
    /// The column of the label `key` the strategy reads, if any candidate has it.
    #[must_use]
    pub fn label_column(&self, key: &str) -> Option<&bindings::StringColumn> {
        column_of(&self.labels, key)
    }

    /// How many candidates there are.
    #[must_use]
    pub fn len(&self) -> usize {
        self.binary_version.len()
    }

    /// Whether there is none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.binary_version.is_empty()
    }

    /// The candidate at `position`, if there is one.
    #[must_use]
    pub fn get(&self, position: u32) -> Option<Candidate<'_>> {
        ((position as usize) < self.len()).then_some(Candidate {
            columns: self,
            position,
        })
    }

    /// The candidates in order (by name).
    pub fn iter(&self) -> impl Iterator<Item = Candidate<'_>> {
        // The host never sends more than u32::MAX candidates.
        (0..self.len() as u32).map(move |position| Candidate {
            columns: self,
            position,
        })
    }
}

/// The candidates with their positions, the value `elect` answers with.
pub fn positions(candidates: &CandidateColumns) -> impl Iterator<Item = (u32, Candidate<'_>)> {
    candidates
        .iter()
        .map(|candidate| (candidate.position(), candidate))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_explicit_declaration_says_a_rule_does_not_read_now() {
        assert!(Reads::EVERYTHING.to_wit().now);
        assert!(Reads::NOTHING.to_wit().now);
        let declared = Reads {
            now: false,
            ..Reads::NOTHING
        };
        assert!(!declared.to_wit().now);
        assert_eq!(declared.to_wit().fields, CandidateFields::empty());
    }
}

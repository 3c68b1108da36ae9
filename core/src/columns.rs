//! A prepared election request as the columns `conclave:strategy@0.3.0` and `@0.4.0` hand to a
//! plugin: one list per candidate field, so that a request of any size crosses into a component
//! in a few copies instead of one per field of every candidate.
//!
//! The engine lowers these columns into a component; the SDK builds the same from an
//! [`ElectionRequest`](crate::request::ElectionRequest) when a plugin runs natively (its tests,
//! the host's native benchmark). One implementation keeps both paths handing a rule the same data.

use crate::prepared::{ParsedVersion, PreparedRequest, read_pairs};
use crate::time::Timestamp;
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

/// The order of a version that does not parse (or an empty emulation version).
pub const NO_VERSION: u32 = u32::MAX;

/// A time that is unknown (never renewed, never pinged, no creation time).
pub const UNKNOWN_TIME: i64 = i64::MIN;

/// Which candidate fields a plugin reads beyond versions and times.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FieldSet {
    /// `metadata.name`.
    pub name: bool,
    /// `spec.strategy`.
    pub strategy: bool,
    /// The versions as written.
    pub version_text: bool,
    /// Every label.
    pub labels: bool,
    /// Every annotation.
    pub annotations: bool,
}

/// Strings packed end to end: string `i` is `text[ends[i - 1]..ends[i]]` (from 0 for the first).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackedStrings {
    /// Every string, one after the other.
    pub text: String,
    /// Where each string ends in `text`, in bytes.
    pub ends: Vec<u32>,
}

impl PackedStrings {
    fn push(&mut self, text: &str) {
        self.text.push_str(text);
        // A request is far smaller than 4 GiB: the engine's memory limit refuses it long before.
        self.ends
            .push(u32::try_from(self.text.len()).unwrap_or(u32::MAX));
    }

    /// How many strings there are.
    #[must_use]
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there is none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

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

/// One text field of every candidate, dictionary-encoded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StringColumn {
    /// For each candidate, 0 for no value, else 1 + the index of its value in `dictionary`.
    pub values: Vec<u32>,
    /// The distinct values, in the order they were first met.
    pub dictionary: PackedStrings,
}

impl StringColumn {
    /// The value of candidate `position`, if it has one.
    #[must_use]
    pub fn get(&self, position: usize) -> Option<&str> {
        match *self.values.get(position)? {
            0 => None,
            entry => self.dictionary.get(entry as usize - 1),
        }
    }
}

/// The values of one label or annotation key across the candidates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedColumn<'a> {
    /// The key.
    pub key: &'a str,
    /// Each candidate's value under it.
    pub column: StringColumn,
}

/// The candidate columns of a prepared request, holding only what a plugin reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Columns<'a> {
    /// Each candidate's binary version order, [`NO_VERSION`] when it does not parse.
    pub binary_version: Vec<u32>,
    /// Each candidate's emulation version order, [`NO_VERSION`] when empty or unparsable.
    pub emulation_version: Vec<u32>,
    /// The distinct versions by order.
    pub versions: Vec<ParsedVersion>,
    /// Creation times in microseconds, [`UNKNOWN_TIME`] when unknown.
    pub creation_time: Vec<i64>,
    /// Renewal times in microseconds, [`UNKNOWN_TIME`] when never renewed.
    pub renew_time: Vec<i64>,
    /// Ping times in microseconds, [`UNKNOWN_TIME`] when never pinged.
    pub ping_time: Vec<i64>,
    /// Names, when read.
    pub names: Option<PackedStrings>,
    /// `spec.strategy`, when read.
    pub strategy: Option<StringColumn>,
    /// `spec.binaryVersion` as written, when read.
    pub binary_version_text: Option<StringColumn>,
    /// `spec.emulationVersion` as written, when read.
    pub emulation_version_text: Option<StringColumn>,
    /// A column per label key read that some candidate has, sorted by key.
    pub labels: Vec<KeyedColumn<'a>>,
    /// A column per annotation key read that some candidate has, sorted by key.
    pub annotations: Vec<KeyedColumn<'a>>,
}

/// Distinct values are found by linear search up to this many (the usual case: a few zones, one
/// strategy, two or three versions); past it, by a sorted map.
const LINEAR_LOOKUP: usize = 16;

/// Builds a [`StringColumn`], giving each distinct value one dictionary entry.
struct ColumnBuilder<'a> {
    column: StringColumn,
    seen: Vec<&'a str>,
    index: Option<BTreeMap<&'a str, u32>>,
}

impl<'a> ColumnBuilder<'a> {
    fn new(count: usize) -> Self {
        Self {
            column: StringColumn {
                values: vec![0; count],
                dictionary: PackedStrings::default(),
            },
            seen: Vec::new(),
            index: None,
        }
    }

    fn set(&mut self, position: usize, value: &'a str) {
        let entry = match &mut self.index {
            Some(index) => index.get(value).copied(),
            None => self
                .seen
                .iter()
                .position(|seen| *seen == value)
                .map(|found| found as u32 + 1),
        };
        let entry = entry.unwrap_or_else(|| {
            self.column.dictionary.push(value);
            let entry = self.column.dictionary.len() as u32;
            match &mut self.index {
                Some(index) => {
                    index.insert(value, entry);
                }
                None if self.seen.len() < LINEAR_LOOKUP => self.seen.push(value),
                None => {
                    let mut index: BTreeMap<&'a str, u32> = self.seen.drain(..).zip(1..).collect();
                    index.insert(value, entry);
                    self.index = Some(index);
                }
            }
            entry
        });
        self.column.values[position] = entry;
    }

    fn finish(self) -> StringColumn {
        self.column
    }
}

fn time(time: Option<Timestamp>) -> i64 {
    time.map_or(UNKNOWN_TIME, Timestamp::as_micros)
}

fn order(version: Option<ParsedVersion>) -> u32 {
    version.map_or(NO_VERSION, |version| version.order)
}

/// One column per key of `pairs_of` each candidate (labels or annotations) that is read: every
/// key when `all`, else those of `keys`.
fn keyed_columns<'a, K: AsRef<str>>(
    prepared: &PreparedRequest<'a>,
    pairs_of: fn(&'a crate::request::CandidateView) -> &'a [(String, String)],
    all: bool,
    keys: &[K],
) -> Vec<KeyedColumn<'a>> {
    if !all && keys.is_empty() {
        return Vec::new();
    }
    let count = prepared.candidates.len();
    // Keys in order, each with its column; candidates' pairs are sorted by key, and few keys are
    // read, so a sorted vector is the map.
    let mut columns: Vec<(&'a str, ColumnBuilder<'a>)> = Vec::new();
    for (position, candidate) in prepared.candidates.iter().enumerate() {
        for (key, value) in read_pairs(pairs_of(candidate.view), all, keys) {
            let slot = match columns.binary_search_by(|(k, _)| (*k).cmp(key.as_str())) {
                Ok(slot) => slot,
                Err(slot) => {
                    columns.insert(slot, (key.as_str(), ColumnBuilder::new(count)));
                    slot
                }
            };
            columns[slot].1.set(position, value.as_str());
        }
    }
    columns
        .into_iter()
        .map(|(key, builder)| KeyedColumn {
            key,
            column: builder.finish(),
        })
        .collect()
}

impl<'a> Columns<'a> {
    /// The columns of `prepared` for a plugin that reads `fields` and the labels and annotations
    /// under `label_keys` and `annotation_keys`.
    #[must_use]
    pub fn new<K: AsRef<str>>(
        prepared: &PreparedRequest<'a>,
        fields: FieldSet,
        label_keys: &[K],
        annotation_keys: &[K],
    ) -> Self {
        let candidates = &prepared.candidates;
        let count = candidates.len();
        let mut versions: Vec<Option<ParsedVersion>> = Vec::new();
        let mut note = |version: Option<ParsedVersion>| {
            if let Some(version) = version {
                let slot = version.order as usize;
                if versions.len() <= slot {
                    versions.resize(slot + 1, None);
                }
                versions[slot] = Some(version);
            }
        };
        for candidate in candidates {
            note(candidate.binary_version);
            note(candidate.emulation_version);
        }
        let text_column = |text: fn(&'a crate::request::CandidateView) -> &'a str| {
            let mut builder = ColumnBuilder::new(count);
            for (position, candidate) in candidates.iter().enumerate() {
                let value = text(candidate.view);
                if !value.is_empty() {
                    builder.set(position, value);
                }
            }
            builder.finish()
        };
        Self {
            binary_version: candidates.iter().map(|c| order(c.binary_version)).collect(),
            emulation_version: candidates
                .iter()
                .map(|c| order(c.emulation_version))
                .collect(),
            // Orders are dense: every slot up to the highest is some version's.
            versions: versions.into_iter().flatten().collect(),
            creation_time: candidates
                .iter()
                .map(|c| time(c.view.creation_time))
                .collect(),
            renew_time: candidates.iter().map(|c| time(c.view.renew_time)).collect(),
            ping_time: candidates.iter().map(|c| time(c.view.ping_time)).collect(),
            names: fields.name.then(|| {
                let mut names = PackedStrings {
                    text: String::new(),
                    ends: Vec::with_capacity(count),
                };
                for candidate in candidates {
                    names.push(&candidate.view.name);
                }
                names
            }),
            strategy: fields.strategy.then(|| text_column(|view| &view.strategy)),
            binary_version_text: fields
                .version_text
                .then(|| text_column(|view| &view.binary_version)),
            emulation_version_text: fields
                .version_text
                .then(|| text_column(|view| &view.emulation_version)),
            labels: keyed_columns(prepared, |view| &view.labels, fields.labels, label_keys),
            annotations: keyed_columns(
                prepared,
                |view| &view.annotations,
                fields.annotations,
                annotation_keys,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{CandidateView, ElectionRequest};
    use alloc::format;
    use alloc::string::ToString;

    fn candidate(name: &str, binary: &str, emulation: &str, zone: Option<&str>) -> CandidateView {
        CandidateView {
            name: name.into(),
            binary_version: binary.into(),
            emulation_version: emulation.into(),
            strategy: "OldestEmulationVersion".into(),
            creation_time: Some(Timestamp::from_secs(100)),
            labels: zone
                .map(|zone| {
                    alloc::vec![
                        ("app".to_string(), name.to_string()),
                        ("zone".to_string(), zone.to_string())
                    ]
                })
                .unwrap_or_default(),
            ..CandidateView::default()
        }
    }

    fn request(candidates: Vec<CandidateView>) -> ElectionRequest {
        ElectionRequest {
            candidates,
            ..ElectionRequest::default()
        }
    }

    const NO_KEYS: &[&str] = &[];

    #[test]
    fn every_column_has_one_entry_per_candidate_in_name_order() {
        let request = request(alloc::vec![
            candidate("b", "1.31.0", "", Some("z1")),
            candidate("a", "1.30.0", "1.30.0", None),
            candidate("c", "latest", "1.31.0", Some("z1")),
        ]);
        let prepared = PreparedRequest::new(&request).unwrap();
        let all = FieldSet {
            name: true,
            strategy: true,
            version_text: true,
            labels: false,
            annotations: false,
        };
        let columns = Columns::new(&prepared, all, &["zone"], NO_KEYS);
        assert_eq!(columns.binary_version, [0, 1, NO_VERSION]);
        assert_eq!(columns.emulation_version, [0, NO_VERSION, 1]);
        let versions: Vec<(u64, u32)> = columns
            .versions
            .iter()
            .map(|v| (v.minor, v.order))
            .collect();
        assert_eq!(versions, [(30, 0), (31, 1)]);
        assert_eq!(columns.creation_time, [100_000_000; 3]);
        assert_eq!(columns.renew_time, [UNKNOWN_TIME; 3]);
        let names = columns.names.as_ref().unwrap();
        assert_eq!(
            (names.get(0), names.get(2), names.get(3)),
            (Some("a"), Some("c"), None)
        );
        let strategy = columns.strategy.as_ref().unwrap();
        assert_eq!(strategy.dictionary.len(), 1, "one distinct strategy");
        assert_eq!(strategy.get(1), Some("OldestEmulationVersion"));
        let emulation = columns.emulation_version_text.as_ref().unwrap();
        assert_eq!(
            emulation.get(1),
            None,
            "an empty emulation version has no value"
        );
        assert_eq!(emulation.get(2), Some("1.31.0"));
        assert_eq!(columns.labels.len(), 1, "only the key read");
        let zone = &columns.labels[0];
        assert_eq!(zone.key, "zone");
        assert_eq!(zone.column.values, [0, 1, 1]);
        assert_eq!(zone.column.get(2), Some("z1"));
        assert!(columns.annotations.is_empty());
    }

    #[test]
    fn every_label_read_gives_a_column_per_key_in_key_order() {
        let request = request(alloc::vec![
            candidate("a", "1.30.0", "1.30.0", Some("z2")),
            candidate("b", "1.30.0", "1.30.0", None),
        ]);
        let prepared = PreparedRequest::new(&request).unwrap();
        let labels = FieldSet {
            labels: true,
            ..FieldSet::default()
        };
        let columns = Columns::new(&prepared, labels, NO_KEYS, NO_KEYS);
        let keys: Vec<&str> = columns.labels.iter().map(|c| c.key).collect();
        assert_eq!(keys, ["app", "zone"]);
        assert_eq!(columns.labels[0].column.get(0), Some("a"));
        assert_eq!(columns.labels[0].column.get(1), None);
        assert!(columns.names.is_none() && columns.strategy.is_none());
    }

    #[test]
    fn dictionaries_stay_right_past_the_linear_lookup() {
        let candidates = (0..100)
            .map(|i| {
                candidate(
                    &format!("c{i:03}"),
                    "1.30.0",
                    "1.30.0",
                    Some(&format!("zone-{}", i % 40)),
                )
            })
            .collect();
        let request = request(candidates);
        let prepared = PreparedRequest::new(&request).unwrap();
        let columns = Columns::new(&prepared, FieldSet::default(), &["zone"], NO_KEYS);
        let zone = &columns.labels[0].column;
        assert_eq!(zone.dictionary.len(), 40);
        for i in 0..100 {
            assert_eq!(zone.get(i), Some(format!("zone-{}", i % 40).as_str()));
        }
    }
}

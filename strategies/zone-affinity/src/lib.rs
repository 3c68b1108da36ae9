//! `conclave.dev/zone-affinity`: candidates in the operator's preferred zones lead.
//!
//! Settings (required): `{"zones": ["zone-a", "zone-b", ...]}`, most preferred first. A candidate's
//! zone is its label `topology.kubernetes.io/zone`. Candidates in the earliest listed zone lead;
//! candidates without the label or in a zone that is not listed come after every listed zone.
//! Within one zone (or among the unlisted) the `OldestEmulationVersion` rule decides (lowest
//! emulation version, lowest binary version, oldest creation time, then name); a candidate whose
//! versions do not parse is ineligible, as under that rule.
//!
//! Missing or invalid settings make `elect` fail with a message that says what is wrong, so the
//! host reports it instead of electing by a rule the operator did not ask for.
// no_std in the component; the native build (linked by the host for `strategy bench`, and the
// cdylib that `cargo test` builds) takes std's allocator and panic handler.
#![cfg_attr(target_arch = "wasm32", no_std)]

use conclave_strategy::prelude::*;
use serde_json::Value;

/// The strategy name, as operators write it in `spec.strategy`.
pub const STRATEGY: &str = "conclave.dev/zone-affinity";

/// The label a candidate's zone is read from.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// The `conclave.dev/zone-affinity` strategy.
pub struct ZoneAffinity;

impl Strategy for ZoneAffinity {
    const STRATEGIES: &'static [&'static str] = &[STRATEGY];
    const DESCRIPTION: &'static str = "candidates in the earliest of settings.zones (label \
         topology.kubernetes.io/zone) lead, unlisted zones last; ties by OldestEmulationVersion";

    // The zone label, the settings, versions and creation times decide; nothing is compared with
    // `now`.
    const READS: Reads = Reads {
        label_keys: &[ZONE_LABEL],
        now: false,
        ..Reads::NOTHING
    };

    fn elect(request: &ElectionRequest) -> Result<Option<u32>, String> {
        let zones = parse_settings(&request.settings)
            .map_err(|problem| format!("invalid settings for {STRATEGY}: {problem}"))?;
        let unlisted = zones.len();
        // Each distinct zone is ranked once; a candidate then looks up its zone's entry.
        let column = request.candidates.label_column(ZONE_LABEL);
        let rank_of_entry: Vec<usize> = column
            .map(|column| {
                column
                    .distinct_values()
                    .map(|zone| zones.iter().position(|z| z == zone).unwrap_or(unlisted))
                    .collect()
            })
            .unwrap_or_default();
        Ok(request
            .candidates
            .iter()
            .filter_map(|c| {
                let key = OldestEmulationKey::new(&c)?;
                let preference = column
                    .and_then(|column| column.entry(c.position() as usize))
                    .and_then(|entry| rank_of_entry.get(entry).copied())
                    .unwrap_or(unlisted);
                Some((preference, key))
            })
            .min()
            .map(|(_, key)| key.position))
    }
}

/// The example every settings error points to.
const EXAMPLE: &str = r#"{"zones": ["zone-a", "zone-b"]}"#;

/// Parses `{"zones": [...]}` into the list of zones, most preferred first, or says what is wrong.
fn parse_settings(settings: &str) -> Result<Vec<String>, String> {
    if settings.trim().is_empty() {
        return Err(format!(
            "no settings are configured; set them to a JSON object such as {EXAMPLE} (in the \
             plugin's sidecar NAME.json under \"settings\")"
        ));
    }
    let value: Value = serde_json::from_str(settings).map_err(|error| {
        format!("settings are not valid JSON ({error}); expected e.g. {EXAMPLE}")
    })?;
    let Value::Object(object) = value else {
        return Err(format!(
            "settings must be a JSON object such as {EXAMPLE}, got {}",
            kind(&value)
        ));
    };
    if let Some(unknown) = object.keys().find(|key| *key != "zones") {
        return Err(format!(
            "unknown settings key {unknown:?}; the only key is \"zones\", e.g. {EXAMPLE}"
        ));
    }
    let Some(zones) = object.get("zones") else {
        return Err(format!("\"zones\" is missing; expected e.g. {EXAMPLE}"));
    };
    let Value::Array(zones) = zones else {
        return Err(format!(
            "\"zones\" must be a list of zone names, got {}",
            kind(zones)
        ));
    };
    if zones.is_empty() {
        return Err("\"zones\" is empty; list at least one zone, most preferred first".into());
    }
    let mut names: Vec<String> = Vec::with_capacity(zones.len());
    for (index, zone) in zones.iter().enumerate() {
        let name = match zone {
            Value::String(name) if !name.is_empty() => name,
            Value::String(_) => return Err(format!("zones[{index}] is an empty string")),
            other => {
                return Err(format!(
                    "zones[{index}] must be a zone name (a string), got {}",
                    kind(other)
                ));
            }
        };
        if let Some(first) = names.iter().position(|n| n == name) {
            return Err(format!(
                "zone {name:?} is listed twice (zones[{first}] and zones[{index}])"
            ));
        }
        names.push(name.clone());
    }
    Ok(names)
}

/// A JSON value's kind, for error messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

conclave_strategy::export_strategy!(ZoneAffinity);

#[cfg(test)]
mod tests {
    use super::*;
    use conclave_strategy::native::{CandidateView, ControllerRequest, elect_native};

    fn cand(name: &str, zone: Option<&str>, version: &str, created: i64) -> CandidateView {
        CandidateView {
            name: name.into(),
            binary_version: version.into(),
            emulation_version: version.into(),
            creation_time: Some(Timestamp::from_secs(created)),
            labels: zone
                .map(|z| vec![(ZONE_LABEL.into(), z.into())])
                .unwrap_or_default(),
            ..CandidateView::default()
        }
    }

    fn elect(settings: &str, candidates: &[CandidateView]) -> Result<Option<String>, String> {
        let mut request = ControllerRequest {
            settings: settings.into(),
            candidates: candidates.to_vec(),
            ..ControllerRequest::default()
        };
        let forward = elect_native::<ZoneAffinity>(&request);
        request.candidates.reverse();
        assert_eq!(
            elect_native::<ZoneAffinity>(&request),
            forward,
            "order matters"
        );
        forward
    }

    #[test]
    fn earliest_listed_zone_wins_then_unlisted() {
        let settings = r#"{"zones": ["zone-b", "zone-a"]}"#;
        let candidates = [
            cand("in-a", Some("zone-a"), "1.30.0", 1),
            cand("in-b", Some("zone-b"), "1.33.0", 9),
            cand("in-c", Some("zone-c"), "1.29.0", 0),
            cand("no-label", None, "1.28.0", 0),
        ];
        assert_eq!(elect(settings, &candidates), Ok(Some("in-b".into())));
        assert_eq!(
            elect(settings, &candidates[2..]),
            Ok(Some("no-label".into()))
        );
    }

    #[test]
    fn ties_within_a_zone_use_oldest_emulation_version() {
        let settings = r#"{"zones": ["zone-a"]}"#;
        let candidates = [
            cand("newer", Some("zone-a"), "1.31.0", 1),
            cand("older", Some("zone-a"), "1.30.0", 9),
            cand("broken", Some("zone-a"), "x", 0),
        ];
        assert_eq!(elect(settings, &candidates), Ok(Some("older".into())));
    }

    #[test]
    fn bad_settings_say_what_is_wrong() {
        let table = [
            ("", "no settings are configured"),
            ("{", "not valid JSON"),
            ("[\"zone-a\"]", "must be a JSON object"),
            ("{}", "\"zones\" is missing"),
            (r#"{"zone": ["a"]}"#, "unknown settings key \"zone\""),
            (
                r#"{"zones": "zone-a"}"#,
                "must be a list of zone names, got a string",
            ),
            (r#"{"zones": []}"#, "\"zones\" is empty"),
            (
                r#"{"zones": ["a", 5]}"#,
                "zones[1] must be a zone name (a string), got a number",
            ),
            (r#"{"zones": ["a", ""]}"#, "zones[1] is an empty string"),
            (
                r#"{"zones": ["a", "b", "a"]}"#,
                "listed twice (zones[0] and zones[2])",
            ),
        ];
        let candidates = [cand("a", Some("a"), "1.30.0", 1)];
        for (settings, want) in table {
            let error = elect(settings, &candidates).unwrap_err();
            assert!(error.contains(want), "{settings:?}: {error}");
            assert!(error.starts_with("invalid settings for conclave.dev/zone-affinity"));
        }
    }
}

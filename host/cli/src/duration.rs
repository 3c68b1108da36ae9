//! The one duration parser of every `conclave` flag that takes a duration.
//!
//! It reads what kube users type, as Go's `time.ParseDuration` (and so kubectl) does: a sequence
//! of numbers, each with a unit, such as `500ms`, `5s`, `30m`, `1h30m` or `1.5h`; spaces between
//! the parts are allowed (`1h 30m`), and a bare number counts as seconds (`5`). Negative
//! durations are refused.

use std::time::Duration;

/// What [`parse`] accepts, for `--help`.
pub const HELP: &str = "Durations are written as kubectl takes them: 500ms, 5s, 30m, 1h30m, 1.5h \
                        (units ns, us, ms, s, m, h; a bare number is seconds).";

/// Parses a duration (see the module documentation).
pub fn parse(input: &str) -> Result<Duration, String> {
    let text = input.trim();
    if text.is_empty() {
        return Err("a duration is needed (500ms, 5s, 30m, 1h30m)".into());
    }
    if text.starts_with('-') {
        return Err(format!("{input:?}: a duration must not be negative"));
    }
    if let Ok(seconds) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).map_err(|e| format!("{input:?}: {e}"));
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    let mut total = 0.0_f64;
    while !rest.is_empty() {
        rest = rest.trim_start();
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_end);
        let value: f64 = number
            .parse()
            .map_err(|_| format!("{input:?} is not a duration (try 500ms, 5s, 30m, 1h30m)"))?;
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.' || c.is_whitespace())
            .unwrap_or(after.len());
        let (unit, tail) = after.split_at(unit_end);
        let seconds = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(format!("{input:?}: {number} needs a unit (ms, s, m, h)")),
            other => {
                return Err(format!(
                    "{input:?}: unknown unit {other:?} (ns, us, ms, s, m, h)"
                ));
            }
        };
        total += value * seconds;
        rest = tail;
    }
    Duration::try_from_secs_f64(total).map_err(|e| format!("{input:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_kube_users_type() {
        let cases = [
            ("500ms", Duration::from_millis(500)),
            ("5s", Duration::from_secs(5)),
            ("5", Duration::from_secs(5)),
            ("0.5", Duration::from_millis(500)),
            ("30m", Duration::from_secs(1800)),
            ("1h", Duration::from_secs(3600)),
            ("1h30m", Duration::from_secs(5400)),
            ("1h 30m", Duration::from_secs(5400)),
            ("1.5h", Duration::from_secs(5400)),
            ("2m3.5s", Duration::from_millis(123_500)),
            ("250us", Duration::from_micros(250)),
            (" 10s ", Duration::from_secs(10)),
        ];
        for (input, expected) in cases {
            assert_eq!(parse(input), Ok(expected), "{input}");
        }
    }

    #[test]
    fn refuses_what_is_not_a_duration() {
        for input in ["", "soon", "5d", "-5s", "1h30", "s", "1..5s"] {
            assert!(parse(input).is_err(), "{input}");
        }
    }
}

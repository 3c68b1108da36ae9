//! How times read in the table and the notes: ages ("2m05s ago"), countdowns ("in 27m03s") and
//! times of day ("12:03:04Z").

use conclave_core::time::Timestamp;
use std::time::Duration;

/// "1.5s", "42s", "2m05s", "2h01m".
pub(super) fn span(duration: Duration) -> String {
    let secs = duration.as_secs();
    match secs {
        0..10 => format!("{:.1}s", duration.as_secs_f64()),
        10..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, (secs % 3600) / 60),
    }
}

/// "3s ago", "2m05s ago", or "-" when never.
pub(super) fn ago(at: Option<Timestamp>, now: Timestamp) -> String {
    let Some(at) = at else {
        return "-".into();
    };
    if at > now {
        return "now".into();
    }
    format!("{} ago", span(at.elapsed_at(now)))
}

/// "in 27m03s", or "now" once past.
pub(super) fn until(at: Timestamp, now: Timestamp) -> String {
    if at <= now {
        return "now".into();
    }
    format!("in {}", span(now.elapsed_at(at)))
}

/// The time of day in UTC, "12:03:04Z".
pub(super) fn clock(at: Timestamp) -> String {
    jiff::Timestamp::from_microsecond(at.as_micros())
        .map_or_else(|_| "?".into(), |t| t.strftime("%H:%M:%SZ").to_string())
}

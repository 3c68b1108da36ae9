//! Text helpers shared by every crate that bounds what it passes on (plugin output, event notes).

use alloc::string::String;

/// The marker appended to text that was cut, so a reader knows it is not the whole message.
pub const CUT_MARKER: &str = "… [cut]";

/// Cuts `text` to at most `max_bytes` bytes, at a character boundary, appending [`CUT_MARKER`]
/// (within the same budget) when anything was removed. Returns whether it cut.
///
/// Budgets smaller than the marker keep only as much of the marker as fits; the result never
/// exceeds `max_bytes`.
pub fn truncate_utf8(text: &mut String, max_bytes: usize) -> bool {
    if text.len() <= max_bytes {
        return false;
    }
    let keep = max_bytes.saturating_sub(CUT_MARKER.len());
    text.truncate(floor_char_boundary(text, keep));
    let room = max_bytes - text.len();
    text.push_str(&CUT_MARKER[..floor_char_boundary(CUT_MARKER, room)]);
    true
}

/// The largest index `<= index` that is a character boundary of `text`.
#[must_use]
pub fn floor_char_boundary(text: &str, index: usize) -> usize {
    if index >= text.len() {
        return text.len();
    }
    let mut cut = index;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn short_text_is_left_alone() {
        let mut text = "abc".to_string();
        assert!(!truncate_utf8(&mut text, 3));
        assert_eq!(text, "abc");
    }

    #[test]
    fn long_text_is_cut_at_a_boundary_with_a_marker_within_budget() {
        for budget in 0..40 {
            let mut text = "ab€cd€ef€gh€ij€kl€mn€op".repeat(2);
            assert!(truncate_utf8(&mut text, budget));
            assert!(text.len() <= budget, "{budget}: {text:?}");
            if budget >= CUT_MARKER.len() {
                assert!(text.ends_with(CUT_MARKER), "{budget}: {text:?}");
            }
        }
    }
}

//! The sanitizer on arbitrary text. Properties: no panic; what `neutralize` returns spells no
//! wrapper marker (in any case, with invisible characters dropped and fullwidth forms folded),
//! so nothing it strips can rebuild one; neutralizing again finds none either; and a wrapped
//! text has exactly its own two markers, the closing one last.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use nexbot_protocol::secrets::is_invisible_char;
use nexbot_subagent::sanitizer::{neutralize, wrap_external, END_MARK};
use regex::Regex;

static MARKER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)<{2,}\s*(?:end[\s_-]*)?external[\s_-]*content").unwrap());

fn markers_spelled(text: &str) -> usize {
    let folded: String = text
        .chars()
        .filter(|c| !is_invisible_char(*c))
        .map(|c| match u32::from(c) {
            code @ 0xFF01..=0xFF5E => char::from_u32(code - 0xFEE0).unwrap(),
            _ => c,
        })
        .collect();
    MARKER.find_iter(&folded).count()
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let out = neutralize(&text);
    assert_eq!(markers_spelled(&out.text), 0, "{text:?} -> {:?}", out.text);
    assert!(!out.text.chars().any(is_invisible_char), "{:?}", out.text);
    let again = neutralize(&out.text);
    assert_eq!(markers_spelled(&again.text), 0, "{:?}", again.text);
    let wrapped = wrap_external(&text, &text);
    assert_eq!(markers_spelled(&wrapped.text), 2, "{:?}", wrapped.text);
    assert!(wrapped.text.ends_with(END_MARK));
    assert_eq!(wrapped.text.matches(END_MARK).count(), 1, "{:?}", wrapped.text);
});

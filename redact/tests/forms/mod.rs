//! The oracle of the redactor's covered forms: every form a secret's value may take in text,
//! computed here with the encoders' own crates, independently of the redactor. One copy, used
//! by the property test (`redact/tests/redaction.rs`) and the fuzz target
//! (`fuzz/fuzz_targets/redactor.rs`, through `#[path]`).

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine as _;
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};

/// Every covered form of `value`. The redactor reads hex digits in either case (hex, `%XX`,
/// JSON's `\uXXXX`), so each of those forms is here in both.
pub fn forms(value: &str) -> Vec<String> {
    let hex: String = value.bytes().map(|b| format!("{b:02x}")).collect();
    let pct = utf8_percent_encode(value, NON_ALPHANUMERIC).to_string();
    let json = serde_json::to_string(value).unwrap();
    let escaped_lower: String = value.encode_utf16().map(|u| format!("\\u{u:04x}")).collect();
    let escaped_upper: String = value.encode_utf16().map(|u| format!("\\u{u:04X}")).collect();
    vec![
        value.to_owned(),
        STANDARD.encode(value),
        STANDARD_NO_PAD.encode(value),
        URL_SAFE.encode(value),
        URL_SAFE_NO_PAD.encode(value),
        hex.to_uppercase(),
        hex,
        lower_hex_escapes(&pct),
        pct.replace("%20", "+"),
        pct,
        json[1..json.len() - 1].to_owned(),
        escaped_lower,
        escaped_upper,
    ]
}

/// `%2F` as `%2f`: only the escapes' digits change case.
fn lower_hex_escapes(pct: &str) -> String {
    let mut out = String::new();
    let mut digits = 0u8;
    for c in pct.chars() {
        out.push(if digits > 0 { c.to_ascii_lowercase() } else { c });
        digits = if c == '%' { 2 } else { digits.saturating_sub(1) };
    }
    out
}

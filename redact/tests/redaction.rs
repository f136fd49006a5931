//! Properties of the one redactor every exit uses: whatever the text and wherever a stream is
//! cut, no covered form of a secret survives, redacting again changes nothing, and a stream
//! gives what one piece gives.

use std::sync::Arc;

use nexbot_redact::{Redactor, SecretMap};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use secrecy::SecretString;

mod forms;
use forms::forms;

/// Characters secrets and texts are made of: ordinary ones, and every one an encoding or the
/// marker syntax treats specially.
const ALPHABET: &[char] = &[
    'a', 'b', 'c', 'A', 'R', 'E', 'D', 'X', '0', '1', '9', 'f', ' ', '+', '/', '=', '%', '\\', '"',
    '[', ']', ':', '_', '-', '\n', '\r', 'é', '💡', '\u{200B}',
];

fn text_of(len: std::ops::Range<usize>) -> impl Strategy<Value = String> {
    proptest::collection::vec(proptest::sample::select(ALPHABET), len)
        .prop_map(|chars| chars.into_iter().collect())
}

fn redactor(pairs: &[(&str, &str)]) -> Arc<Redactor> {
    let mut map = SecretMap::new();
    for (name, value) in pairs {
        map.insert(*name, SecretString::from((*value).to_owned()));
    }
    Arc::new(Redactor::new(&map))
}

fn stream_in_pieces(r: &Arc<Redactor>, text: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut stream = r.stream();
    let mut out = Vec::new();
    let mut at = 0;
    for &cut in cuts {
        let cut = cut.clamp(at, text.len());
        out.extend(stream.push(&text[at..cut]));
        assert!(stream.held() <= r.holdback(), "held {} > {}", stream.held(), r.holdback());
        at = cut;
    }
    out.extend(stream.push(&text[at..]));
    out.extend(stream.finish());
    out
}

/// 400 cases a run, and every case that ever failed first: proptest's default finds the file
/// from a `lib.rs` or `main.rs`, which a `tests/` target has not, so it is named here (paths
/// are the crate's, where `cargo test` runs).
fn config() -> ProptestConfig {
    ProptestConfig {
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "tests/proptest-regressions/redaction.txt",
        ))),
        ..ProptestConfig::with_cases(400)
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn no_covered_form_survives(
        secret in text_of(8..24),
        other in text_of(8..16),
        before in text_of(0..12),
        after in text_of(0..12),
        form in 0usize..13,
        mut cuts in proptest::collection::vec(0usize..200, 0..4),
    ) {
        prop_assume!(secret.len() >= 8 && other.len() >= 8);
        let r = redactor(&[("SECRET", &secret), ("OTHER", &other)]);
        let planted = &forms(&secret)[form];
        let text = format!("{before}{planted}{after} {other}");
        let out = r.redact(&text);
        for (i, f) in forms(&secret).iter().enumerate() {
            prop_assert!(!out.contains(f.as_str()), "form {} {:?} of {:?} in {:?}", i, f, secret, out);
        }
        prop_assert!(!out.contains(other.as_str()), "{:?} in {:?}", other, out);
        prop_assert_eq!(r.redact(&out), out.clone(), "not idempotent");
        cuts.sort_unstable();
        let streamed = stream_in_pieces(&r, text.as_bytes(), &cuts);
        prop_assert_eq!(String::from_utf8_lossy(&streamed), out);
    }

    #[test]
    fn short_values_never_nest_markers(
        key in text_of(1..4),
        text in text_of(0..40),
        marker in 0usize..3,
    ) {
        let r = redactor(&[("A", &key), ("llm_api_key", "k")]);
        let marker = ["[REDACTED:A]", "[REDACTED:API_KEY]", "[REDACTED]"][marker];
        let text = format!("{text}{marker}{text}");
        let once = r.redact(&text);
        prop_assert_eq!(r.redact(&once), once.clone());
        // The marker is kept, or taken whole into a new one (in other brackets when the key
        // holds one of `[`, `]`).
        prop_assert!(once.contains(marker) || once.contains("REDACTED"), "{:?}", once);
        let streamed = stream_in_pieces(&r, text.as_bytes(), &[text.len() / 2]);
        prop_assert_eq!(String::from_utf8_lossy(&streamed), once);
    }
}

#[test]
fn a_stream_of_tiny_chunks_redacts_every_form() {
    let secret = "chunk-s3cret/value+\"x\"";
    let r = redactor(&[("S", secret)]);
    let text: String = forms(secret).iter().map(|f| format!("<{f}>\n")).collect();
    let out =
        stream_in_pieces(&r, text.as_bytes(), &(0..text.len()).step_by(3).collect::<Vec<_>>());
    let out = String::from_utf8(out).unwrap();
    assert_eq!(out.matches("[REDACTED:S]").count(), forms(secret).len(), "{out}");
}

/// Cases the property test found (its regressions file is not read from a `tests/` target).
/// A stray `\` before the `\uXXXX` form swallows the value's first escape; the rest is a tail
/// needle whose head must be read from inside that escape.
#[test]
fn a_swallowed_head_is_found_past_skipped_line_breaks_and_beside_a_twin_tail() {
    let cases = [
        // Another secret's tail has the same bytes ("aaaaaaa") but another head.
        ("faaaaaaa", "aaaaaaaa", "\\", 11),
        // The head's escape and the tail lie two escaped line breaks apart (19 bytes).
        ("f\n\naaaaa", "aaaaaaaa", "\\", 11),
        ("f\n\naaaaa", "bbbbbbbb", "\\", 12),
        // `%aE` swallows two of a value whose line breaks leave five: a tail of three.
        ("aE\naa\na\n", "aaaaaaaa", "%", 7),
        // A stray `\` pairs with the value's escaped `\`; its second half escapes the `b`.
        ("\\baaaaa\"", "aaaaaaaa", "\\", 10),
        ("\\u0041bcdefg", "aaaaaaaa", "\\", 10),
        ("\\\\bcdefgh", "aaaaaaaa", "\\", 10),
        ("\\\\ba\naaa", "aaaaaaaa", "\\", 10),
        ("\\\\\\u0041bc", "aaaaaaaa", "\\", 10),
        ("Aaaaaaaa", "aaaaaaab", "", 7),
        ("aaaaaaaa", "a\n\n\naaaa", "", 0),
    ];
    for (secret, other, before, form) in cases {
        let r = redactor(&[("SECRET", secret), ("OTHER", other)]);
        let text = format!("{before}{} {other}", forms(secret)[form]);
        let out = r.redact(&text);
        for (i, f) in forms(secret).iter().enumerate() {
            assert!(!out.contains(f.as_str()), "form {i} {f:?} of {secret:?} in {out:?}");
        }
        assert!(!out.contains(other), "{other:?} in {out:?}");
        assert_eq!(r.redact(&out), out, "not idempotent");
        for cut in 0..text.len() {
            let streamed = stream_in_pieces(&r, text.as_bytes(), &[cut]);
            assert_eq!(String::from_utf8_lossy(&streamed), out, "cut at {cut} of {text:?}");
        }
    }
}

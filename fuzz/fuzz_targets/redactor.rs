//! The redactor. A secret (at least 8 bytes, as validation demands) and a short LLM key come
//! from the input, one covered form of the secret is planted in text from the input, and the
//! text is redacted in one piece and as a stream cut where the input says. Properties: no
//! covered form of the secret survives (forms computed by `redact/tests/forms/mod.rs`,
//! independently of the redactor), redacting again changes nothing, and the stream gives
//! exactly what one piece gives.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use nexbot_protocol::{Redactor, SecretMap};
use secrecy::SecretString;

/// The covered forms, the one oracle the redactor's property test also uses.
#[path = "../../redact/tests/forms/mod.rs"]
mod forms;
use forms::forms;

/// Splits off a length-prefixed piece.
fn take<'a>(data: &mut &'a [u8], max: usize) -> &'a [u8] {
    let Some((&n, rest)) = data.split_first() else {
        return &[];
    };
    let n = (usize::from(n) % (max + 1)).min(rest.len());
    let (piece, rest) = rest.split_at(n);
    *data = rest;
    piece
}

fuzz_target!(|data: &[u8]| {
    let mut data = data;
    let Some((&knobs, rest)) = data.split_first() else {
        return;
    };
    data = rest;
    let secret = String::from_utf8_lossy(take(&mut data, 48)).into_owned();
    let key = String::from_utf8_lossy(take(&mut data, 4)).into_owned();
    let before = String::from_utf8_lossy(take(&mut data, 64)).into_owned();
    let after = String::from_utf8_lossy(data).into_owned();
    if secret.len() < 8 {
        return;
    }
    let mut map = SecretMap::new();
    map.insert("SECRET", SecretString::from(secret.clone()));
    if !key.is_empty() {
        map.insert("llm_api_key", SecretString::from(key.clone()));
    }
    let redactor = Arc::new(Redactor::new(&map));
    let all = forms(&secret);
    let planted = &all[usize::from(knobs) % all.len()];
    let text = format!("{before}{planted}{after}");

    let out = redactor.redact(&text);
    for form in &all {
        assert!(!out.contains(form.as_str()), "{form:?} of {secret:?} survives in {out:?}");
    }
    assert_eq!(redactor.redact(&out), out, "a second pass changed the text");

    let bytes = text.as_bytes();
    let cut = usize::from(knobs) * bytes.len() / 255;
    let mut stream = redactor.stream();
    let mut streamed = stream.push(&bytes[..cut]);
    assert!(stream.held() <= redactor.holdback());
    for chunk in bytes[cut..].chunks(1 + usize::from(knobs % 7)) {
        streamed.extend(stream.push(chunk));
        assert!(stream.held() <= redactor.holdback());
    }
    streamed.extend(stream.finish());
    assert_eq!(String::from_utf8_lossy(&streamed), out, "stream and one piece differ");
});

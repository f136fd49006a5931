//! The JSON-lines decoder on arbitrary bytes, delivered in two reads split anywhere, on both
//! sides of the link (requests as the subagent reads them, responses as the host does).
//! Properties: no panic, no decoder error (framing problems are items), exactly one item per
//! non-blank line, and every request that parses can be validated and re-encoded.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use nexbot_protocol::{JsonLinesCodec, Request, Response};
use tokio_util::codec::{Decoder, Encoder};

fn decode_all<In: serde::de::DeserializeOwned, Out>(
    codec: &mut JsonLinesCodec<In, Out>,
    data: &[u8],
    split: usize,
) -> Vec<Result<In, nexbot_protocol::LineError>> {
    let mut items = Vec::new();
    let mut buf = BytesMut::new();
    for part in [&data[..split], &data[split..]] {
        buf.extend_from_slice(part);
        while let Some(item) = codec.decode(&mut buf).expect("framing errors are items") {
            items.push(item);
        }
    }
    while let Some(item) = codec.decode_eof(&mut buf).expect("framing errors are items") {
        items.push(item);
    }
    items
}

fuzz_target!(|data: &[u8]| {
    let Some((&knobs, data)) = data.split_first() else {
        return;
    };
    let split = usize::from(knobs) * data.len() / 255;
    let max_line = 64 + usize::from(knobs & 0x3f) * 8;
    let non_blank =
        data.split(|b| *b == b'\n').filter(|l| !l.iter().all(u8::is_ascii_whitespace)).count();

    let mut codec = JsonLinesCodec::<Request, Response>::with_max_line(max_line);
    let requests = decode_all(&mut codec, data, split);
    assert_eq!(requests.len(), non_blank);
    for request in requests.into_iter().flatten() {
        let _ = request.validate(0);
        let _ = format!("{request:?}");
        let mut out = BytesMut::new();
        let mut host = JsonLinesCodec::<Response, Request>::new();
        host.encode(request, &mut out).expect("a parsed request encodes");
        assert_eq!(out.last(), Some(&b'\n'));
        let again: Request = serde_json::from_slice(&out[..out.len() - 1]).expect("re-encoded");
        let _ = again.validate(0);
    }

    let mut codec = JsonLinesCodec::<Response, Request>::with_max_line(max_line);
    let responses = decode_all(&mut codec, data, split);
    assert_eq!(responses.len(), non_blank);
    for response in responses.into_iter().flatten() {
        let _ = response.status();
        serde_json::to_string(&response).expect("a parsed response encodes");
    }
});

//! Property tests: no input bytes — invalid UTF-8, huge lines, random splits — panic the
//! decoder, and every complete line yields exactly one item.

use bytes::BytesMut;
use nexbot_protocol::{JsonLinesCodec, Request, Response};
use proptest::prelude::*;
use tokio_util::codec::Decoder;

type Codec = JsonLinesCodec<Request, Response>;

fn drain(codec: &mut Codec, buf: &mut BytesMut, out: &mut usize) {
    while let Some(_item) = codec.decode(buf).expect("decoder must not fail on bytes") {
        *out += 1;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..4096), split in 0usize..4096) {
        let mut codec = Codec::with_max_line(256);
        let mut buf = BytesMut::new();
        let split = split.min(data.len());
        let mut items = 0;
        buf.extend_from_slice(&data[..split]);
        drain(&mut codec, &mut buf, &mut items);
        buf.extend_from_slice(&data[split..]);
        drain(&mut codec, &mut buf, &mut items);
        while codec.decode_eof(&mut buf).unwrap().is_some() {
            items += 1;
        }
        let non_blank_lines = data
            .split(|b| *b == b'\n')
            .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
            .count();
        prop_assert_eq!(items, non_blank_lines);
    }

    #[test]
    fn huge_lines_then_a_good_line(len in 257usize..20_000, chunk in 1usize..5000) {
        let mut data = vec![0xffu8; len];
        data.push(b'\n');
        data.extend_from_slice(br#"{"type":"ping","id":"ok"}"#);
        data.push(b'\n');
        let mut codec = Codec::with_max_line(256);
        let mut buf = BytesMut::new();
        let mut decoded = Vec::new();
        for piece in data.chunks(chunk) {
            buf.extend_from_slice(piece);
            while let Some(item) = codec.decode(&mut buf).unwrap() {
                decoded.push(item);
            }
            prop_assert!(buf.len() <= 256 + chunk + 1, "buffer grew to {}", buf.len());
        }
        prop_assert_eq!(decoded.len(), 2);
        prop_assert!(decoded[0].is_err());
        prop_assert_eq!(&decoded[1].as_ref().unwrap().id, "ok");
    }

    #[test]
    fn a_blank_line_is_ignored_whatever_its_length(
        len in 0usize..2000,
        chunk in 1usize..600,
        ws in proptest::sample::select(vec![b' ', b'\t', b'\r', 0x0c]),
        last in any::<bool>(),
    ) {
        // Found by fuzzing (protocol_decoder): a whitespace-only line over the limit was
        // answered `line too long` instead of being ignored like every blank line.
        let mut data = vec![ws; len];
        if !last {
            data.push(b'\n');
        }
        let mut codec = Codec::with_max_line(256);
        let mut buf = BytesMut::new();
        let mut items = 0;
        for piece in data.chunks(chunk) {
            buf.extend_from_slice(piece);
            drain(&mut codec, &mut buf, &mut items);
        }
        while codec.decode_eof(&mut buf).unwrap().is_some() {
            items += 1;
        }
        prop_assert_eq!(items, 0);
        // The line after it still decodes.
        buf.extend_from_slice(b"{\"type\":\"ping\",\"id\":\"ok\"}\n");
        let item = codec.decode(&mut buf).unwrap().unwrap();
        prop_assert_eq!(&item.unwrap().id, "ok");
    }

    #[test]
    fn arbitrary_strings_as_request_fields_round_trip(task in ".*", id in "[a-z0-9-]{1,20}") {
        let req = Request::execute(id.clone(), task.clone());
        let mut codec = Codec::new();
        let line = serde_json::to_vec(&req).unwrap();
        let mut buf = BytesMut::from(&line[..]);
        buf.extend_from_slice(b"\n");
        let back = codec.decode(&mut buf).unwrap().unwrap().unwrap();
        prop_assert_eq!(back.id, id);
        prop_assert_eq!(back.task.unwrap(), task);
    }
}

//! The LLM client's parsers on provider bytes: a chat completion and an SSE stream. The
//! stream is fed cut where the input says. Properties: nothing panics; feeding the stream in
//! two pieces gives exactly what one piece gives (the decoder keeps no state across a cut it
//! should not); a completion that parses has an id for every tool call.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nexbot_llm::stream::{Accumulator, SseDecoder};
use nexbot_llm::wire::parse_completion;

fn run(parts: &[&[u8]]) -> Result<(String, Vec<String>), String> {
    let mut decoder = SseDecoder::default();
    let mut acc = Accumulator::default();
    let mut texts = Vec::new();
    for part in parts {
        decoder
            .feed(
                part,
                |data| {
                    if let Some(t) = acc.push(data, "fuzz")? {
                        texts.push(t);
                    }
                    Ok(())
                },
                "fuzz",
            )
            .map_err(|e| e.to_string())?;
    }
    decoder
        .finish(|data| acc.push(data, "fuzz").map(|_| ()))
        .map_err(|e| e.to_string())?;
    let completion = acc.finish("fuzz").map_err(|e| e.to_string())?;
    Ok((format!("{:?}", completion.message), texts))
}

fuzz_target!(|data: &[u8]| {
    if let Ok(completion) = parse_completion(data, "fuzz") {
        assert!(completion.message.tool_calls.iter().all(|c| !c.id.is_empty()));
    }
    let Some((&cut, body)) = data.split_first() else { return };
    let cut = usize::from(cut).min(body.len());
    let whole = run(&[body]);
    let (a, b) = body.split_at(cut);
    let pieces = run(&[a, b]);
    match (&whole, &pieces) {
        (Ok((message, texts)), Ok((message2, texts2))) => {
            assert_eq!(message, message2);
            assert_eq!(texts.concat(), texts2.concat());
        }
        (Err(_), Err(_)) => {}
        _ => panic!("one piece and two pieces disagree: {whole:?} vs {pieces:?}"),
    }
});

//! A real Ogg/Opus recording made by the test (RFC 7845): an `OpusHead` page, an `OpusTags`
//! page and `frames` 20 ms silent Opus frames (RFC 6716's 3-byte CELT silence packet), each
//! page with its CRC. What a scripted speech endpoint answers, and what a voice note carries.

/// `frames` × 20 ms of silence, mono, 48 kHz, as an Ogg/Opus stream.
pub fn silent_opus(frames: usize) -> Vec<u8> {
    const SERIAL: u32 = 0x4e58_4254;
    // TOC 0xF8: CELT-only fullband 20 ms, mono, one frame; 0xFF 0xFE: a silence frame.
    const SILENCE: [u8; 3] = [0xf8, 0xff, 0xfe];
    let mut head = b"OpusHead".to_vec();
    head.push(1); // version
    head.push(1); // channels
    head.extend_from_slice(&312u16.to_le_bytes()); // pre-skip
    head.extend_from_slice(&48_000u32.to_le_bytes()); // input sample rate
    head.extend_from_slice(&0i16.to_le_bytes()); // output gain
    head.push(0); // channel mapping family
    let mut tags = b"OpusTags".to_vec();
    let vendor = b"nexbot-tests";
    tags.extend_from_slice(&(vendor.len() as u32).to_le_bytes());
    tags.extend_from_slice(vendor);
    tags.extend_from_slice(&0u32.to_le_bytes());

    let mut out = page(0x02, 0, SERIAL, 0, &[&head]);
    out.extend(page(0, 0, SERIAL, 1, &[&tags]));
    let packets: Vec<&[u8]> = vec![&SILENCE; frames.max(1)];
    let granule = 312 + 960 * packets.len() as u64;
    out.extend(page(0x04, granule, SERIAL, 2, &packets));
    out
}

/// One Ogg page holding `packets` (each under 255 bytes), its CRC filled in.
fn page(flags: u8, granule: u64, serial: u32, sequence: u32, packets: &[&[u8]]) -> Vec<u8> {
    let mut lacing = Vec::new();
    for packet in packets {
        assert!(packet.len() < 255 && lacing.len() < 255, "a test page of small packets");
        lacing.push(packet.len() as u8);
    }
    let mut page = b"OggS".to_vec();
    page.push(0);
    page.push(flags);
    page.extend_from_slice(&granule.to_le_bytes());
    page.extend_from_slice(&serial.to_le_bytes());
    page.extend_from_slice(&sequence.to_le_bytes());
    page.extend_from_slice(&[0; 4]);
    page.push(lacing.len() as u8);
    page.extend_from_slice(&lacing);
    for packet in packets {
        page.extend_from_slice(packet);
    }
    let crc = crc32(&page);
    page[22..26].copy_from_slice(&crc.to_le_bytes());
    page
}

/// Ogg's CRC-32: polynomial 0x04C11DB7, not reflected, initial 0, no final xor.
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = 0u32;
    for byte in data {
        crc ^= u32::from(*byte) << 24;
        for _ in 0..8 {
            crc = if crc & 0x8000_0000 != 0 { (crc << 1) ^ 0x04c1_1db7 } else { crc << 1 };
        }
    }
    crc
}

/// Whether `data` is a whole Ogg/Opus stream: pages back to back, each CRC right, the first
/// holding `OpusHead`.
pub fn is_ogg_opus(data: &[u8]) -> bool {
    let mut at = 0;
    let mut pages = 0;
    while at < data.len() {
        let Some(header) = data.get(at..at + 27) else { return false };
        if &header[..4] != b"OggS" {
            return false;
        }
        let segments = usize::from(header[26]);
        let Some(lacing) = data.get(at + 27..at + 27 + segments) else { return false };
        let len = 27 + segments + lacing.iter().map(|l| usize::from(*l)).sum::<usize>();
        let Some(whole) = data.get(at..at + len) else { return false };
        let mut zeroed = whole.to_vec();
        zeroed[22..26].fill(0);
        if crc32(&zeroed).to_le_bytes() != whole[22..26] {
            return false;
        }
        if pages == 0 && !whole[27 + segments..].starts_with(b"OpusHead") {
            return false;
        }
        pages += 1;
        at += len;
    }
    pages >= 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recording_reads_back_and_a_flipped_byte_does_not() {
        // The standard check input under Ogg's parameters (CRC-32/CKSUM before its final xor).
        assert_eq!(crc32(b"123456789"), 0x89a1_897f);
        let ogg = silent_opus(50);
        assert!(is_ogg_opus(&ogg));
        let mut bad = ogg.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(!is_ogg_opus(&bad));
        assert!(!is_ogg_opus(b"OggS fake opus"));
    }
}

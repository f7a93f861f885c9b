//! Entry points for the fuzz targets (`fuzz/fuzz_targets/metadata.rs`) and
//! the tests that replay them: every decoder of device bytes in the
//! allocator (labels, record headers, deltas, checkpoints, owner blobs) and recovery
//! over arbitrary segment images. Each must return a value or a typed
//! error, never panic. Not part of the API.

use crate::journal::layout::SegmentImage;
use crate::journal::recovery::recover;
use crate::journal::{
    decode_begin, decode_delta, decode_label, decode_ops, decode_owner_blob, decode_record_ops, encode_begin,
    encode_delta, encode_label, encode_ops, encode_owner_pages, encode_pages, Header, Kind, LabelRead, PageImage,
};
use crate::BLOCK_SIZE;

/// Every metadata decoder on `data`, and the encoders on what decodes:
/// decoding what was encoded gives it back.
pub fn decoders(data: &[u8]) {
    let _ = Header::decode(data);
    let _ = Header::decode_any_version(data);
    let mut block = data.to_vec();
    block.resize(BLOCK_SIZE, 0);
    if let LabelRead::Label(label) = decode_label(&block) {
        assert_eq!(decode_label(&encode_label(&label)), LabelRead::Label(label), "a label round-trips");
    }
    if let Ok(ops) = decode_ops(data) {
        assert_eq!(decode_ops(&encode_ops(&ops)).expect("re-encoded ops decode"), ops, "ops round-trip");
    }
    // Blobs are checked against record 0 of volume 0; their owners stay in
    // `data`, and a re-encoding takes them from there.
    let owners = |index: u64, at: usize| decode_owner_blob(&data[at..], 0, 0, index).expect("a checked blob");
    let filled = |pages: &[PageImage]| -> Vec<PageImage> {
        pages.iter().map(|p| PageImage { owners: owners(p.index, p.owners_at), ..p.clone() }).collect()
    };
    if let Ok(begin) = decode_begin(data, 0, 0, true, true) {
        let encoded = encode_begin(
            &begin.superblock,
            &begin.lane_zones,
            begin.pages_total,
            &encode_ops(&begin.ops),
            &encode_pages(&filled(&begin.pages), 0, 0).bytes,
        );
        let again = decode_begin(&encoded, 0, 0, true, true).expect("a re-encoded checkpoint decodes");
        assert_eq!(again, begin, "a checkpoint round-trips");
        // What open replays is what recovery checked.
        let ops = decode_record_ops(Kind::Checkpoint, data).expect("a checkpoint's operations decode alone");
        assert_eq!(ops, begin.ops, "a checkpoint's operations");
    }
    if let Ok(delta) = decode_delta(data, 0, 0, true, true) {
        let blobs: Vec<(u64, Vec<u64>)> = delta.owner_pages.iter().map(|&(i, at)| (i, owners(i, at))).collect();
        let encoded = encode_delta(
            &encode_ops(&delta.ops),
            &encode_pages(&filled(&delta.pages), 0, 0).bytes,
            &encode_owner_pages(&blobs, 0, 0).bytes,
        );
        let again = decode_delta(&encoded, 0, 0, true, true).expect("a re-encoded delta decodes");
        assert_eq!(again, delta, "a delta round-trips");
        let ops = decode_record_ops(Kind::Delta, data).expect("a delta's operations decode alone");
        assert_eq!(ops, delta.ops, "a delta's operations");
    }
    let _ = decode_record_ops(Kind::Checkpoint, data);
    let _ = decode_record_ops(Kind::Delta, data);
    let _ = decode_owner_blob(data, 0, 0, 0);
}

/// Recovery over four segment images cut from `data` (two copies of two
/// segments), after a control byte (rewind, unreadable blocks, a copy
/// absent, blocks of the second copy skipped) and the volume ID (8 bytes, little-endian): a recovered state
/// or a typed error, never a panic, and a recovered log never ends past
/// its segment.
pub fn recovery(data: &[u8]) {
    if data.len() < 9 {
        return;
    }
    let control = data[0];
    let volume_id = u64::from_le_bytes(data[1..9].try_into().expect("8 bytes"));
    let rest = &data[9..];
    let rewind = control & 1 != 0;
    let quarter = rest.len() / 4;
    let mut images = Vec::new();
    for copy in 0..2 {
        let segment = |index: usize| {
            let bytes = &rest[index * quarter..(index + 1) * quarter];
            let blocks = bytes.len().div_ceil(BLOCK_SIZE);
            let mut image = SegmentImage { data: bytes.to_vec(), unreadable: vec![false; blocks], skipped: 0..0 };
            image.data.resize(blocks * BLOCK_SIZE, 0);
            // The second copy read beside the first, as open does.
            if control & 16 != 0 && copy == 1 {
                let skip = u64::from(control >> 5);
                image.skipped = 3..3 + skip * 3;
            }
            for (block, bad) in image.unreadable.iter_mut().enumerate() {
                *bad = control & 2 != 0 && block % 7 == usize::from(control >> 2) % 7;
            }
            image
        };
        images.push(if control & 8 != 0 && copy == 1 {
            None
        } else {
            Some([segment(2 * copy), segment(2 * copy + 1)])
        });
    }
    if let Ok(recovered) = recover(&images, volume_id, rewind) {
        let blocks = images.iter().flatten().map(|s| s[recovered.segment as usize].blocks()).max().unwrap_or(0);
        assert!(recovered.end <= blocks, "the log ends at {} of {blocks} blocks", recovered.end);
        assert!(recovered.pages_written <= recovered.pages_total);
        assert!(recovered.next_generation > recovered.generation);
    }
}

//! The allocator's metadata on arbitrary bytes: labels, record headers,
//! deltas and checkpoints decoded (and re-encoded when they decode), and
//! recovery over four arbitrary segment images. Never a panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    zoned_allocator::fuzz::decoders(data);
    zoned_allocator::fuzz::recovery(data);
});

//! The metadata fuzz bodies (`zoned_allocator::fuzz`, driven by
//! `fuzz/fuzz_targets/metadata.rs`) on a real volume's metadata with seeded
//! mutations: flipped bits and bytes, zeroed and swapped blocks, unreadable
//! blocks, a copy absent. Recovery and every decoder must answer with a
//! value or a typed error, never a panic. `METADATA_FUZZ_ROUNDS=N` runs
//! more.

use nvme_testkit::harness as support;

use nvme_testkit::{data::pattern, Prng};
use support::{volume_options, zns, Harness};
use zoned_allocator::fuzz;

/// LBAs of the four metadata zones of a single ZNS volume over 32 zones of
/// 256 KiB (two copies of two one-zone segments).
const META_LBAS: u64 = 4 * 512;

fn metadata_image() -> (Vec<u8>, u64) {
    let harness = Harness::single(zns(32, 256));
    let mut volume = harness.format(&volume_options());
    for round in 0..300u64 {
        volume.write(0, &pattern(round, 1 + (round % 3) as usize), round).unwrap();
        if round % 3 == 0 {
            volume.commit().unwrap();
        }
    }
    volume.commit().unwrap();
    assert!(volume.stats().checkpoints >= 2, "the image holds a rotation");
    let id = volume.id();
    drop(volume);
    let mut image = Vec::new();
    for lba in 0..META_LBAS {
        image.extend(harness.sims[0].read_block(1, lba));
    }
    (image, id)
}

#[test]
fn recovery_and_decoders_survive_mutated_metadata() {
    let rounds: u64 = std::env::var("METADATA_FUZZ_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
    let (image, volume_id) = metadata_image();
    let mut rng = Prng::new(7);
    for round in 0..rounds {
        let mut mutated = image.clone();
        for _ in 0..1 + rng.below(16) {
            let at = rng.below(mutated.len() as u64) as usize;
            match rng.below(4) {
                0 => mutated[at] ^= 1 << rng.below(8),
                1 => mutated[at] = rng.next_u64() as u8,
                2 => {
                    let block = at / 4096 * 4096;
                    mutated[block..block + 4096].fill(0);
                }
                _ => {
                    let a = at / 4096 * 4096;
                    let b = rng.below((mutated.len() / 4096) as u64) as usize * 4096;
                    let copy = mutated[b..b + 4096].to_vec();
                    mutated[a..a + 4096].copy_from_slice(&copy);
                }
            }
        }
        let mut input = vec![rng.next_u64() as u8];
        input.extend(volume_id.to_le_bytes());
        input.extend(&mutated);
        fuzz::recovery(&input);
        let block = rng.below((mutated.len() / 4096) as u64) as usize * 4096;
        fuzz::decoders(&mutated[block..block + 4096]);
        let header = block + 64 * rng.below(64) as usize;
        fuzz::decoders(&mutated[header..(header + 4096).min(mutated.len())]);
        if round == 0 {
            // The unmutated image recovers (control 0: both copies, no rewind).
            let mut whole = vec![0u8];
            whole.extend(volume_id.to_le_bytes());
            whole.extend(&image);
            fuzz::recovery(&whole);
        }
    }
}

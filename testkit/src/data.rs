//! Data patterns: bytes that are a function of a seed, so a writer and a
//! later reader (another process, another boot) agree on them without
//! keeping a copy.

use crate::Prng;

/// The volume's block size, which the patterns are cut in.
pub const BLOCK_BYTES: usize = 4096;

/// `blocks` 4 KiB blocks of seeded noise: different seeds give different
/// data, the same seed the same data.
pub fn pattern(seed: u64, blocks: usize) -> Vec<u8> {
    bytes(seed, blocks * BLOCK_BYTES)
}

/// `len` bytes of seeded noise.
pub fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut data = vec![0u8; len];
    Prng::new(seed).fill(&mut data);
    data
}

/// Self-describing blocks: every 4 KiB block starts with `owner` and the
/// block's index (so a misplaced block says where it came from), then
/// seeded noise that differs per owner.
pub fn owned_blocks(seed: u64, owner: u64, blocks: usize) -> Vec<u8> {
    let mut data = vec![0u8; blocks * BLOCK_BYTES];
    let mut rng = Prng::with_stream(seed, owner);
    for (index, block) in data.chunks_exact_mut(BLOCK_BYTES).enumerate() {
        block[..8].copy_from_slice(&owner.to_le_bytes());
        block[8..16].copy_from_slice(&(index as u64).to_le_bytes());
        rng.fill(&mut block[16..]);
    }
    data
}

/// Where `got` first differs from `want`, told in blocks and, for
/// [`owned_blocks`] data, in whose block was found there.
pub fn describe_mismatch(want: &[u8], got: &[u8]) -> String {
    let Some(at) = want.iter().zip(got).position(|(a, b)| a != b) else {
        return format!("lengths {} and {}", want.len(), got.len());
    };
    let block = at / BLOCK_BYTES;
    let start = block * BLOCK_BYTES;
    let word = |bytes: &[u8]| u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
    if got.len() < start + 16 {
        return format!("first difference at byte {at} (block {block})");
    }
    format!(
        "first difference at byte {at} (block {block}); that block holds owner {} block {}",
        word(&got[start..start + 8]),
        word(&got[start + 8..start + 16])
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_functions_of_their_seed() {
        assert_eq!(pattern(3, 2), pattern(3, 2));
        assert_ne!(pattern(3, 2), pattern(4, 2));
        assert_eq!(pattern(3, 2).len(), 2 * BLOCK_BYTES);
        assert_eq!(bytes(5, 13).len(), 13);
    }

    #[test]
    fn owned_blocks_say_whose_they_are() {
        let a = owned_blocks(1, 7, 3);
        assert_eq!(&a[BLOCK_BYTES..BLOCK_BYTES + 8], &7u64.to_le_bytes());
        assert_eq!(&a[BLOCK_BYTES + 8..BLOCK_BYTES + 16], &1u64.to_le_bytes());
        assert_ne!(owned_blocks(1, 8, 3)[16..], a[16..]);
        let b = owned_blocks(1, 9, 3);
        let told = describe_mismatch(&a, &b);
        assert!(told.contains("block 0") && told.contains("owner 9"), "{told}");
        assert_eq!(describe_mismatch(&a, &a[..10]), "lengths 12288 and 10");
    }
}

//! crc32c (Castagnoli) per 4 KiB block.
//!
//! Two implementations compute the same function:
//!
//! - **hardware**: the `crc32c` crate, which uses the SSE4.2 `crc32`
//!   instruction when the CPU has it (about 18 GiB/s per core on this
//!   machine's host CPU);
//! - **table**: slicing-by-8 over eight 256-entry tables, plain integer
//!   code (about 1.8 GiB/s natively).
//!
//! The faster one on the running CPU is chosen once, by timing both on a
//! few 4 KiB blocks at first use. On real hardware that is always the
//! instruction. Under QEMU's TCG, where every `crc32` instruction is an
//! emulated helper call, the table wins by almost 3× (146 against
//! 403 MiB/s per vCPU, measured in the rig's VM), so the choice is
//! measured rather than assumed. `ZONED_CRC32C=hardware` or `=table`
//! forces one (for benchmarks that compare them).

use crate::BLOCK_SIZE;
use std::sync::OnceLock;
use std::time::Instant;

/// Which code computes checksums.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Implementation {
    /// SSE4.2 `crc32` (through the `crc32c` crate; its table fallback on
    /// CPUs without SSE4.2).
    Hardware,
    /// Slicing-by-8 tables.
    Table,
}

impl Implementation {
    /// A human-readable name, for reports and benchmark output.
    pub fn name(self) -> &'static str {
        match self {
            Implementation::Hardware => "hardware (SSE4.2 crc32)",
            Implementation::Table => "table (slicing-by-8)",
        }
    }
}

const POLY: u32 = 0x82F6_3B78;

const fn tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut i = 0;
    while i < 256 {
        let mut k = 1;
        while k < 8 {
            t[k][i] = (t[k - 1][i] >> 8) ^ t[0][(t[k - 1][i] & 0xff) as usize];
            k += 1;
        }
        i += 1;
    }
    t
}

static TABLES: [[u32; 256]; 8] = tables();

fn table_crc(data: &[u8]) -> u32 {
    table_crc_append(0, data)
}

/// The crc32c of what `crc` covered followed by `data`.
fn table_crc_append(crc: u32, data: &[u8]) -> u32 {
    let t = &TABLES;
    let mut crc = !crc;
    let mut chunks = data.chunks_exact(8);
    for chunk in &mut chunks {
        let lo = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]) ^ crc;
        let hi = u32::from_le_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]);
        crc = t[7][(lo & 0xff) as usize]
            ^ t[6][((lo >> 8) & 0xff) as usize]
            ^ t[5][((lo >> 16) & 0xff) as usize]
            ^ t[4][(lo >> 24) as usize]
            ^ t[3][(hi & 0xff) as usize]
            ^ t[2][((hi >> 8) & 0xff) as usize]
            ^ t[1][((hi >> 16) & 0xff) as usize]
            ^ t[0][(hi >> 24) as usize];
    }
    for &byte in chunks.remainder() {
        crc = (crc >> 8) ^ t[0][((crc ^ u32::from(byte)) & 0xff) as usize];
    }
    !crc
}

/// The implementation in use: forced by `ZONED_CRC32C`, else the faster
/// one measured on this CPU at first use.
pub fn implementation() -> Implementation {
    static CHOSEN: OnceLock<Implementation> = OnceLock::new();
    *CHOSEN.get_or_init(|| match std::env::var("ZONED_CRC32C").as_deref() {
        Ok("hardware") => Implementation::Hardware,
        Ok("table") => Implementation::Table,
        _ => calibrate(),
    })
}

/// Times both implementations on the same blocks; the best of three
/// rounds each, so one preemption does not decide.
fn calibrate() -> Implementation {
    let data: Vec<u8> = (0..16 * BLOCK_SIZE).map(|i| (i * 31 + i / 4096) as u8).collect();
    let time = |f: fn(&[u8]) -> u32| {
        (0..3)
            .map(|_| {
                let start = Instant::now();
                let mut x = 0u32;
                for block in data.chunks_exact(BLOCK_SIZE) {
                    x ^= f(std::hint::black_box(block));
                }
                std::hint::black_box(x);
                start.elapsed()
            })
            .min()
            .unwrap_or_default()
    };
    let hardware = time(crc32c::crc32c);
    let table = time(table_crc);
    if table < hardware {
        Implementation::Table
    } else {
        Implementation::Hardware
    }
}

/// crc32c of `data` with the implementation in use.
pub fn crc(data: &[u8]) -> u32 {
    match implementation() {
        Implementation::Hardware => crc32c::crc32c(data),
        Implementation::Table => table_crc(data),
    }
}

/// The crc32c of the bytes `crc` covered followed by `data`, so that
/// `crc_append(crc(a), b) == crc(a ++ b)`.
pub fn crc_append(crc: u32, data: &[u8]) -> u32 {
    match implementation() {
        Implementation::Hardware => crc32c::crc32c_append(crc, data),
        Implementation::Table => table_crc_append(crc, data),
    }
}

/// The crc32c of the bytes `crc` covered followed by `value`'s four
/// little-endian bytes: one slicing-by-4 step, about a dozen instructions
/// whichever implementation is in use, where a call for four bytes costs
/// ten times that (the hardware path's set-up, or the table loop's tail).
/// The same function as `crc_append(crc, &value.to_le_bytes())`.
#[inline]
pub fn crc_append_u32(crc: u32, value: u32) -> u32 {
    let t = &TABLES;
    let x = !crc ^ value;
    !(t[3][(x & 0xff) as usize]
        ^ t[2][((x >> 8) & 0xff) as usize]
        ^ t[1][((x >> 16) & 0xff) as usize]
        ^ t[0][(x >> 24) as usize])
}

/// The checksum of one 4 KiB block.
pub fn block_crc(block: &[u8]) -> u32 {
    debug_assert_eq!(block.len(), BLOCK_SIZE);
    crc(block)
}

/// Appends the checksum of every 4 KiB block of `data` to `out`. `data` is
/// a whole number of blocks.
pub fn block_crcs(data: &[u8], out: &mut Vec<u32>) {
    assert!(data.len().is_multiple_of(BLOCK_SIZE), "{} bytes is not a whole number of 4 KiB blocks", data.len());
    out.extend(data.chunks_exact(BLOCK_SIZE).map(block_crc));
}

/// The indices of the blocks of `data` whose checksum differs from
/// `expected` (one per block).
pub fn mismatches(data: &[u8], expected: &[u32]) -> Vec<u32> {
    assert_eq!(data.len(), expected.len() * BLOCK_SIZE, "one checksum per block");
    data.chunks_exact(BLOCK_SIZE)
        .zip(expected)
        .enumerate()
        .filter(|(_, (block, &crc))| block_crc(block) != crc)
        .map(|(index, _)| index as u32)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors_in_both_implementations() {
        // RFC 3720 B.4: 32 bytes of zeroes, of ones, and "123456789".
        for f in [crc32c::crc32c as fn(&[u8]) -> u32, table_crc] {
            assert_eq!(f(&[0u8; 32]), 0x8A91_36AA);
            assert_eq!(f(&[0xFFu8; 32]), 0x62A8_AB43);
            assert_eq!(f(b"123456789"), 0xE306_9283);
        }
    }

    #[test]
    fn a_four_byte_step_is_the_crc_of_those_bytes_appended() {
        let mut state = 0x1234_5678u32;
        for round in 0..1000u32 {
            let value = round.wrapping_mul(2_654_435_761) ^ state;
            for f in [crc32c::crc32c_append as fn(u32, &[u8]) -> u32, table_crc_append] {
                assert_eq!(crc_append_u32(state, value), f(state, &value.to_le_bytes()), "round {round}");
            }
            state = crc_append_u32(state, value);
        }
    }

    #[test]
    fn implementations_agree_on_every_length() {
        let data: Vec<u8> = (0..9000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for len in (0..64).chain([4095, 4096, 4097, 9000]) {
            assert_eq!(table_crc(&data[..len]), crc32c::crc32c(&data[..len]), "length {len}");
        }
    }

    #[test]
    fn appending_equals_checksumming_the_whole_in_both_implementations() {
        let data: Vec<u8> = (0..3000u32).map(|i| (i.wrapping_mul(40_503) >> 7) as u8).collect();
        for split in [0, 1, 7, 24, 1000, 3000] {
            let (a, b) = data.split_at(split);
            assert_eq!(table_crc_append(table_crc(a), b), crc32c::crc32c(&data), "split {split}");
            assert_eq!(crc32c::crc32c_append(crc32c::crc32c(a), b), table_crc(&data), "split {split}");
        }
        assert_eq!(crc_append(crc(&data[..24]), &data[24..]), crc(&data));
    }

    #[test]
    fn mismatches_name_the_bad_blocks() {
        let mut data = vec![7u8; 3 * BLOCK_SIZE];
        let mut crcs = Vec::new();
        block_crcs(&data, &mut crcs);
        assert_eq!(crcs.len(), 3);
        assert!(mismatches(&data, &crcs).is_empty());
        data[BLOCK_SIZE + 5] ^= 1;
        assert_eq!(mismatches(&data, &crcs), vec![1]);
    }
}

//! sizes: transfers of every size class at every buffer offset, each
//! checked against the data pointer it needs (PRP1 only, PRP2, a list).

use super::*;

/// Where a transfer's buffer starts within its first page: aligned, the
/// smallest dword offset, a sector in, and the last dword of the page (so
/// PRP1 covers just 4 bytes).
const BUFFER_OFFSETS: [usize; 4] = [0, 4, 512, PAGE_SIZE - 4];

pub(super) fn sizes(target: &Target) -> Outcome {
    let ns = &target.ns;
    let block_bytes = target.block_bytes;
    let mdts_bytes = ns.max_transfer_bytes() as usize;
    let reported = target.controller.max_transfer_bytes();
    if reported != Some(mdts_bytes as u64) {
        return Err(format!("the namespace allows {mdts_bytes}-byte transfers, Identify MDTS says {reported:?}"));
    }
    let mut sizes: Vec<usize> = vec![
        block_bytes,
        2 * block_bytes,
        PAGE_SIZE - block_bytes,
        PAGE_SIZE,
        PAGE_SIZE + block_bytes,
        2 * PAGE_SIZE - block_bytes,
        2 * PAGE_SIZE,
        2 * PAGE_SIZE + block_bytes,
        3 * PAGE_SIZE,
        mdts_bytes / 2 + block_bytes,
        mdts_bytes - block_bytes,
        mdts_bytes,
    ];
    let mut power = 4 * PAGE_SIZE;
    while power < mdts_bytes {
        sizes.push(power);
        power *= 2;
    }
    sizes.retain(|&size| size > 0 && size.is_multiple_of(block_bytes) && size <= mdts_bytes);
    sizes.sort_unstable();
    sizes.dedup();

    let mut qpair = target.queue_pair(4)?;
    let pool = target.pool(mdts_bytes + 2 * PAGE_SIZE, 2)?;
    let mut lba = 0u64;
    let mut case = 0u64;
    for &size in &sizes {
        let name = format!("sizes lba={block_bytes} bytes={size}");
        check(&name, || {
            for (index, &write_offset) in BUFFER_OFFSETS.iter().enumerate() {
                let read_offset = BUFFER_OFFSETS[(index + 1) % BUFFER_OFFSETS.len()];
                let blocks = target.blocks(size);
                if lba + blocks > ns.capacity_blocks() {
                    lba = 0;
                }
                case += 1;
                size_case(target, &mut qpair, &pool, lba, size, write_offset, read_offset, case)
                    .map_err(|e| format!("written from offset {write_offset}, read to offset {read_offset}: {e}"))?;
                lba += blocks;
            }
            target.ok(&name, format!("{}, buffer offsets {BUFFER_OFFSETS:?}", prp_shape(0, size)));
            Ok(())
        })?;
    }

    too_large(target, &mut qpair, &pool, mdts_bytes)?;
    buffer_shape(target, &pool)
}

/// One block over MDTS: refused before submission, and by the device too.
fn too_large(target: &Target, qpair: &mut QueuePair, pool: &DmaPool, mdts_bytes: usize) -> Outcome {
    let ns = &target.ns;
    let block_bytes = target.block_bytes;
    let name = format!("sizes lba={block_bytes} mdts+1 block");
    check(&name, || {
        let too_large = mdts_bytes + block_bytes;
        let want = RequestError::TooLarge { bytes: too_large as u64, max_bytes: mdts_bytes as u64 };
        let buffer = take(pool)?;
        expect_refused(ns.write(0, IoBuffer::range(buffer, 0, too_large), false, 0), &want, "write")?;
        let buffer = take(pool)?;
        expect_refused(ns.read(0, IoBuffer::range(buffer, 0, too_large), 0), &want, "read")?;
        // The device enforces the same limit (NVMe Base 2.0 §5.17.2.1,
        // MDTS): a hand-built command one block over fails without moving
        // data, so the driver's limit is the device's.
        let blocks = target.blocks(too_large) as u32;
        for (what, command) in [
            ("hand-built write", nvm::write(ns.nsid(), 0, blocks, false)),
            ("hand-built read", nvm::read(ns.nsid(), 0, blocks)),
        ] {
            let request =
                Request { command, buffer: Some(IoBuffer::range(take(pool)?, 0, too_large)), metadata: None, token: 0 };
            run_expecting(qpair, Ok(request), StatusCode::Generic(GenericStatus::InvalidFieldInCommand), what)?;
        }
        target.ok(
            &name,
            format!(
                "{too_large} bytes refused with TooLarge (max {mdts_bytes}) before submission; the device refuses it too with Invalid Field in Command"
            ),
        );
        Ok(())
    })
}

/// Buffers of the wrong shape: misaligned, not whole blocks, past the end.
fn buffer_shape(target: &Target, pool: &DmaPool) -> Outcome {
    let ns = &target.ns;
    let block_bytes = target.block_bytes;
    let name = format!("sizes lba={block_bytes} buffer shape");
    check(&name, || {
        let buffer = take(pool)?;
        let iova = buffer.iova() + 2;
        expect_refused(
            ns.read(0, IoBuffer::range(buffer, 2, block_bytes), 0),
            &RequestError::Misaligned { iova },
            "read into a buffer at offset 2",
        )?;
        let buffer = take(pool)?;
        expect_refused(
            ns.read(0, IoBuffer::range(buffer, 0, block_bytes + WORD_BYTES), 0),
            &RequestError::NotBlockMultiple {
                bytes: (block_bytes + WORD_BYTES) as u64,
                block_size: block_bytes as u32,
            },
            "read of a block and a dword",
        )?;
        let buffer = take(pool)?;
        let capacity = ns.capacity_blocks();
        expect_refused(
            ns.write(capacity - 1, IoBuffer::range(buffer, 0, 2 * block_bytes), false, 0),
            &RequestError::LbaOutOfRange { slba: capacity - 1, blocks: 2, capacity_blocks: capacity },
            "write across the namespace end",
        )?;
        target.ok(
            &name,
            "offset 2 refused as Misaligned, a partial block as NotBlockMultiple, past the end as LbaOutOfRange",
        );
        Ok(())
    })
}

/// How PRPs describe `len` bytes starting `offset` bytes into a page.
fn prp_shape(offset: usize, len: usize) -> String {
    let first = PAGE_SIZE - offset % PAGE_SIZE;
    if len <= first {
        "PRP1 only".into()
    } else {
        let pages = (len - first).div_ceil(PAGE_SIZE);
        if pages == 1 {
            "PRP1+PRP2".into()
        } else {
            format!("PRP list of {pages} entries")
        }
    }
}

/// Writes `size` bytes at `lba` from `write_offset` in one buffer, reads
/// them back to `read_offset` in another, and checks every block and the
/// bytes around the read range (nothing written outside it).
#[allow(clippy::too_many_arguments)]
fn size_case(
    target: &Target,
    qpair: &mut QueuePair,
    pool: &DmaPool,
    lba: u64,
    size: usize,
    write_offset: usize,
    read_offset: usize,
    generation: u64,
) -> Outcome {
    let ns = &target.ns;
    let block_bytes = target.block_bytes;
    let blocks = size / block_bytes;
    let stamp = |i: usize| Stamp { tag: lba + i as u64, generation };

    let buffer = take(pool)?;
    for i in 0..blocks {
        stamp_block(&buffer, write_offset + i * block_bytes, block_bytes, stamp(i));
    }
    run_ok(qpair, ns.write(lba, IoBuffer::range(buffer, write_offset, size), false, generation), "write")?;

    let buffer = take(pool)?;
    let guarded_end = (read_offset + size + PAGE_SIZE).min(buffer.len());
    poison_all(&buffer, 0, guarded_end);
    let completion = run_ok(qpair, ns.read(lba, IoBuffer::range(buffer, read_offset, size), generation), "read")?;
    let returned = completion.buffer.ok_or("the read came back without its buffer")?;
    let memory = returned.buffer();
    for i in 0..blocks {
        check_block(memory, read_offset + i * block_bytes, block_bytes, Expect::Stamp(stamp(i)))
            .map_err(|e| format!("LBA {}: {e}", lba + i as u64))?;
    }
    let outside = (0..read_offset).chain(read_offset + size..guarded_end);
    for offset in outside.step_by(WORD_BYTES) {
        let word = memory.read::<u32>(offset);
        if word != POISON {
            return Err(format!(
                "the read of {size} bytes to offset {read_offset} changed buffer byte {offset} (outside the transfer) to {word:#010x}"
            ));
        }
    }
    Ok(())
}

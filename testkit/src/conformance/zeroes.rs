//! zeroes: the namespace's zero-out strategy over a stamped region, every
//! block read back as zeroes or as it was.

use super::*;

/// Bytes of the region the zeroes scenario fills and checks.
const ZEROES_REGION_BYTES: usize = 4 << 20;
/// Commands in flight while filling and checking the region.
const ZEROES_QUEUE_DEPTH: u16 = 33;
const ZEROES_EXTENT_BLOCKS_MAX: u32 = 8;

pub(super) fn zeroes(target: &Target) -> Outcome {
    let ns = &target.ns;
    let block_bytes = target.block_bytes;
    let region_blocks = target.blocks(ZEROES_REGION_BYTES);
    // Blocks per 4 KiB page: ranges are laid out in pages, so both LBA
    // formats exercise the same byte ranges.
    let p = target.blocks(PAGE_SIZE).max(1);
    if ns.capacity_blocks() < region_blocks || region_blocks < 700 * p {
        return Err(format!("the namespace needs {region_blocks} blocks"));
    }
    let mut qpair = target.queue_pair(ZEROES_QUEUE_DEPTH)?;
    let depth = qpair.capacity();
    let extent_bytes = ZEROES_EXTENT_BLOCKS_MAX as usize * block_bytes;
    let pool = target.pool(extent_bytes.max(PAGE_SIZE), depth)?;
    let mut rng = Prng::with_stream(target.seed, 0x7a65_726f);
    let mut model = Model::new(0, region_blocks, Expect::Zeroes);

    check("zeroes fill", || {
        let ops: Vec<Op> = random_extents(&mut rng, 0, region_blocks, ZEROES_EXTENT_BLOCKS_MAX)
            .into_iter()
            .map(|(slba, blocks)| Op::Write { slba, blocks, generation: 1 })
            .collect();
        run_batch(&mut qpair, ns, &pool, &mut model, &ops, depth).map(drop)
    })?;

    check("zeroes write zeroes", || {
        let ranges = [(16 * p, 40 * p, false), (100 * p + 3, 17, true)];
        for (slba, blocks, deallocate) in ranges {
            run_ok(
                &mut qpair,
                ns.write_zeroes(slba, blocks as u32, deallocate, 0),
                &format!("write zeroes {blocks} blocks at {slba}"),
            )?;
            model.set_range(slba, blocks, Expect::Zeroes);
        }
        target.ok(&format!("zeroes lba={block_bytes} write zeroes"), format!("{ranges:?} (slba, blocks, deallocate)"));
        Ok(())
    })?;

    check("zeroes deallocate", || {
        let ranges = [(200 * p, 8 * p as u32), (220 * p, p as u32), (240 * p, 32 * p as u32)];
        let buffer = IoBuffer::new(take(&pool)?);
        run_ok(&mut qpair, ns.deallocate(&ranges, buffer, 0), "deallocate")?;
        for (slba, blocks) in ranges {
            model.set_range(slba, u64::from(blocks), Expect::Zeroes);
        }
        target.ok(
            &format!("zeroes lba={block_bytes} deallocate"),
            format!("{} ranges in one Dataset Management command: {ranges:?}", ranges.len()),
        );
        Ok(())
    })?;

    check("zeroes copy", || {
        let sources = [(400 * p, 8u32), (410 * p + 1, 16), (420 * p, 3)];
        let destination = 500 * p;
        let buffer = IoBuffer::new(take(&pool)?);
        run_ok(&mut qpair, ns.copy(destination, &sources, buffer, 0), "copy")?;
        let mut at = destination;
        for (slba, blocks) in sources {
            for i in 0..u64::from(blocks) {
                model.set(at, model.expect(slba + i));
                at += 1;
            }
        }
        target.ok(
            &format!("zeroes lba={block_bytes} copy"),
            format!("sources {sources:?} to {destination}, {} blocks", at - destination),
        );
        Ok(())
    })?;

    check("zeroes flush", || {
        run_ok(&mut qpair, Ok(ns.flush(0)), "flush")?;
        if ns.supports(Oncs::VERIFY) {
            run_ok(&mut qpair, ns.verify(0, 64, 0), "verify")?;
            target.ok(&format!("zeroes lba={block_bytes} flush"), "flush and verify of 64 blocks succeed");
        } else {
            expect_refused(ns.verify(0, 64, 0), &RequestError::Unsupported { command: "Verify" }, "verify")?;
            target.ok(
                &format!("zeroes lba={block_bytes} flush"),
                "flush succeeds; verify is not in ONCS and is refused as Unsupported",
            );
        }
        Ok(())
    })?;

    check("zeroes compare", || compare(target, &mut qpair, &pool, &model, p))?;

    check("zeroes read back", || {
        let report = verify_region(&mut qpair, ns, &pool, &mut model, &mut rng, ZEROES_EXTENT_BLOCKS_MAX, depth)?;
        let zero_blocks = model.blocks.iter().filter(|e| **e == Expect::Zeroes).count();
        target.ok(
            &format!("zeroes lba={block_bytes} read back"),
            format!(
                "{} blocks: {zero_blocks} read as zeroes, every other block holds its own or its copied data",
                report.blocks
            ),
        );
        Ok(())
    })
}

/// Compare: the data the model says is there compares equal, the same
/// with its last byte changed fails with Compare Failure, and zeroes
/// compare equal to a zeroed range.
fn compare(target: &Target, qpair: &mut QueuePair, pool: &DmaPool, model: &Model, p: u64) -> Outcome {
    let ns = &target.ns;
    let block_bytes = target.block_bytes;
    let slba = 600 * p;
    let blocks = 4usize;
    let len = blocks * block_bytes;
    let matching = take(pool)?;
    for i in 0..blocks {
        let Expect::Stamp(stamp) = model.expect(slba + i as u64) else {
            return Err(format!("LBA {} is not stamped", slba + i as u64));
        };
        stamp_block(&matching, i * block_bytes, block_bytes, stamp);
    }
    let completion = run_ok(qpair, ns.compare(slba, IoBuffer::range(matching, 0, len), 0), "compare of matching data")?;
    // The same data with its very last byte changed.
    let differing = completion.buffer.ok_or("the compare came back without its buffer")?;
    let last = differing.offset() + len - 1;
    let byte = differing.buffer().read::<u8>(last);
    differing.buffer().write::<u8>(last, !byte);
    let status = run_expecting(
        qpair,
        ns.compare(slba, differing, 0),
        StatusCode::Media(MediaStatus::CompareFailure),
        "compare of data differing in the last byte",
    )?;
    expect_raw(status, StatusCodeType::MediaAndDataIntegrity, 0x85)?;
    // Zeroes compare equal to a zeroed range.
    let zeroed = take(pool)?;
    zeroed.fill(0, len, 0);
    run_ok(qpair, ns.compare(16 * p, IoBuffer::range(zeroed, 0, len), 0), "compare of zeroes with a zeroed range")?;
    target.ok(
        &format!("zeroes lba={block_bytes} compare"),
        format!("matching data and a zeroed range compare equal; one changed byte gives {status}"),
    );
    Ok(())
}

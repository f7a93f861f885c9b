//! dsm-limit: a deallocate range longer than DMRSL is refused, and one of
//! exactly DMRSL blocks reads back as zeroes.

use super::*;

/// Dataset Management Range Size Limit (Identify Controller, NVM Command
/// Set, DMRSL): the most blocks one deallocate range may cover. QEMU skips
/// a longer range and still completes the command successfully
/// (hw/nvme/ctrl.c, nvme_dsm_cb), so a driver that lets one through makes
/// the caller believe the blocks read as zeroes while they keep their data.
pub(super) fn dsm_limit(target: &Target) -> Outcome {
    let ns = &target.ns;
    let block_bytes = target.block_bytes;
    let dmrsl = target
        .controller
        .identify_nvm()
        .map(|nvm| nvm.dmrsl)
        .filter(|&dmrsl| dmrsl != 0 && dmrsl < u32::MAX)
        .ok_or("the controller reports no Dataset Management range size limit")?;
    if ns.capacity_blocks() <= u64::from(dmrsl) {
        return Err(format!("the namespace needs more than DMRSL ({dmrsl}) blocks"));
    }
    let mut qpair = target.queue_pair(4)?;
    let pool = target.pool(PAGE_SIZE.max(block_bytes), 2)?;
    let stamp = Stamp { tag: 0, generation: 1 };
    let write_stamp = |qpair: &mut QueuePair| -> Outcome {
        let buffer = take(&pool)?;
        stamp_block(&buffer, 0, block_bytes, stamp);
        run_ok(qpair, ns.write(0, IoBuffer::range(buffer, 0, block_bytes), false, 0), "write LBA 0").map(drop)
    };
    let read_check = |qpair: &mut QueuePair, expect: Expect| -> Outcome {
        let buffer = take(&pool)?;
        poison_blocks(&buffer, 0, 1, block_bytes);
        let completion = run_ok(qpair, ns.read(0, IoBuffer::range(buffer, 0, block_bytes), 0), "read LBA 0")?;
        let buffer = completion.buffer.ok_or("the read came back without its buffer")?;
        check_block(buffer.buffer(), buffer.offset(), block_bytes, expect).map_err(|e| format!("LBA 0: {e}"))
    };

    check("dsm-limit over", || {
        write_stamp(&mut qpair)?;
        let over = dmrsl + 1;
        let request = ns.deallocate(&[(0, over)], IoBuffer::new(take(&pool)?), 0);
        match request {
            Err(error) => {
                read_check(&mut qpair, Expect::Stamp(stamp))?;
                target.ok(
                    "dsm-limit over",
                    format!("a range of {over} blocks (DMRSL {dmrsl}) refused with {error:?} before submission"),
                );
                Ok(())
            }
            Ok(request) => {
                let completion = qpair.execute(request, COMMAND_TIMEOUT).map_err(|e| format!("deallocate: {e}"))?;
                let after = match read_check(&mut qpair, Expect::Zeroes) {
                    Ok(()) => "zeroes".to_string(),
                    Err(message) => message,
                };
                Err(format!(
                    "the driver built a deallocate range of {over} blocks (DMRSL {dmrsl}); the device answered {:?} and LBA 0 then reads {after}",
                    completion.status
                ))
            }
        }
    })?;
    check("dsm-limit at", || {
        write_stamp(&mut qpair)?;
        run_ok(&mut qpair, ns.deallocate(&[(0, dmrsl)], IoBuffer::new(take(&pool)?), 0), "deallocate")?;
        read_check(&mut qpair, Expect::Zeroes)?;
        target.ok("dsm-limit at", format!("a range of exactly DMRSL ({dmrsl}) blocks reads back as zeroes"));
        Ok(())
    })
}

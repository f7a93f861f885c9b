//! I/O through real queue pairs over the simulator: data round trips,
//! delayed and reordered completions, every NVM command, the device's own
//! checks (it answers like a device even when the driver's validation is
//! bypassed), and DMA translation.

mod sim_support;

use nvme_driver::cmd::nvm;
use nvme_driver::dma::DmaMemory;
use nvme_driver::sim::{NamespaceConfig, SimConfig, Simulator, IOVA_BASE};
use nvme_driver::spec::command::Command;
use nvme_driver::spec::identify::CopyFormats;
use nvme_driver::spec::status::{CommandSpecificStatus, GenericStatus, MediaStatus, StatusCode};
use nvme_driver::{IoBuffer, Request, RequestError};
use sim_support::{code, pattern, Rig};
use std::collections::HashSet;
use std::time::Duration;

#[test]
fn read_write_round_trips_512_and_4096() {
    for block_size in [512u32, 4096] {
        let mut rig = Rig::new(SimConfig::nvm(1 << 20, block_size));
        // One block, one page, a PRP list (64 KiB) and an MDTS-sized one.
        for (i, len) in [block_size as usize, 4096, 64 * 1024, 128 * 1024].into_iter().enumerate() {
            let lba = 1000 * i as u64;
            let data = pattern(i as u64 + u64::from(block_size), len);
            rig.write(lba, &data, false).unwrap();
            assert_eq!(rig.read(lba, len).unwrap(), data, "{len} bytes at {lba}, {block_size}-byte blocks");
        }
        // Never written: zeroes, even gigabytes in.
        assert_eq!(rig.read((1 << 20) - 8, 8 * block_size as usize).unwrap(), vec![0; 8 * block_size as usize]);
        // A buffer starting inside a page: PRP1 with an offset, PRP2 for the rest.
        let data = pattern(99, 4096);
        let buffer = IoBuffer::range(rig.pool.get().unwrap(), 512, 4096);
        buffer.buffer().copy_in(512, &data);
        let request = rig.ns.write(5000, buffer, true, 1).unwrap();
        rig.status(request).unwrap();
        assert_eq!(rig.read(5000, 4096).unwrap(), data);
    }
}

#[test]
fn many_queue_pairs_share_one_namespace() {
    let mut rig = Rig::new(SimConfig::nvm(1 << 16, 512));
    let mut second = rig.controller.create_queue_pair(8).unwrap();
    let data = pattern(3, 4096);
    let request = rig.ns.write(64, rig.buffer_with(&data), false, 1).unwrap();
    second.execute(request, Duration::from_secs(1)).unwrap().status.unwrap();
    assert_eq!(rig.read(64, 4096).unwrap(), data);
    assert_eq!(second.qid(), 2);
}

/// Submits `count` 4 KiB reads and polls until every token came back once;
/// returns the order tokens completed in.
fn read_tokens(rig: &mut Rig, count: u64) -> Vec<u64> {
    for token in 0..count {
        let request = rig.ns.read(token * 8, rig.buffer(4096), token).unwrap();
        rig.pair.submit(request).map_err(|(error, _)| error).unwrap();
    }
    let mut order = Vec::new();
    for _ in 0..100_000 {
        rig.pair.poll(|done| {
            done.status.unwrap();
            order.push(done.token);
        });
        if order.len() as u64 == count {
            break;
        }
    }
    order
}

#[test]
fn delayed_and_reordered_completions_each_arrive_exactly_once() {
    let config = SimConfig::nvm(1 << 16, 512).with_completion_delay(0, 6).with_reorder(true).with_seed(11);
    let mut rig = Rig::new(config);
    let started = rig.sim.now();
    let order = read_tokens(&mut rig, 40);
    assert_eq!(order.len(), 40);
    assert_eq!(order.iter().copied().collect::<HashSet<_>>().len(), 40, "each token exactly once");
    let mut sorted = order.clone();
    sorted.sort_unstable();
    assert_ne!(order, sorted, "completions arrived out of submission order");
    assert!(rig.sim.now() - started >= 6, "completions waited for ticks");
    assert_eq!(rig.pair.in_flight(), 0);
    // Without delay or reorder, completions come in order and at once.
    let mut rig = Rig::new(SimConfig::nvm(1 << 16, 512));
    let order = read_tokens(&mut rig, 40);
    assert_eq!(order, (0..40).collect::<Vec<_>>());
}

#[test]
fn write_zeroes_deallocate_copy_compare_verify_flush() {
    let mut rig = Rig::new(SimConfig::nvm(1 << 16, 512));
    let data = pattern(1, 16 * 512);
    rig.write(100, &data, false).unwrap();
    rig.flush();
    assert_eq!(rig.sim.dirty_blocks(1), 0);
    // Write Zeroes over blocks 102..104.
    let request = rig.ns.write_zeroes(102, 2, false, 0).unwrap();
    rig.status(request).unwrap();
    let read = rig.read(100, 16 * 512).unwrap();
    assert_eq!(&read[..1024], &data[..1024]);
    assert!(read[1024..2048].iter().all(|b| *b == 0));
    assert_eq!(&read[2048..], &data[2048..]);
    // Deallocate 108..110: zeroes (DLFEAT 001b).
    let request = rig.ns.deallocate(&[(108, 2), (114, 1)], rig.buffer(4096), 0).unwrap();
    rig.status(request).unwrap();
    let read = rig.read(100, 16 * 512).unwrap();
    assert!(read[8 * 512..10 * 512].iter().all(|b| *b == 0));
    assert!(read[14 * 512..15 * 512].iter().all(|b| *b == 0));
    assert_eq!(&read[10 * 512..14 * 512], &data[10 * 512..14 * 512]);
    // Copy 100..102 and 110..112 to 200..204.
    let request = rig.ns.copy(200, &[(100, 2), (110, 2)], rig.buffer(4096), 0).unwrap();
    rig.status(request).unwrap();
    let copied = rig.read(200, 4 * 512).unwrap();
    assert_eq!(&copied[..1024], &data[..1024]);
    assert_eq!(&copied[1024..], &data[10 * 512..12 * 512]);
    // Compare: equal, then one byte off.
    let request = rig.ns.compare(200, rig.buffer_with(&copied), 0).unwrap();
    rig.status(request).unwrap();
    let mut wrong = copied.clone();
    wrong[700] ^= 1;
    let request = rig.ns.compare(200, rig.buffer_with(&wrong), 0).unwrap();
    let status = rig.status(request).unwrap_err();
    assert_eq!(status.code(), StatusCode::Media(MediaStatus::CompareFailure));
    // Verify, Flush.
    let request = rig.ns.verify(0, 65535, 0).unwrap();
    assert_eq!(code(rig.status(request)), StatusCode::Generic(GenericStatus::InvalidFieldInCommand), "over VSL");
    let request = rig.ns.verify(0, 256, 0).unwrap();
    rig.status(request).unwrap();
    rig.flush();
}

/// Two namespaces of 512-byte blocks, and a third of `third_block_size`
/// bytes with `third_metadata_bytes` of metadata per block.
fn three_namespaces(third_block_size: u32, third_metadata_bytes: u16) -> SimConfig {
    SimConfig::empty()
        .with_namespace(NamespaceConfig::nvm(1 << 16, 512))
        .with_namespace(NamespaceConfig::nvm(1 << 16, 512))
        .with_namespace(NamespaceConfig::nvm(1 << 16, third_block_size).metadata_bytes(third_metadata_bytes))
}

#[test]
fn copy_across_namespaces_reads_back_the_same_bytes() {
    let mut rig = Rig::new(three_namespaces(512, 0));
    assert!(rig.controller.identify().copy_formats().contains(CopyFormats::FORMAT_0 | CopyFormats::FORMAT_2));
    let ns2 = rig.controller.namespace(2).unwrap();
    assert!(rig.ns.cross_namespace_copy() && ns2.cross_namespace_copy(), "enabled at bring-up");
    let data = pattern(7, 16 * 512);
    rig.write(100, &data, false).unwrap();
    // Namespace 1's 100..104 and 108..112 to namespace 2's 40..48.
    let request = ns2.copy_from(40, 1, &[(100, 4), (108, 4)], rig.buffer(4096), 0).unwrap();
    rig.status(request).unwrap();
    let copied = rig.read_on(&ns2, 40, 8 * 512).unwrap();
    assert_eq!(&copied[..4 * 512], &data[..4 * 512]);
    assert_eq!(&copied[4 * 512..], &data[8 * 512..12 * 512]);
    assert_eq!(rig.read(100, 16 * 512).unwrap(), data, "the source is left as it was");
    // Within one namespace in format 2h: a copy that does not overlap.
    let request = ns2.copy_from(1000, 2, &[(40, 8)], rig.buffer(4096), 0).unwrap();
    rig.status(request).unwrap();
    assert_eq!(rig.read_on(&ns2, 1000, 8 * 512).unwrap(), copied);
    // Sources that overlap the destination in its own namespace are
    // refused in format 2h (format 0h copies them).
    let request = ns2.copy_from(44, 2, &[(40, 8)], rig.buffer(4096), 0).unwrap();
    assert_eq!(code(rig.status(request)), StatusCode::CommandSpecific(CommandSpecificStatus::OverlappingIoRange));
    // The same range of another namespace does not overlap.
    let request = ns2.copy_from(40, 1, &[(40, 8)], rig.buffer(4096), 0).unwrap();
    rig.status(request).unwrap();
    // Source NSIDs the controller has no namespace for.
    for (snsid, expected) in [
        (0, GenericStatus::InvalidNamespaceOrFormat),
        (u32::MAX, GenericStatus::InvalidNamespaceOrFormat),
        (4, GenericStatus::InvalidFieldInCommand), // below NN, inactive
    ] {
        let request = ns2.copy_from(2000, snsid, &[(0, 1)], rig.buffer(4096), 0).unwrap();
        assert_eq!(code(rig.status(request)), StatusCode::Generic(expected), "SNSID {snsid:#x}");
    }
    // A source range past its namespace's end, which the handle of another
    // namespace cannot know.
    let request = ns2.copy_from(2000, 1, &[((1 << 16) - 1, 2)], rig.buffer(4096), 0).unwrap();
    assert_eq!(code(rig.status(request)), StatusCode::Generic(GenericStatus::LbaOutOfRange));
}

#[test]
fn copy_across_namespaces_needs_format_2h() {
    let config = three_namespaces(512, 0).with_copy_formats(CopyFormats::FORMAT_0);
    let mut rig = Rig::new(config);
    assert_eq!(rig.controller.identify().copy_formats(), CopyFormats::FORMAT_0);
    let ns2 = rig.controller.namespace(2).unwrap();
    assert!(!ns2.cross_namespace_copy());
    assert_eq!(
        ns2.copy_from(40, 1, &[(100, 4)], rig.buffer(4096), 0).unwrap_err(),
        RequestError::Unsupported { command: "Copy across namespaces" }
    );
    // Past the driver's check, the controller refuses the format it does
    // not offer.
    let descriptors = rig.buffer(4096);
    descriptors.buffer().copy_in(0, &nvm::CopySourceRangeFormat2::new(1, 100, 4).to_bytes());
    let command = nvm::copy_with_format(2, 40, 1, nvm::COPY_DESCRIPTOR_FORMAT_2, false);
    let status = rig.status(Request { command, buffer: Some(descriptors.truncate(32)), metadata: None, token: 0 });
    assert_eq!(code(status), StatusCode::Generic(GenericStatus::InvalidFieldInCommand));
    // Copy within a namespace still works.
    rig.write(100, &pattern(8, 4 * 512), false).unwrap();
    let request = rig.ns.copy(200, &[(100, 4)], rig.buffer(4096), 0).unwrap();
    rig.status(request).unwrap();
    assert_eq!(rig.read(200, 4 * 512).unwrap(), pattern(8, 4 * 512));
}

#[test]
fn copy_across_namespaces_of_other_formats_is_incompatible() {
    let incompatible = StatusCode::CommandSpecific(CommandSpecificStatus::IncompatibleNamespaceOrFormat);
    // Another LBA data size, then the same with another metadata size.
    for (block_size, metadata_bytes) in [(4096, 0), (512, 8)] {
        let mut rig = Rig::new(three_namespaces(block_size, metadata_bytes));
        rig.write(0, &pattern(9, 8 * 512), false).unwrap();
        let ns3 = rig.controller.namespace(3).unwrap();
        let request = ns3.copy_from(0, 1, &[(0, 8)], rig.buffer(4096), 0).unwrap();
        assert_eq!(code(rig.status(request)), incompatible, "{block_size}+{metadata_bytes} from 512+0");
        let request = rig.ns.copy_from(0, 3, &[(0, 1)], rig.buffer(4096), 0).unwrap();
        assert_eq!(code(rig.status(request)), incompatible, "512+0 from {block_size}+{metadata_bytes}");
        assert_eq!(rig.read_on(&ns3, 0, block_size as usize).unwrap(), vec![0; block_size as usize], "nothing copied");
    }
}

#[test]
fn copy_across_namespaces_is_enabled_again_after_a_reset() {
    let mut rig = Rig::new(three_namespaces(512, 0));
    let ns2 = rig.controller.namespace(2).unwrap();
    let data = pattern(10, 4 * 512);
    rig.write(0, &data, false).unwrap();
    for round in 0..2u64 {
        // The reset clears Host Behavior Support on the controller; the
        // bring-up after it sets CDFE again.
        rig.controller.reset().unwrap();
        let request = ns2.copy_from(round * 8, 1, &[(0, 4)], rig.buffer(4096), 0).unwrap();
        rig.status(request).unwrap();
        assert_eq!(rig.read_on(&ns2, round * 8, 4 * 512).unwrap(), data, "after reset {}", round + 1);
    }
    assert_eq!(rig.controller.resets(), 2);
    assert!(rig.controller.namespace(2).unwrap().cross_namespace_copy());
}

#[test]
fn deallocate_can_keep_the_data() {
    let mut rig =
        Rig::new(SimConfig::empty().with_namespace(NamespaceConfig::nvm(1 << 16, 512).deallocate_keeps_data()));
    rig.write(0, &[9u8; 2048], true).unwrap();
    let request = rig.ns.deallocate(&[(0, 4)], rig.buffer(4096), 0).unwrap();
    rig.status(request).unwrap();
    assert_eq!(rig.read(0, 2048).unwrap(), vec![9u8; 2048], "like QEMU with discard=ignore");
    // Write Zeroes zeroes regardless.
    let request = rig.ns.write_zeroes(0, 4, true, 0).unwrap();
    rig.status(request).unwrap();
    assert_eq!(rig.read(0, 2048).unwrap(), vec![0u8; 2048]);
}

#[test]
fn the_device_checks_what_the_driver_would_have_refused() {
    let mut config = SimConfig::nvm(1 << 16, 512);
    config.dmrl = 2;
    config.dmrsl = 16;
    config.wzsl = 1;
    let mut rig = Rig::new(config);
    let raw = |command: Command, buffer: Option<IoBuffer>| Request { command, buffer, metadata: None, token: 0 };
    // LBA Out of Range.
    let request = raw(nvm::read(1, (1 << 16) - 1, 2), Some(rig.buffer(1024)));
    let status = rig.status(request).unwrap_err();
    assert_eq!((status.code(), status.dnr), (StatusCode::Generic(GenericStatus::LbaOutOfRange), true));
    // MDTS (512 KiB) exceeded.
    let request = raw(nvm::read(1, 0, 2048), Some(IoBuffer::new(rig.pool.get().unwrap())));
    assert_eq!(code(rig.status(request)), StatusCode::Generic(GenericStatus::InvalidFieldInCommand));
    // WZSL: 8 KiB.
    let request = raw(nvm::write_zeroes(1, 0, 17, false, false), None);
    assert_eq!(code(rig.status(request)), StatusCode::Generic(GenericStatus::InvalidFieldInCommand));
    // DMRL and DMRSL.
    let ranges = rig.buffer(4096);
    for (i, range) in [nvm::DsmRange::new(0, 8), nvm::DsmRange::new(8, 8), nvm::DsmRange::new(16, 8)].iter().enumerate()
    {
        ranges.buffer().copy_in(i * 16, &range.to_bytes());
    }
    let request = raw(nvm::dataset_management(1, 3, nvm::DsmAttributes::DEALLOCATE), Some(ranges));
    assert_eq!(code(rig.status(request)), StatusCode::Generic(GenericStatus::InvalidFieldInCommand), "3 ranges > DMRL");
    let ranges = rig.buffer(16);
    ranges.buffer().copy_in(0, &nvm::DsmRange::new(0, 17).to_bytes());
    let request = raw(nvm::dataset_management(1, 1, nvm::DsmAttributes::DEALLOCATE), Some(ranges));
    assert_eq!(code(rig.status(request)), StatusCode::Generic(GenericStatus::InvalidFieldInCommand), "over DMRSL");
    // Copy: more ranges than MSRC + 1 (128), a range over MSSRL (128).
    let request = raw(nvm::copy(1, 0, 129, false), Some(rig.buffer(129 * 32)));
    assert_eq!(code(rig.status(request)), StatusCode::CommandSpecific(CommandSpecificStatus::CommandSizeLimitExceeded));
    let sources = rig.buffer(32);
    sources.buffer().copy_in(0, &nvm::CopySourceRange::new(0, 129).to_bytes());
    let request = raw(nvm::copy(1, 1000, 1, false), Some(sources));
    assert_eq!(code(rig.status(request)), StatusCode::CommandSpecific(CommandSpecificStatus::CommandSizeLimitExceeded));
    // Unknown and unsupported opcodes, bad namespaces, SGLs.
    let request = raw(Command { nsid: 1, ..Command::new(0x7E) }, None);
    let status = rig.status(request).unwrap_err();
    assert_eq!((status.code(), status.dnr), (StatusCode::Generic(GenericStatus::InvalidCommandOpcode), true));
    let request = raw(Command { nsid: 1, ..Command::new(0x04) }, None);
    assert_eq!(
        code(rig.status(request)),
        StatusCode::Generic(GenericStatus::InvalidCommandOpcode),
        "no Write Uncorrectable"
    );
    let request = raw(Command { nsid: 1, ..Command::new(0x7A) }, None);
    assert_eq!(code(rig.status(request)), StatusCode::Generic(GenericStatus::InvalidCommandOpcode), "no zones here");
    let request = raw(nvm::read(0, 0, 1), Some(rig.buffer(512)));
    assert_eq!(code(rig.status(request)), StatusCode::Generic(GenericStatus::InvalidNamespaceOrFormat));
    let request = raw(nvm::read(2, 0, 1), Some(rig.buffer(512)));
    assert_eq!(code(rig.status(request)), StatusCode::Generic(GenericStatus::InvalidFieldInCommand), "inactive NSID");
    // SGLs: metadata SGLs are not offered (SGLS bit 19); a PRP-shaped data
    // pointer read as an SGL is a Data Block of no length.
    let request = raw(Command { flags: 0x80, ..nvm::read(1, 0, 1) }, Some(rig.buffer(512)));
    assert_eq!(code(rig.status(request)), StatusCode::Generic(GenericStatus::InvalidFieldInCommand), "metadata SGL");
    let request = raw(Command { flags: 0x40, ..nvm::read(1, 0, 1) }, Some(rig.buffer(512)));
    assert_eq!(
        code(rig.status(request)),
        StatusCode::Generic(GenericStatus::DataSglLengthInvalid),
        "no data described"
    );
    // A controller without SGL support refuses them.
    let mut config = SimConfig::nvm(1 << 16, 512);
    config.sgls = 0;
    let mut rig = Rig::new(config);
    let request = raw(Command { flags: 0x40, ..nvm::read(1, 0, 1) }, Some(rig.buffer(512)));
    assert_eq!(code(rig.status(request)), StatusCode::Generic(GenericStatus::InvalidFieldInCommand), "SGLS 0");
}

#[test]
fn an_unmapped_iova_is_a_data_transfer_error() {
    let mut rig = Rig::new(SimConfig::nvm(1 << 16, 512));
    // The classic bug: the buffer's host address where its IOVA belongs.
    let buffer = rig.pool.get().unwrap();
    let host_address = buffer.raw_parts().0.as_ptr() as u64;
    assert!(buffer.iova() >= IOVA_BASE && buffer.iova() != host_address);
    for iova in [host_address, IOVA_BASE - 4096] {
        // SAFETY: the simulator translates every IOVA through its table and
        // touches no memory for one outside it, so nothing is accessed at
        // these addresses.
        let completion =
            unsafe { rig.pair.execute_raw(nvm::read(1, 0, 8), iova, 4096, Duration::from_secs(1)).unwrap() };
        let status = completion.device_status().unwrap();
        assert_eq!(status.code(), StatusCode::Generic(GenericStatus::DataTransferError));
    }
    assert_eq!(rig.sim.stats().dma_errors, 2);
    // The transfer never started: the (mapped) buffer is untouched.
    assert_eq!(buffer.read::<u64>(0), 0);
}

#[test]
fn a_second_simulator_does_not_see_the_first_ones_data() {
    let mut first = Rig::new(SimConfig::nvm(1 << 16, 512));
    let mut second = Rig::new(SimConfig::nvm(1 << 16, 512));
    first.write(0, &[1u8; 512], false).unwrap();
    assert_eq!(second.read(0, 512).unwrap(), vec![0u8; 512]);
    let _ = Simulator::new(SimConfig::default());
}

#[test]
fn queue_pairs_on_several_threads() {
    // Correct under concurrency; only the single-threaded runs are
    // deterministic. With delays every command runs under the simulator's
    // lock; without, the queues are lent to lanes and run at once
    // (`sim/lane.rs`); without lanes, reads move their data outside the
    // lock (`sim/deferred.rs`) while the other threads' commands run.
    let plain = SimConfig::nvm(1 << 16, 512);
    // (A queue's first doorbell, before it is lent, may defer a read.)
    for (config, deferred, lanes) in [
        (plain.clone().with_completion_delay(0, 2), Some(false), false),
        (plain.clone().with_lanes(false), Some(true), false),
        (plain, None, true),
    ] {
        let rig = Rig::new(config);
        pairs_on_threads(&rig);
        let stats = rig.sim.stats();
        assert!(deferred.is_none_or(|deferred| deferred == (stats.deferred_reads > 0)), "{stats:?}");
        assert_eq!(stats.lane_commands > 0, lanes, "{stats:?}");
    }
}

fn pairs_on_threads(rig: &Rig) {
    std::thread::scope(|scope| {
        for thread in 0..4u64 {
            let mut pair = rig.controller.create_queue_pair(16).unwrap();
            let ns = rig.ns.clone();
            let pool = rig.pool.clone();
            scope.spawn(move || {
                for round in 0..50u64 {
                    // 16 KiB: reads this large move outside the lock.
                    let lba = thread * 4096 + round * 32;
                    let data = pattern(thread * 1000 + round, 16384);
                    let buffer = IoBuffer::range(pool.get().unwrap(), 0, 16384);
                    buffer.buffer().copy_in(0, &data);
                    let done = pair.execute(ns.write(lba, buffer, false, 0).unwrap(), Duration::from_secs(5)).unwrap();
                    done.status.unwrap();
                    let buffer = IoBuffer::range(pool.get().unwrap(), 0, 16384);
                    let done = pair.execute(ns.read(lba, buffer, 0).unwrap(), Duration::from_secs(5)).unwrap();
                    done.status.unwrap();
                    let mut read = vec![0u8; 16384];
                    done.buffer.unwrap().buffer().copy_out(0, &mut read);
                    assert_eq!(read, data);
                }
            });
        }
    });
    assert_eq!(rig.sim.stats().io(0x01), 200);
    assert_eq!(rig.sim.stats().io(0x02), 200);
}

#[test]
fn queues_called_back_from_their_lanes_mid_run_lose_nothing() {
    // Four pairs on four threads with their queues lent to lanes, while a
    // fifth thread keeps calling them back (`sim/lane.rs`): stats and
    // trace reads, DMA mapped and unmapped, register reads. Every write
    // reads back whole, and every command is counted once.
    let rig = Rig::new(SimConfig::nvm(1 << 16, 512));
    let stop = std::sync::atomic::AtomicBool::new(false);
    let transport = rig.controller.transport().clone();
    std::thread::scope(|scope| {
        let disturber = scope.spawn(|| {
            let mut calls = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = rig.sim.stats();
                let _ = rig.sim.trace_hash();
                drop(nvme_driver::dma::DmaPool::new(&transport, 4096, 2).unwrap());
                let _ = transport.read32(nvme_driver::spec::registers::CSTS);
                calls += 1;
                std::thread::yield_now();
            }
            calls
        });
        pairs_on_threads(&rig);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(disturber.join().unwrap() > 0);
    });
    let stats = rig.sim.stats();
    assert!(stats.lane_commands > 0, "{stats:?}");
    // Every admin command but the Asynchronous Event Requests (0Ch), which
    // wait for an event, and the 400 I/O commands completed, once.
    let admin = stats.admin_commands.iter().sum::<u64>() - stats.admin_commands[0x0C];
    assert_eq!(stats.completions_posted, admin + 400);
}

#[test]
fn a_buffer_mapped_for_another_device_is_refused_at_submission() {
    // Two simulated controllers, each its own I/O address space: a buffer
    // of one means other memory (or nothing) to the other.
    let mut a = Rig::new(SimConfig::nvm(1 << 16, 512));
    let b = Rig::new(SimConfig::nvm(1 << 16, 512));
    assert_ne!(a.pool.dma_domain(), b.pool.dma_domain());
    let foreign = IoBuffer::new(b.pool.get().unwrap());
    let request = a.ns.write(0, foreign.truncate(4096), false, 7).unwrap();
    match a.pair.submit(request) {
        Err((nvme_driver::queue::SubmitError::ForeignBuffer, _)) => {}
        other => panic!("expected ForeignBuffer, got {:?}", other.map_err(|(e, _)| e)),
    }
    // Its own buffers go.
    a.write(0, &pattern(1, 4096), false).unwrap();
}

#[test]
fn consumed_completions_are_announced_in_batches_and_the_cq_never_fills() {
    // Queues kept full, completions delayed and reordered: the pair
    // announces its CQ head a quarter of the queue at a time, and sooner
    // when a submission could otherwise leave the controller no room.
    for depth in [2u16, 4, 8, 16, 64] {
        let config = SimConfig::nvm(1 << 16, 512).with_completion_delay(0, 6).with_reorder(true);
        let rig = Rig::new(config);
        let mut pair = rig.controller.create_queue_pair(depth).unwrap();
        let pool = nvme_driver::dma::DmaPool::new(rig.controller.transport(), 4096, 64).unwrap();
        let slots = u64::from(depth) - 1;
        let total = 3000u64;
        let (mut submitted, mut completed) = (0u64, 0u64);
        let mut seen = HashSet::new();
        let mut polls = 0u64;
        while completed < total {
            while submitted < total && pair.in_flight() < slots as usize {
                let request = rig.ns.read((submitted % 1000) * 8, IoBuffer::new(pool.get().unwrap()), submitted);
                pair.submit(request.unwrap()).map_err(|(error, _)| error).unwrap();
                submitted += 1;
            }
            // Now and then the controller runs ahead of the host, posting
            // whatever is due before the next poll.
            for _ in 0..(polls * 7 + u64::from(depth)) % 4 {
                nvme_driver::Transport::tick(&*rig.sim);
            }
            pair.poll(|completion| {
                completion.status.unwrap();
                assert!(seen.insert(completion.token), "token {} twice", completion.token);
                drop(completion.buffer);
                completed += 1;
            });
            polls += 1;
            assert!(polls < 10_000_000, "depth {depth}: {completed} of {total} completed");
        }
        let stats = rig.sim.stats();
        assert_eq!(stats.completions_held_cq_full, 0, "depth {depth}: the CQ filled");
        let updates = pair.stats().cq_doorbell_updates;
        if depth >= 8 {
            assert!(updates * 2 < total, "depth {depth}: {updates} CQ head updates for {total} completions");
        }
        drop(pair);
        drop(rig);
    }
}

#[test]
fn a_fill_buffer_is_written_in_place_and_refused_for_reads() {
    use nvme_driver::dma::{DmaPool, FillBuffer};
    let mut rig = Rig::new(SimConfig::nvm(1 << 16, 512));
    let pool = DmaPool::new_device_reads(rig.controller.transport(), 8192, 2).unwrap();
    assert!(!pool.device_writes());
    // Filled through a plain slice, written with no copy.
    let data = pattern(5, 8192);
    let mut fill = pool.get_fill().unwrap();
    fill.copy_from_slice(&data);
    let request = rig.ns.write(64, IoBuffer::new(fill.into_dma()), false, 1).unwrap();
    rig.status(request).unwrap();
    assert_eq!(rig.read(64, 8192).unwrap(), data);

    // A read into it is refused before it reaches the device...
    let fill = pool.get_fill().unwrap();
    let iova = fill.iova();
    let request = rig.ns.read(64, IoBuffer::new(fill.into_dma()), 2).unwrap();
    match rig.pair.submit(request) {
        Err((nvme_driver::queue::SubmitError::DeviceReadOnly, _)) => {}
        other => panic!("expected DeviceReadOnly, got {:?}", other.map_err(|(e, _)| e)),
    }
    // ...and a device that tried anyway would meet the IOMMU: Data
    // Transfer Error, nothing written.
    let errors = rig.sim.stats().dma_errors;
    // SAFETY: the memory is the pool's, mapped until the pool drops; the
    // host does not touch it while the command runs.
    let done = unsafe { rig.pair.execute_raw(nvm::read(1, 64, 16), iova, 8192, Duration::from_secs(2)) }.unwrap();
    assert_eq!(code(sim_support::device(done.status)), StatusCode::Generic(GenericStatus::DataTransferError));
    assert_eq!(rig.sim.stats().dma_errors, errors + 1);

    // A pool the device writes lends no fill buffers.
    assert!(rig.pool.get_fill().is_none());
    assert!(FillBuffer::new(rig.pool.get().unwrap()).is_err());
}

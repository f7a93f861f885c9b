//! Namespaces formatted with metadata in a separate buffer, as QEMU 7.2's
//! `nvme-ns` with `ms=N,mset=0,pi=0`: what Identify reports, and how each
//! command moves, keeps or clears a block's metadata.

use super::*;
use crate::cmd::nvm::{CopySourceRange, CopySourceRangeFormat2, DsmAttributes, DsmRange, COPY_DESCRIPTOR_FORMAT_2};
use crate::cmd::zns::{self, ZoneSendAction};
use crate::spec::features::{HostBehaviorSupport, HOST_BEHAVIOR_SUPPORT_SIZE};
use crate::spec::identify::CopyFormats;

/// Pages of host memory: the admin queues (0, 1), the I/O CQ (2) and SQ
/// (3), then buffers.
const PAGES: usize = 72;
/// Where written data comes from (up to 28 pages).
const DATA_PAGE: usize = 4;
/// Where read data goes (up to 28 pages).
const READ_PAGE: usize = 32;
/// Metadata buffers (up to 10 pages).
const METADATA_PAGE: usize = 60;
/// PRP lists of transfers over two pages, and Copy and Dataset Management
/// descriptors.
const LIST_PAGE: usize = 70;
const DESCRIPTOR_PAGE: usize = 71;

/// Byte offset of page `page` in host memory.
fn at(page: usize) -> usize {
    page * PAGE_SIZE
}

/// `len` bytes that differ from one `seed` to another and along the way.
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|index| (index as u8).wrapping_mul(31).wrapping_add(seed) ^ (index >> 8) as u8).collect()
}

/// A host with I/O queue pair 1 on an enabled controller.
struct IoHost {
    host: Host,
    sq: RawSq,
    cq: RawCq,
    cid: u16,
}

impl IoHost {
    fn new(config: SimConfig) -> Self {
        let mut host = Host::enabled(config, PAGES);
        host.admin_status(admin::create_io_cq(1, 16, host.page(2), true, false, 0)).unwrap();
        host.admin_status(admin::create_io_sq(1, 16, host.page(3), 1, 0)).unwrap();
        let sq = RawSq { qid: 1, page: 3, size: 16, tail: 0 };
        let cq = RawCq { qid: 1, page: 2, size: 16, head: 0, phase: true };
        IoHost { host, sq, cq, cid: 0 }
    }

    fn sim(&self) -> &Simulator {
        &self.host.sim
    }

    /// Runs one I/O command and returns its completion.
    fn run(&mut self, command: Command) -> Completion {
        self.cid = self.cid.wrapping_add(1);
        self.host.push(&mut self.sq, Command { cid: self.cid, ..command });
        self.host.ring(&self.sq);
        let mut done = self.host.reap(&mut self.cq);
        assert_eq!(done.len(), 1, "one completion");
        done.remove(0)
    }

    fn status(&mut self, command: Command) -> Result<(), Status> {
        let completion = self.run(command);
        if completion.is_success() {
            Ok(())
        } else {
            Err(completion.status())
        }
    }

    /// The IOVA of host memory byte `offset`.
    fn iova(&self, offset: usize) -> u64 {
        self.host.iova + offset as u64
    }

    fn put(&self, offset: usize, bytes: &[u8]) {
        self.host.memory.all().put(offset, bytes);
    }

    fn take(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut bytes = vec![0u8; len];
        self.host.memory.all().take(offset, &mut bytes);
        bytes
    }

    /// `command` with its data pointer at `len` bytes from page `page` (a
    /// PRP list in [`LIST_PAGE`] when it needs one) and MPTR `mptr`.
    fn with_buffers(&self, command: Command, page: usize, len: usize, mptr: u64) -> Command {
        let pages = len.div_ceil(PAGE_SIZE);
        let prp2 = match pages {
            0 | 1 => 0,
            2 => self.host.page(page + 1),
            _ => {
                for index in 1..pages {
                    self.put(at(LIST_PAGE) + (index - 1) * 8, &self.host.page(page + index).to_le_bytes());
                }
                self.host.page(LIST_PAGE)
            }
        };
        Command { prp1: self.host.page(page), prp2, mptr, ..command }
    }

    /// Writes `data` and `metadata` (through MPTR at the start of
    /// [`METADATA_PAGE`]) to `blocks` blocks at `slba`.
    fn write(&mut self, nsid: u32, slba: u64, blocks: u32, data: &[u8], metadata: &[u8]) {
        self.put(at(DATA_PAGE), data);
        self.put(at(METADATA_PAGE), metadata);
        let mptr = self.iova(at(METADATA_PAGE));
        let write = self.with_buffers(nvm::write(nsid, slba, blocks, false), DATA_PAGE, data.len(), mptr);
        self.status(write).unwrap();
    }

    /// `blocks` blocks' metadata from `slba`, as the simulator holds it.
    fn metadata(&self, nsid: u32, slba: u64, blocks: u64) -> Vec<u8> {
        (slba..slba + blocks).flat_map(|lba| self.sim().read_metadata(nsid, lba)).collect()
    }
}

/// Namespaces of 512 and 4096 bytes, with and without metadata, the last
/// one zoned.
fn metadata_namespaces() -> SimConfig {
    SimConfig::empty()
        .with_namespace(NamespaceConfig::nvm(64, 512))
        .with_namespace(NamespaceConfig::nvm(64, 4096))
        .with_namespace(NamespaceConfig::nvm(64, 512).metadata_bytes(8))
        .with_namespace(NamespaceConfig::nvm(64, 4096).metadata_bytes(16))
        .with_namespace(NamespaceConfig::zoned(64, 4096, 16, 12).metadata_bytes(64))
}

#[test]
fn identify_lists_qemu_7_2s_formats_and_selects_the_configured_one() {
    use crate::spec::identify::{IdentifyNamespace, LbaFormat, CSI_ZONED};
    use crate::spec::zns::IdentifyNamespaceZns;
    let mut host = Host::enabled(metadata_namespaces(), 4);
    let read_page = |host: &Host| {
        let mut page = vec![0u8; PAGE_SIZE];
        host.memory.all().take(2 * PAGE_SIZE, &mut page);
        page
    };
    // QEMU 7.2's table (hw/nvme/ns.c, `nvme_ns_init`): 512 and 4096 bytes,
    // each with 0, 8, 16 and 64 bytes of metadata.
    let formats: Vec<LbaFormat> = [(9, 0), (9, 8), (9, 16), (9, 64), (12, 0), (12, 8), (12, 16), (12, 64)]
        .into_iter()
        .map(|(lbads, ms)| LbaFormat { ms, lbads, rp: 0 })
        .collect();
    for (nsid, index, block_size) in [(1, 0, 512), (2, 4, 4096), (3, 1, 512), (4, 6, 4096), (5, 7, 4096)] {
        host.admin_status(admin::identify_namespace(nsid, host.page(2))).unwrap();
        let identify = IdentifyNamespace::parse(&read_page(&host)).unwrap();
        assert_eq!(identify.lbaf, formats, "namespace {nsid}");
        assert_eq!(identify.current_lba_format_index(), index, "namespace {nsid}");
        assert_eq!(identify.current_lba_format().unwrap(), formats[index]);
        assert_eq!(identify.block_size().unwrap(), block_size);
        assert!(!identify.metadata_at_end(), "metadata in a separate buffer (FLBAS bit 4 clear)");
        assert_eq!(identify.mc, 0b10, "MC: separate buffer only");
        assert_eq!((identify.dpc, identify.dps), (0, 0), "no protection information");
    }
    // The zoned namespace's zone size, in each format's own blocks.
    host.admin_status(admin::identify_csi_namespace(5, CSI_ZONED, host.page(2))).unwrap();
    let zns = IdentifyNamespaceZns::parse(&read_page(&host)).unwrap();
    assert_eq!(zns.zone_size_blocks(7).unwrap(), 16);
    assert_eq!(zns.zone_size_blocks(3).unwrap(), 16 * 8, "the same bytes in 512-byte blocks");
}

#[test]
fn the_driver_brings_up_namespaces_with_metadata() {
    let sim = Simulator::new(metadata_namespaces());
    let options = crate::ControllerOptions {
        admin_timeout: std::time::Duration::from_secs(2),
        shutdown_timeout: std::time::Duration::from_secs(1),
        io_queue_pairs: 2,
        ..crate::ControllerOptions::default()
    };
    let controller = crate::Controller::init(sim.clone(), options).unwrap();
    let namespaces = controller.namespaces();
    let geometry: Vec<(u32, u64)> = namespaces.iter().map(|ns| (ns.block_size, ns.capacity_blocks)).collect();
    assert_eq!(geometry, vec![(512, 64), (4096, 64), (512, 64), (4096, 64), (4096, 64)]);
    assert_eq!(namespaces[4].zoned.as_ref().map(|zoned| zoned.zone_size_blocks), Some(16));
    assert_eq!(namespaces[3].identify.current_lba_format().unwrap().ms, 16);
}

#[test]
fn metadata_round_trips_through_mptr() {
    let config = SimConfig::empty()
        .with_namespace(NamespaceConfig::nvm(1024, 512).metadata_bytes(64))
        .with_namespace(NamespaceConfig::nvm(64, 4096));
    let mut io = IoHost::new(config);
    // 200 blocks across a chunk boundary (128 blocks per chunk): 25 pages
    // of data through a PRP list, and 12,800 bytes of metadata in one
    // buffer over four pages, at a dword- but not page-aligned address.
    let (data, metadata) = (pattern(1, 200 * 512), pattern(2, 200 * 64));
    io.put(at(DATA_PAGE), &data);
    io.put(at(METADATA_PAGE) + 4, &metadata);
    let mptr = io.iova(at(METADATA_PAGE) + 4);
    let write = io.with_buffers(nvm::write(1, 100, 200, false), DATA_PAGE, data.len(), mptr);
    io.status(write).unwrap();
    assert_eq!(io.metadata(1, 100, 200), metadata);
    assert_eq!(io.sim().read_metadata(1, 99), vec![0; 64], "no metadata before the write");
    let back = at(METADATA_PAGE) + 5 * PAGE_SIZE + 12;
    let read = io.with_buffers(nvm::read(1, 100, 200), READ_PAGE, data.len(), io.iova(back));
    io.status(read).unwrap();
    assert_eq!(io.take(at(READ_PAGE), data.len()), data);
    assert_eq!(io.take(back, metadata.len()), metadata);
    assert_eq!(io.take(back + metadata.len(), 4), vec![0; 4], "nothing past the buffer");
    // MPTR 0 moves no metadata, as QEMU 7.2's `nvme_rw_cb`: a write keeps
    // the blocks' metadata.
    io.put(at(DATA_PAGE), &[0x5A; 512]);
    io.status(io.with_buffers(nvm::write(1, 150, 1, true), DATA_PAGE, 512, 0)).unwrap();
    assert_eq!(io.sim().read_block(1, 150), vec![0x5A; 512]);
    assert_eq!(io.sim().read_metadata(1, 150), metadata[50 * 64..51 * 64]);
    assert_eq!(io.sim().durable_metadata(1, 150), metadata[50 * 64..51 * 64], "FUA moved it with the data");
    io.status(io.with_buffers(nvm::read(1, 150, 1), READ_PAGE, 512, 0)).unwrap();
    assert_eq!(io.take(at(READ_PAGE), 512), vec![0x5A; 512]);
    // Compare compares the data only, whatever MPTR holds.
    io.put(at(METADATA_PAGE), &[0xFF; 64]);
    let compare = io.with_buffers(nvm::compare(1, 150, 1), DATA_PAGE, 512, io.iova(at(METADATA_PAGE)));
    io.status(compare).unwrap();
    // A namespace without metadata ignores MPTR, even a misaligned one.
    io.status(io.with_buffers(nvm::write(2, 0, 1, false), DATA_PAGE, 4096, 0x3)).unwrap();
    assert_eq!(io.sim().read_metadata(2, 0), Vec::<u8>::new());
}

#[test]
fn a_bad_mptr_fails_before_anything_moves() {
    let config = SimConfig::empty()
        .with_namespace(NamespaceConfig::nvm(64, 512).metadata_bytes(8))
        .with_namespace(NamespaceConfig::zoned(64, 4096, 16, 16).metadata_bytes(16));
    let mut io = IoHost::new(config);
    io.write(1, 0, 4, &[0x11; 2048], &[0x22; 32]);
    io.put(at(DATA_PAGE), &[0xAB; 2048]);
    io.put(at(READ_PAGE), &[0xEE; 2048]);
    let metadata = io.iova(at(METADATA_PAGE));
    // The last 16 bytes of the mapping, then its guard page: too short for
    // the 32 bytes of each command below.
    let at_the_end = io.iova(PAGES * PAGE_SIZE - 16);
    let dma_errors = io.sim().stats().dma_errors;
    for (mptr, code, dnr) in [
        (metadata + 2, generic(GenericStatus::PrpOffsetInvalid), true),
        (0x2000, generic(GenericStatus::DataTransferError), false),
        (at_the_end, generic(GenericStatus::DataTransferError), false),
    ] {
        let write = io.with_buffers(nvm::write(1, 0, 4, true), DATA_PAGE, 2048, mptr);
        let status = io.status(write).unwrap_err();
        assert_eq!((status.code(), status.dnr), (code, dnr), "write with MPTR {mptr:#x}");
        let read = io.with_buffers(nvm::read(1, 0, 4), READ_PAGE, 2048, mptr);
        assert_eq!(io.status(read).unwrap_err().code(), code, "read with MPTR {mptr:#x}");
        let append = io.with_buffers(zns::zone_append(2, 0, 2, false), DATA_PAGE, 2 * 4096, mptr);
        assert_eq!(io.status(append).unwrap_err().code(), code, "zone append with MPTR {mptr:#x}");
    }
    assert_eq!(io.sim().stats().dma_errors, dma_errors + 6, "unmapped MPTRs count as DMA errors");
    assert_eq!(io.sim().read_block(1, 3), vec![0x11; 512], "no write landed");
    assert_eq!(io.metadata(1, 0, 4), vec![0x22; 32]);
    assert_eq!(io.take(at(READ_PAGE), 2048), vec![0xEE; 2048], "no read landed");
    assert_eq!(io.sim().zones(2)[0].wp, 0, "no append moved the write pointer");
}

#[test]
fn zone_append_puts_metadata_where_the_blocks_land() {
    let namespace = NamespaceConfig::zoned(64, 4096, 16, 16).metadata_bytes(16);
    let mut io = IoHost::new(SimConfig::empty().with_namespace(namespace));
    let metadata = pattern(3, 6 * 16);
    let mut landed = Vec::new();
    for (zslba, blocks, range) in [(0, 2, 0..32), (0, 3, 32..80), (16, 1, 80..96)] {
        io.put(at(METADATA_PAGE), &metadata[range]);
        let mptr = io.iova(at(METADATA_PAGE));
        let append =
            io.with_buffers(zns::zone_append(1, zslba, blocks, false), DATA_PAGE, blocks as usize * 4096, mptr);
        let completion = io.run(append);
        assert!(completion.is_success());
        landed.push(u64::from(completion.dw0) | u64::from(completion.dw1) << 32);
    }
    assert_eq!(landed, vec![0, 2, 16]);
    assert_eq!(io.metadata(1, 0, 5), metadata[..80]);
    assert_eq!(io.metadata(1, 16, 1), metadata[80..]);
    // Read back across both appends.
    let back = at(METADATA_PAGE) + PAGE_SIZE;
    io.status(io.with_buffers(nvm::read(1, 0, 5), READ_PAGE, 5 * 4096, io.iova(back))).unwrap();
    assert_eq!(io.take(back, 80), metadata[..80]);
}

#[test]
fn copy_moves_metadata_with_the_data() {
    let mut io = IoHost::new(SimConfig::empty().with_namespace(NamespaceConfig::nvm(256, 512).metadata_bytes(16)));
    let (data, metadata) = (pattern(4, 6 * 512), pattern(5, 6 * 16));
    io.write(1, 0, 4, &data[..4 * 512], &metadata[..64]);
    io.write(1, 100, 2, &data[4 * 512..], &metadata[64..]);
    let copy = |io: &mut IoHost, sdlba: u64, ranges: &[(u64, u32)]| {
        for (index, &(slba, blocks)) in ranges.iter().enumerate() {
            io.put(at(DESCRIPTOR_PAGE) + index * 32, &CopySourceRange::new(slba, blocks).to_bytes());
        }
        let command = nvm::copy(1, sdlba, ranges.len() as u16, false);
        io.status(Command { prp1: io.host.page(DESCRIPTOR_PAGE), ..command }).unwrap();
    };
    copy(&mut io, 50, &[(0, 4), (100, 2)]);
    assert_eq!(io.metadata(1, 50, 6), metadata);
    assert_eq!(io.sim().read_block(1, 54), data[4 * 512..5 * 512]);
    // Overlapping source and destination: the sources as they were.
    copy(&mut io, 53, &[(50, 6)]);
    assert_eq!(io.metadata(1, 50, 3), metadata[..48]);
    assert_eq!(io.metadata(1, 53, 6), metadata);
    // A source never written copies zeroes over the metadata too.
    copy(&mut io, 50, &[(200, 1)]);
    assert_eq!(io.sim().read_metadata(1, 50), vec![0; 16]);
}

#[test]
fn copy_across_namespaces_needs_the_host_enable_and_moves_metadata() {
    let config = SimConfig::empty()
        .with_namespace(NamespaceConfig::nvm(256, 512).metadata_bytes(16))
        .with_namespace(NamespaceConfig::nvm(256, 512).metadata_bytes(16))
        .with_namespace(NamespaceConfig::nvm(256, 512).metadata_bytes(8));
    let mut io = IoHost::new(config);
    let (data, metadata) = (pattern(6, 4 * 512), pattern(7, 4 * 16));
    io.write(1, 0, 4, &data, &metadata);
    let copy = |io: &mut IoHost, nsid: u32, sdlba: u64, ranges: &[(u32, u64, u32)]| {
        for (index, &(snsid, slba, blocks)) in ranges.iter().enumerate() {
            io.put(at(DESCRIPTOR_PAGE) + index * 32, &CopySourceRangeFormat2::new(snsid, slba, blocks).to_bytes());
        }
        let command = nvm::copy_with_format(nsid, sdlba, ranges.len() as u16, COPY_DESCRIPTOR_FORMAT_2, false);
        io.status(Command { prp1: io.host.page(DESCRIPTOR_PAGE), ..command })
    };
    // Host Behavior Support as the controller holds it: all zeroes.
    let read_back = |io: &mut IoHost| {
        io.put(at(READ_PAGE), &[0xFF; HOST_BEHAVIOR_SUPPORT_SIZE]);
        io.host.admin_status(admin::get_host_behavior_support(io.host.page(READ_PAGE))).unwrap();
        HostBehaviorSupport::parse(&io.take(at(READ_PAGE), HOST_BEHAVIOR_SUPPORT_SIZE)).unwrap()
    };
    let set = |io: &mut IoHost, value: HostBehaviorSupport| {
        io.put(at(DATA_PAGE), &value.to_bytes());
        io.host.admin_status(admin::set_host_behavior_support(io.host.page(DATA_PAGE)))
    };
    assert_eq!(read_back(&mut io), HostBehaviorSupport::default());
    // Offered (OCFS 0b101) but not enabled: as if not supported.
    assert_eq!(copy(&mut io, 2, 10, &[(1, 0, 4)]).unwrap_err().code(), generic(GenericStatus::InvalidFieldInCommand));
    // CDFE enables formats 2h and 3h only, and only those offered.
    for refused in [CopyFormats::FORMAT_0, CopyFormats::FORMAT_3] {
        let status = set(&mut io, HostBehaviorSupport::default().with_cdfe(refused)).unwrap_err();
        assert_eq!(status.code(), generic(GenericStatus::InvalidFieldInCommand), "{refused:?}");
    }
    let enabled = HostBehaviorSupport::default().with_cdfe(CopyFormats::FORMAT_2);
    set(&mut io, enabled).unwrap();
    assert_eq!(read_back(&mut io), enabled);
    let saved = Command { cdw10: 1 << 31 | u32::from(admin::FID_HOST_BEHAVIOR_SUPPORT), ..Command::new(0) };
    let saved = Command { opcode: opcode::admin::SET_FEATURES, prp1: io.host.page(DATA_PAGE), ..saved };
    let status = io.host.admin_status(saved).unwrap_err();
    assert_eq!(status.code(), specific(CommandSpecificStatus::FeatureIdentifierNotSaveable));

    // Namespace 1 to namespace 2, metadata with the data.
    copy(&mut io, 2, 10, &[(1, 0, 4)]).unwrap();
    assert_eq!(io.metadata(2, 10, 4), metadata);
    assert_eq!(io.sim().read_block(2, 13), data[3 * 512..]);
    // Another metadata size: Incompatible Namespace or Format, nothing
    // written.
    let status = copy(&mut io, 3, 10, &[(1, 0, 4)]).unwrap_err();
    assert_eq!(status.code(), specific(CommandSpecificStatus::IncompatibleNamespaceOrFormat));
    assert_eq!(io.metadata(3, 10, 1), vec![0; 8]);
    // One bad range fails the command: nothing of the good one lands.
    let status = copy(&mut io, 2, 100, &[(1, 0, 2), (0, 0, 2)]).unwrap_err();
    assert_eq!(status.code(), generic(GenericStatus::InvalidNamespaceOrFormat));
    assert_eq!(io.metadata(2, 100, 1), vec![0; 16]);
    // A source range of the destination namespace over the destination.
    let status = copy(&mut io, 2, 12, &[(1, 0, 1), (2, 10, 4)]).unwrap_err();
    assert_eq!(status.code(), specific(CommandSpecificStatus::OverlappingIoRange));

    // A controller reset clears the feature (NVMe Base 2.1 §5.1.25.1.14).
    io.host.sim.write32(reg::CC, 0);
    // The admin queues start again empty, their old entries gone.
    io.put(at(1), &[0; PAGE_SIZE]);
    (io.host.admin_sq.tail, io.host.admin_cq.head, io.host.admin_cq.phase) = (0, 0, true);
    io.host.sim.write32(reg::CC, io.host.cc().0);
    assert_eq!(read_back(&mut io), HostBehaviorSupport::default());
}

#[test]
fn write_zeroes_deallocate_and_zone_reset_clear_metadata() {
    let config = SimConfig::empty()
        .with_namespace(NamespaceConfig::nvm(256, 512).metadata_bytes(8))
        .with_namespace(NamespaceConfig::nvm(256, 512).metadata_bytes(8).deallocate_keeps_data())
        .with_namespace(NamespaceConfig::zoned(64, 4096, 16, 16).metadata_bytes(64));
    let mut io = IoHost::new(config);
    let deallocate = |io: &mut IoHost, nsid: u32, slba: u64, blocks: u32| {
        io.put(at(DESCRIPTOR_PAGE), &DsmRange::new(slba, blocks).to_bytes());
        let command = nvm::dataset_management(nsid, 1, DsmAttributes::DEALLOCATE);
        io.status(Command { prp1: io.host.page(DESCRIPTOR_PAGE), ..command }).unwrap();
    };
    for nsid in [1, 2] {
        io.write(nsid, 0, 8, &[0x33; 8 * 512], &[0x44; 64]);
    }
    // Write Zeroes (QEMU 7.2's `nvme_rw_cb` zeroes the metadata too), with
    // and without the cache.
    io.status(nvm::write_zeroes(1, 2, 2, false, false)).unwrap();
    io.status(nvm::write_zeroes(1, 6, 1, true, true)).unwrap();
    let mut expected = vec![0x44; 64];
    expected[16..32].fill(0);
    expected[48..56].fill(0);
    assert_eq!(io.metadata(1, 0, 8), expected);
    assert_eq!(io.sim().durable_metadata(1, 6), vec![0; 8]);
    // Deallocate zeroes it where deallocated blocks read zeroes (QEMU's
    // `nvme_dsm_md_cb`), and keeps it where they keep their data.
    deallocate(&mut io, 1, 0, 1);
    deallocate(&mut io, 2, 0, 1);
    assert_eq!((io.sim().read_block(1, 0), io.sim().read_metadata(1, 0)), (vec![0; 512], vec![0; 8]));
    assert_eq!((io.sim().read_block(2, 0), io.sim().read_metadata(2, 0)), (vec![0x33; 512], vec![0x44; 8]));
    // Zone Reset clears the zone's metadata, and only that zone's.
    io.write(3, 0, 2, &[0x55; 2 * 4096], &[0x66; 128]);
    io.write(3, 16, 1, &[0x55; 4096], &[0x77; 64]);
    io.status(zns::zone_management_send(3, 0, ZoneSendAction::Reset, false)).unwrap();
    assert_eq!(io.metadata(3, 0, 2), vec![0; 128]);
    assert_eq!(io.sim().read_metadata(3, 16), vec![0x77; 64]);
}

#[test]
fn a_power_cut_keeps_or_loses_each_block_with_its_metadata() {
    let config = SimConfig::empty()
        .with_namespace(NamespaceConfig::nvm(256, 512).metadata_bytes(8))
        .with_namespace(NamespaceConfig::zoned(256, 512, 128, 128).metadata_bytes(8))
        .with_seed(7);
    let mut io = IoHost::new(config);
    assert!(io.sim().dirty_blocks(1) == 0 && SimConfig::default().volatile_write_cache);
    // Old versions on the media, new ones in the cache (64 blocks a
    // command), and a zone written through the cache only.
    let old = |io: &mut IoHost, slba: u64| {
        io.put(at(DATA_PAGE), &[0x11; 64 * 512]);
        io.put(at(METADATA_PAGE), &[0x1A; 64 * 8]);
        let mptr = io.iova(at(METADATA_PAGE));
        io.status(io.with_buffers(nvm::write(1, slba, 64, true), DATA_PAGE, 64 * 512, mptr)).unwrap();
    };
    for slba in (0..256).step_by(64) {
        old(&mut io, slba);
        io.write(1, slba, 64, &[0x22; 64 * 512], &[0x2B; 64 * 8]);
    }
    io.write(2, 0, 100, &[0x33; 100 * 512], &[0x3C; 100 * 8]);
    assert_eq!((io.sim().dirty_blocks(1), io.sim().dirty_blocks(2)), (256, 100));
    let report = io.sim().power_cut();
    assert!(report.kept_blocks > 0 && report.lost_blocks > 0, "the seed keeps some and loses some");
    for lba in 0..256 {
        let expected = if report.is_lost(1, lba) { (0x11, 0x1A) } else { (0x22, 0x2B) };
        assert_eq!(io.sim().read_block(1, lba), vec![expected.0; 512], "data of block {lba}");
        assert_eq!(io.sim().read_metadata(1, lba), vec![expected.1; 8], "metadata of block {lba}");
    }
    // In the zone, a prefix persists, data and metadata; past it both read
    // zeroes.
    let wp = io.sim().zones(2)[0].wp;
    assert!(wp < 100, "the zone lost its tail");
    for lba in 0..100 {
        let expected = if lba < wp { (0x33, 0x3C) } else { (0, 0) };
        assert_eq!(io.sim().durable_block(2, lba), vec![expected.0; 512], "data of zoned block {lba}");
        assert_eq!(io.sim().durable_metadata(2, lba), vec![expected.1; 8], "metadata of zoned block {lba}");
    }
}

#[test]
fn a_synthetic_namespace_keeps_metadata_exactly() {
    let namespace = NamespaceConfig::nvm(1 << 30, 4096).synthetic_data().metadata_bytes(64);
    let mut io = IoHost::new(SimConfig { volatile_write_cache: false, ..SimConfig::empty() }.with_namespace(namespace));
    let mut data = vec![0u8; 8 * 4096];
    for (index, block) in data.chunks_exact_mut(4096).enumerate() {
        synthetic::fill(block, 9000 + index as u64);
    }
    let metadata = pattern(6, 8 * 64);
    let lba = (1 << 30) - 8;
    io.write(1, lba, 8, &data, &metadata);
    // One dense chunk of metadata (4096 blocks of 64 bytes) and a run of
    // seeds; no data block is stored.
    assert!(io.sim().storage_bytes(1) < 4096 * 64 + 4096, "seeds and metadata, not blocks");
    // A write without metadata keeps it.
    io.status(io.with_buffers(nvm::write(1, lba + 7, 1, false), DATA_PAGE + 7, 4096, 0)).unwrap();
    let back = at(METADATA_PAGE) + PAGE_SIZE;
    io.status(io.with_buffers(nvm::read(1, lba, 8), READ_PAGE, data.len(), io.iova(back))).unwrap();
    assert_eq!(io.take(at(READ_PAGE), data.len()), data);
    assert_eq!(io.take(back, metadata.len()), metadata);
    assert_eq!(io.metadata(1, lba, 8), metadata);
}

#[test]
fn qemu_7_2s_truncation_moves_only_the_unaligned_tail_when_asked_to() {
    // 512-byte LBAs with 8 bytes each: 65 blocks carry 520 bytes, of which
    // QEMU 7.2 moves the first 8; 64 blocks carry 512, moved whole.
    let namespace = NamespaceConfig::nvm(256, 512).metadata_bytes(8);
    for truncation in [false, true] {
        let config =
            SimConfig { metadata_dma_truncation: truncation, ..SimConfig::empty() }.with_namespace(namespace.clone());
        let mut io = IoHost::new(config);
        let old = pattern(1, 65 * 8);
        io.write(1, 0, 64, &vec![0u8; 64 * 512], &old[..512]);
        io.write(1, 64, 1, &[0u8; 512], &old[512..]);
        let new = pattern(2, 65 * 8);
        io.write(1, 0, 65, &vec![7u8; 65 * 512], &new);
        let expected = if truncation { [&new[..8], &old[8..]].concat() } else { new.clone() };
        assert_eq!(io.metadata(1, 0, 65), expected, "write, truncation {truncation}");
        // A read of 65 blocks fills the host buffer's first 8 bytes only.
        io.put(at(METADATA_PAGE), &[0xEE; 65 * 8]);
        let mptr = io.iova(at(METADATA_PAGE));
        let read = io.with_buffers(nvm::read(1, 0, 65), READ_PAGE, 65 * 512, mptr);
        io.status(read).unwrap();
        let back = io.take(at(METADATA_PAGE), 65 * 8);
        let wanted = if truncation { [&expected[..8], &[0xEE; 512][..]].concat() } else { expected };
        assert_eq!(back, wanted, "read, truncation {truncation}");
    }
}

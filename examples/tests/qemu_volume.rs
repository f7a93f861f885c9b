//! QEMU integration tests for the zoned allocator. Each test boots one VM
//! with the controllers its scenarios need and runs `volume-check`
//! (hack/guest) once per scenario; the guest builds the volume, drives it
//! and checks what it reads back, printing one line per passed check,
//! which the tests here require by name. Scenarios share a VM (a boot costs
//! seconds under TCG) but not a namespace, and one failing scenario does
//! not stop the others, so a failure report shows them all.
//!
//! QEMU forgets zone state when it exits, so reopening is tested within
//! one boot (a second process); persistence across power cuts is the
//! simulator's job (`allocator/tests/sim_crash.rs`).
//!
//! Some scenarios ask the host to damage a backing image while the guest
//! waits (lines `volume-check: corrupt-me`, `overwrite-me`, `restore-me`;
//! [`Vm::on_line`]).

use nvme_testkit::scenarios::{garbage, MetadataPhase, SavedRanges, Scenario as Shared};
use std::collections::hash_map::DefaultHasher;
use std::fs::{self, File};
use std::hash::Hasher;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vm_rig::{Controller, Outcome, Vm, GUEST_BDFS};

const MIB: u64 = 1 << 20;

/// The controllers' addresses in the guest, in the order they are given.
const FIRST: &str = GUEST_BDFS[0];
const SECOND: &str = GUEST_BDFS[1];
const THIRD: &str = GUEST_BDFS[2];
const FOURTH: &str = GUEST_BDFS[3];

/// How long one `volume-check` run may take in the guest (each takes a
/// few seconds). The guest's `timeout` ends a run that hangs, so the VM
/// still reports what every scenario printed.
const RUN_LIMIT_S: u64 = 120;

/// Boot and shutdown, beyond the runs' limits.
const BOOT_LIMIT_S: u64 = 60;

/// One guest command line and what it must print: per label (how
/// volume-check names a scenario or phase), the checks it must pass.
struct Scenario<'a> {
    /// `volume-check` arguments, one run each, the next only if the last
    /// succeeded.
    runs: Vec<String>,
    expect: Vec<(&'a str, Vec<&'a str>)>,
}

impl<'a> Scenario<'a> {
    /// `volume-check ARGS` running `shared`, one of the scenarios the
    /// simulator runs too, with the checks it names.
    fn shared(shared: Shared, args: String) -> Self {
        Scenario { runs: vec![args], expect: vec![(shared.label(), shared.checks())] }
    }

    fn command(&self) -> String {
        let runs: Vec<String> =
            self.runs.iter().map(|args| format!("timeout -s KILL {RUN_LIMIT_S} volume-check {args}")).collect();
        runs.join(" && ")
    }
}

/// Runs every scenario in one boot (each runs even when an earlier one
/// fails) and requires status 0 and, per label, its final
/// `volume-check: LABEL ok` and every `volume-check: LABEL CHECK: ok (`.
fn run(vm: Vm, scenarios: &[Scenario<'_>]) -> Outcome {
    let mut script = String::from("status=0\n");
    for scenario in scenarios {
        let command = scenario.command();
        script += &format!("{{ {command}; }} || {{ echo \"{command}: exit status $?\"; status=1; }}\n");
    }
    script += "exit $status\n";
    let runs = scenarios.iter().map(|s| s.runs.len() as u64).sum::<u64>();
    let outcome = vm
        .timeout(Duration::from_secs(BOOT_LIMIT_S + runs * RUN_LIMIT_S))
        .run(&["sh", "-c", &script])
        .unwrap_or_else(|e| panic!("VM run failed: {e}"));
    let missing: Vec<String> = scenarios
        .iter()
        .flat_map(|s| &s.expect)
        .flat_map(|(label, checks)| outcome.missing_checks("volume-check", label, checks))
        .collect();
    assert!(missing.is_empty() && outcome.status == 0, "missing lines {missing:#?}\n{}", outcome.report());
    eprintln!("{:.1} s in the VM:\n{}", outcome.elapsed.as_secs_f64(), outcome.output);
    outcome
}

/// The detail of a passed check line.
fn detail<'a>(outcome: &'a Outcome, label: &str, check: &str) -> &'a str {
    outcome.detail("volume-check", label, check)
}

/// Single-copy volumes on a ZNS namespace, a conventional one (software
/// zones), ZNS with zone capacity below zone size, and ZNS with 4 KiB
/// LBAs: a few hundred extents on two streams, frees, reclaim until idle,
/// everything read back.
#[test]
fn zns_conventional_zone_capacity_and_4k_lbas() {
    let vm = Vm::new()
        .controller(Controller::zns(512 * MIB, 16 * MIB))
        .controller(Controller::nvme(512 * MIB))
        .controller(Controller::zns(256 * MIB, 16 * MIB).zone_capacity(12 * MIB))
        .controller(Controller::zns(256 * MIB, 16 * MIB).lba(4096));
    let outcome = run(
        vm,
        &[
            Scenario::shared(Shared::Zns, format!("zns --pci {FIRST}")),
            Scenario::shared(Shared::Conventional, format!("conventional --pci {SECOND}")),
            Scenario::shared(Shared::Zcap, format!("zcap --pci {THIRD}")),
            Scenario::shared(Shared::FourK, format!("4k --pci {FOURTH}")),
        ],
    );
    assert!(detail(&outcome, "zns", "geometry").starts_with("ZNS, 512-byte LBAs, 512 MiB, 32 zones of 16 MiB"));
    assert!(detail(&outcome, "conventional", "geometry").starts_with("conventional, 512-byte LBAs"));
    assert!(detail(&outcome, "4k", "geometry").starts_with("ZNS, 4096-byte LBAs"));
    // Zones of 4096 blocks with a capacity of 3072; a volume with checksum
    // areas (the format's choice without metadata) keeps the last of those
    // for the area, and takes data in a whole number of its data unit,
    // which gives up at most 1/256 of it.
    let capacity = detail(&outcome, "zcap", "capacity");
    let data = match detail(&outcome, "zcap", "format").contains("checksums in zone checksum areas") {
        true => zoned_allocator::area::data_blocks(3072),
        false => 3072,
    };
    let unit: u32 = capacity
        .split("units of ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no data unit in {capacity}"));
    assert!(unit.is_power_of_two() && data % unit <= data / 256, "{capacity}");
    let usable = data - data % unit;
    assert!(capacity.starts_with(&format!("zones of 4096 blocks with {usable} usable")), "{capacity}");
}

/// `max-open=2,max-active=4`: two streams are refused at format, one
/// stream fills the volume to a clean NoSpace, and after frees and reclaim
/// it fills again. Reopening in a new process (same boot) rebuilds exactly
/// the committed state.
#[test]
fn zone_limits_and_reopening_in_a_new_process() {
    let vm = Vm::new()
        .controller(Controller::zns(256 * MIB, 16 * MIB).max_open(2).max_active(4))
        .controller(Controller::zns(256 * MIB, 16 * MIB));
    let outcome = run(
        vm,
        &[
            Scenario::shared(Shared::Limits, format!("limits --pci {FIRST}")),
            // Two processes in one boot: the second opens what the first
            // committed.
            Scenario {
                runs: vec![
                    format!("reopen --phase write --pci {SECOND}"),
                    format!("reopen --phase verify --pci {SECOND}"),
                ],
                expect: [Shared::ReopenWrite, Shared::ReopenVerify].map(|s| (s.label(), s.checks())).into(),
            },
        ],
    );
    let fill = detail(&outcome, "limits", "fill");
    assert!(fill.contains("then NoSpace"), "{fill}");
    let state = detail(&outcome, "reopen verify", "committed state");
    assert!(state.contains("40 uncommitted writes absent"), "{state}");
}

/// A scratch directory for backing images, removed on drop.
struct ImageDir(PathBuf);

impl ImageDir {
    fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
        ImageDir(path)
    }
}

impl Drop for ImageDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Inverts `len` bytes at `offset` of `image`, as a failing medium might.
/// QEMU's nvme device reads its backing file with `pread` through the host
/// page cache (the rig's drives use QEMU's default writeback cache, no
/// O_DIRECT), so the guest's next read sees the change.
fn flip_bytes(image: &Path, offset: u64, len: usize) -> Result<String, String> {
    let file = File::options().read(true).write(true).open(image).map_err(|e| format!("{}: {e}", image.display()))?;
    let mut bytes = vec![0u8; len];
    file.read_exact_at(&mut bytes, offset).map_err(|e| format!("reading {len} bytes at {offset}: {e}"))?;
    for byte in &mut bytes {
        *byte = !*byte;
    }
    file.write_all_at(&bytes, offset).map_err(|e| format!("writing {len} bytes at {offset}: {e}"))?;
    Ok(format!("flipped {len} bytes at {offset} of {}", image.display()))
}

/// A mirror across two ZNS controllers; then a mirror across a ZNS and a
/// conventional controller where the host flips bytes of one block of the
/// first copy in the ZNS controller's backing image, and the read returns
/// the original data from the other copy, reports the block, and
/// `rewrite_copy` repairs the copy.
#[test]
fn mirror_across_controllers_and_repair_after_host_corruption() {
    let images = ImageDir::new("qemu-volume-repair");
    let image = images.0.join("nvme0.img");
    let flipped: Arc<Mutex<Option<Result<String, String>>>> = Arc::default();
    let vm = {
        let flipped = Arc::clone(&flipped);
        Vm::new()
            .controller(Controller::zns(256 * MIB, 16 * MIB))
            .controller(Controller::nvme(256 * MIB))
            .controller(Controller::zns(256 * MIB, 16 * MIB))
            .images(&images.0)
            .on_line(flip_on_request(image, flipped))
    };
    let outcome = run(
        vm,
        &[
            Scenario::shared(Shared::Mirror, format!("mirror --pci {FIRST} --pci {THIRD}")),
            Scenario::shared(Shared::Repair, format!("repair --pci {FIRST} --pci {SECOND}")),
        ],
    );
    let flipped = flipped.lock().unwrap().clone();
    assert!(matches!(flipped, Some(Ok(_))), "the host did not flip the bytes: {flipped:?}");
    assert!(detail(&outcome, "mirror", "verify").contains("both copies"));
    let read = detail(&outcome, "repair", "read");
    assert!(read.contains("block 2 repaired"), "{read}");
}

/// What flips bytes of `image` when the guest prints `volume-check:
/// corrupt-me OFFSET LEN`, recording the outcome in `flipped`.
fn flip_on_request(image: PathBuf, flipped: Arc<Mutex<Option<Result<String, String>>>>) -> impl Fn(&str) {
    move |line| {
        let Some(rest) = line.strip_prefix("volume-check: corrupt-me ") else { return };
        let mut words = rest.split_whitespace().map(str::parse::<u64>);
        let result = match (words.next(), words.next()) {
            (Some(Ok(offset)), Some(Ok(len))) => flip_bytes(&image, offset, len as usize),
            _ => Err(format!("cannot parse {line:?}")),
        };
        eprintln!("host: {result:?}");
        *flipped.lock().unwrap() = Some(result);
    }
}

/// Namespaces formatted with per-block metadata (4096+8 and 4096+16, as
/// enterprise drives offer): the `zns` workload keeps its checksums in
/// block tags, and on a mirror a block the host flips in the first
/// controller's image fails its tag, is read from the other copy and
/// repaired.
#[test]
fn block_tags_on_namespaces_with_metadata_and_repair_after_host_corruption() {
    let images = ImageDir::new("qemu-volume-tags");
    let image = images.0.join("nvme0.img");
    let flipped: Arc<Mutex<Option<Result<String, String>>>> = Arc::default();
    let vm = {
        let flipped = Arc::clone(&flipped);
        Vm::new()
            .controller(Controller::zns(256 * MIB, 16 * MIB).lba(4096).metadata(8))
            .controller(Controller::nvme(256 * MIB).lba(4096).metadata(8))
            .controller(Controller::zns(256 * MIB, 16 * MIB).lba(4096).metadata(16))
            .images(&images.0)
            .on_line(flip_on_request(image, flipped))
    };
    let outcome = run(
        vm,
        &[
            Scenario::shared(Shared::Tags, format!("tags --pci {THIRD}")),
            Scenario::shared(Shared::TagsRepair, format!("tags-repair --pci {FIRST} --pci {SECOND}")),
        ],
    );
    let flipped = flipped.lock().unwrap().clone();
    assert!(matches!(flipped, Some(Ok(_))), "the host did not flip the bytes: {flipped:?}");
    let format = detail(&outcome, "tags", "format");
    assert!(format.contains("checksums in block tags (16 bytes"), "{format}");
    assert!(detail(&outcome, "tags repair", "format").contains("block tags (8 bytes"));
    let read = detail(&outcome, "tags repair", "read");
    assert!(read.contains("block 2 repaired"), "{read}");
}

/// Zone checksum areas (`ChecksumStore::Area`) on QEMU's ZNS model, on
/// namespaces without metadata: the workload seals zones (Zone Append of
/// each area, then Finish) and reclaims out of sealed ones; on a mirror, a
/// block the host flips in a sealed zone fails the tag in its area, the
/// read is repaired from the other copy, and the copy rewritten elsewhere
/// reads clean.
#[test]
fn zone_checksum_areas_on_zns_and_repair_after_host_corruption() {
    let images = ImageDir::new("qemu-volume-area");
    let image = images.0.join("nvme0.img");
    let flipped: Arc<Mutex<Option<Result<String, String>>>> = Arc::default();
    let vm = {
        let flipped = Arc::clone(&flipped);
        Vm::new()
            .controller(Controller::zns(256 * MIB, 16 * MIB).lba(4096))
            .controller(Controller::zns(256 * MIB, 16 * MIB).lba(4096))
            .controller(Controller::zns(256 * MIB, 16 * MIB).lba(4096))
            .images(&images.0)
            .on_line(flip_on_request(image, flipped))
    };
    let outcome = run(
        vm,
        &[
            Scenario::shared(Shared::Area, format!("area --pci {THIRD}")),
            Scenario::shared(Shared::AreaRepair, format!("area-repair --pci {FIRST} --pci {SECOND}")),
        ],
    );
    let flipped = flipped.lock().unwrap().clone();
    assert!(matches!(flipped, Some(Ok(_))), "the host did not flip the bytes: {flipped:?}");
    assert!(detail(&outcome, "area", "format").contains("checksum areas"));
    assert!(detail(&outcome, "area repair", "format").contains("checksum areas"));
    let read = detail(&outcome, "area repair", "read");
    assert!(read.contains("block 2 repaired"), "{read}");
}

/// The guest's addresses, in the order the controllers are given: the
/// rig names controller N's image `nvmeN.img`.
const ADDRESSES: [&str; 4] = [FIRST, SECOND, THIRD, FOURTH];

/// The unit the host writes in: the allocator's 4 KiB block.
const BLOCK: usize = 4096;

/// Chunks the host reads whole images in, to hash them.
const HASH_CHUNK_BYTES: usize = 4 << 20;

/// Bytes of one backing image, from a guest request line.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ImageRange {
    image: PathBuf,
    offset: u64,
    len: usize,
}

/// What the host did for the metadata scenario, and what went wrong doing
/// it (asserted after the run; a panic in the observer would only lose the
/// guest's output).
#[derive(Debug, Default)]
struct MetadataHost {
    /// The bytes each overwrite replaced, per image.
    saved: SavedRanges<PathBuf>,
    /// Per image of the last overwrite, the hash of what it must hold
    /// until the next restore: nothing may write to it in between.
    expected: Vec<(PathBuf, u64)>,
    /// What was done, in order, as `overwrite-me` / `restore-me` lines.
    done: Vec<String>,
    errors: Vec<String>,
}

/// Parses `BDF OFFSET LEN [BDF OFFSET LEN ...]` into ranges of the images
/// in `dir`.
fn parse_ranges(dir: &Path, words: &str) -> Result<Vec<ImageRange>, String> {
    let words: Vec<&str> = words.split_whitespace().collect();
    if words.is_empty() || !words.len().is_multiple_of(3) {
        return Err(format!("expected BDF OFFSET LEN triples: {words:?}"));
    }
    words
        .chunks(3)
        .map(|triple| {
            let index = ADDRESSES.iter().position(|a| *a == triple[0]).ok_or(format!("unknown BDF {}", triple[0]))?;
            let number = |word: &str| word.parse::<u64>().map_err(|e| format!("{word}: {e}"));
            let len = usize::try_from(number(triple[2])?).map_err(|e| e.to_string())?;
            Ok(ImageRange { image: dir.join(format!("nvme{index}.img")), offset: number(triple[1])?, len })
        })
        .collect()
}

/// Writes `bytes` at `offset` of `image` one block at a time, from the
/// last block to the first: a guest that watches the first block (a
/// label) sees it change only once the whole range has. QEMU reads the
/// image through the host page cache, so the guest's next read sees each
/// write.
fn write_back_to_front(image: &Path, offset: u64, bytes: &[u8]) -> Result<(), String> {
    let file = File::options().write(true).open(image).map_err(|e| format!("{}: {e}", image.display()))?;
    for (index, block) in bytes.chunks(BLOCK).enumerate().rev() {
        let at = offset + (index * BLOCK) as u64;
        file.write_all_at(block, at).map_err(|e| format!("writing {} at {at}: {e}", image.display()))?;
    }
    Ok(())
}

fn read_range(range: &ImageRange) -> Result<Vec<u8>, String> {
    let file = File::open(&range.image).map_err(|e| format!("{}: {e}", range.image.display()))?;
    let mut bytes = vec![0u8; range.len];
    file.read_exact_at(&mut bytes, range.offset)
        .map_err(|e| format!("reading {} bytes at {} of {}: {e}", range.len, range.offset, range.image.display()))?;
    Ok(bytes)
}

/// A hash of the whole of `image` as it would read with `overlays`
/// (offset, bytes) written over it.
fn image_hash(image: &Path, overlays: &[(u64, &[u8])]) -> Result<u64, String> {
    let file = File::open(image).map_err(|e| format!("{}: {e}", image.display()))?;
    let size = file.metadata().map_err(|e| format!("{}: {e}", image.display()))?.len();
    let mut hasher = DefaultHasher::new();
    let mut chunk = vec![0u8; HASH_CHUNK_BYTES];
    let mut at = 0u64;
    while at < size {
        let len = chunk.len().min((size - at) as usize);
        let chunk = &mut chunk[..len];
        file.read_exact_at(chunk, at).map_err(|e| format!("reading {} at {at}: {e}", image.display()))?;
        for &(offset, bytes) in overlays {
            let (start, end) = (offset.max(at), (offset + bytes.len() as u64).min(at + len as u64));
            if start < end {
                chunk[(start - at) as usize..(end - at) as usize]
                    .copy_from_slice(&bytes[(start - offset) as usize..(end - offset) as usize]);
            }
        }
        hasher.write(chunk);
        at += len as u64;
    }
    Ok(hasher.finish())
}

impl MetadataHost {
    /// Overwrites `ranges` with garbage, in order, keeping what they held.
    /// First, while the guest still waits, notes the hash each image will
    /// have.
    fn overwrite(&mut self, ranges: &[ImageRange]) -> Result<(), String> {
        let garbage: Vec<Vec<u8>> = ranges.iter().map(|r| garbage(r.offset, r.len)).collect();
        let mut images: Vec<&PathBuf> = ranges.iter().map(|r| &r.image).collect();
        images.sort();
        images.dedup();
        self.expected.clear();
        for image in images {
            let overlays: Vec<(u64, &[u8])> = ranges
                .iter()
                .zip(&garbage)
                .filter(|(r, _)| r.image == *image)
                .map(|(r, g)| (r.offset, g.as_slice()))
                .collect();
            self.expected.push((image.clone(), image_hash(image, &overlays)?));
        }
        for (range, garbage) in ranges.iter().zip(&garbage) {
            let original = read_range(range)?;
            write_back_to_front(&range.image, range.offset, garbage)?;
            self.saved.keep(range.image.clone(), range.offset, original);
        }
        Ok(())
    }

    /// Requires every image of the last overwrite to hold exactly what it
    /// left, then writes back what `ranges` held before it, in order.
    fn restore(&mut self, ranges: &[ImageRange]) -> Result<(), String> {
        for (image, expected) in std::mem::take(&mut self.expected) {
            if image_hash(&image, &[])? != expected {
                return Err(format!("{} changed after the overwrite: something wrote to it", image.display()));
            }
        }
        for range in ranges {
            let held = self.saved.held(&range.image, range.offset, range.len as u64);
            write_back_to_front(
                &range.image,
                range.offset,
                held.ok_or_else(|| format!("nothing saved for {range:?}"))?,
            )?;
        }
        Ok(())
    }

    /// Acts on one line of the guest's output.
    fn on_line(&mut self, dir: &Path, line: &str) {
        let (request, result) = if let Some(words) = line.strip_prefix("volume-check: overwrite-me ") {
            ("overwrite-me", parse_ranges(dir, words).and_then(|r| self.overwrite(&r)))
        } else if let Some(words) = line.strip_prefix("volume-check: restore-me ") {
            ("restore-me", parse_ranges(dir, words).and_then(|r| self.restore(&r)))
        } else {
            return;
        };
        eprintln!("host: {line}: {result:?}");
        match result {
            Ok(()) => self.done.push(line.to_owned()),
            Err(e) => self.errors.push(format!("{request}: {e}")),
        }
    }
}

/// The volume ID a check's detail names (`volume 0x...`).
fn volume_id<'a>(outcome: &'a Outcome, label: &str, check: &str) -> &'a str {
    let text = detail(outcome, label, check);
    let start = text.find("volume 0x").unwrap_or_else(|| panic!("no volume ID in {text:?}")) + "volume ".len();
    let end = text[start..].find(|c: char| !c.is_ascii_hexdigit() && c != 'x').map_or(text.len(), |n| start + n);
    &text[start..end]
}

/// Format 2's metadata on a mirror of a conventional controller (device
/// 0, whose image the host overwrites) and a ZNS one, in one boot, one
/// process per phase (`volume-check metadata`):
///
/// - random bytes over device 0's metadata zones, labels and all: the
///   volume opens from device 1's copy, every extent reads back from both
///   copies, device 0's copy is rewritten (`copies_repaired`) and labelled
///   again, and the next open has nothing to repair;
/// - the devices given the other way round: the same volume opens
///   (`device_order` [1, 0]);
/// - a single volume's namespace (a third controller) in place of device
///   1: `ForeignDevice { device: 1, .. }`, and both volumes still open as
///   they were, with nothing to repair;
/// - device 0's journal records (its labels kept) and all of device 1's
///   metadata overwritten: open fails with `MetadataLost`, not `NoVolume`;
///   `seqwrite` without `--format` exits 1 with "nothing was formatted"
///   and writes nothing (the host hashes both images when it damages them
///   and again before it restores device 0's records); then the volume
///   opens, takes device 1 (no label, its data verifies) and rewrites its
///   copy, and every extent reads back.
#[test]
fn mirror_metadata_survives_garbage_swaps_and_foreign_devices_and_seqwrite_refuses_damage() {
    let images = ImageDir::new("qemu-volume-metadata");
    let host: Arc<Mutex<MetadataHost>> = Arc::default();
    let vm = {
        let host = Arc::clone(&host);
        let dir = images.0.clone();
        Vm::new()
            .controller(Controller::nvme(256 * MIB))
            .controller(Controller::zns(256 * MIB, 16 * MIB))
            .controller(Controller::zns(256 * MIB, 16 * MIB))
            .images(&images.0)
            .on_line(move |line| host.lock().unwrap_or_else(|p| p.into_inner()).on_line(&dir, line))
    };
    // The devices each phase takes, in its order.
    let pci = |phase: MetadataPhase| match phase {
        MetadataPhase::Swapped => format!("--pci {SECOND} --pci {FIRST}"),
        MetadataPhase::Foreign => format!("--pci {FIRST} --pci {SECOND} --pci {THIRD}"),
        _ => format!("--pci {FIRST} --pci {SECOND}"),
    };
    // One chain: each phase needs the one before it.
    let scenario = Scenario {
        runs: MetadataPhase::ALL.map(|phase| format!("metadata --phase {} {}", phase.name(), pci(phase))).into(),
        expect: MetadataPhase::ALL.map(|phase| (phase.label(), phase.checks())).into(),
    };
    let outcome = run(vm, &[scenario]);
    let host = host.lock().unwrap();
    assert!(host.errors.is_empty(), "the host's part failed: {:?}", host.errors);
    let requests: Vec<&str> = host.done.iter().map(|l| l.split_whitespace().nth(1).unwrap_or_default()).collect();
    assert_eq!(requests, ["overwrite-me", "overwrite-me", "restore-me"], "{:#?}", host.done);

    // One volume throughout, whatever the order given.
    let id = volume_id(&outcome, "metadata format", "committed");
    for (label, check) in [
        ("metadata garbage", "open"),
        ("metadata reopen", "open"),
        ("metadata swapped", "open"),
        ("metadata foreign", "volume intact"),
        ("metadata damage", "open"),
        ("metadata damage", "restored"),
        ("metadata damage", "reopen"),
    ] {
        assert_eq!(volume_id(&outcome, label, check), id, "{label} {check}");
    }
    // Device 0 probed as no member once overwritten.
    let overwritten = detail(&outcome, "metadata format", "overwritten");
    assert!(!overwritten.contains("Member"), "{overwritten}");
    let other = volume_id(&outcome, "metadata foreign", "other volume");
    assert_ne!(other, id);
    let refused = detail(&outcome, "metadata foreign", "foreign refused");
    assert!(refused.starts_with(&format!("ForeignDevice {{ device: 1, found: {}", u64_of(other))), "{refused}");
    let refused = detail(&outcome, "metadata damage", "open refused");
    assert!(refused.starts_with("committed metadata lost on every copy"), "{refused}");
    let seqwrite = detail(&outcome, "metadata damage", "seqwrite refused");
    assert!(seqwrite.contains("nothing was formatted"), "{seqwrite}");
}

/// `0x...` as the decimal `{:?}` prints.
fn u64_of(hex: &str) -> u64 {
    u64::from_str_radix(hex.trim_start_matches("0x"), 16).unwrap_or_else(|e| panic!("{hex}: {e}"))
}

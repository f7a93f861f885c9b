//! QEMU integration tests for the scrub engine through the real tools
//! (issue 7's Tests): `seqwrite` fills a mirrored volume, the host damages
//! the controllers' backing images while the guest runs, and `scrub`
//! detects, repairs and re-verifies.
//!
//! Each test boots one VM and runs one `sh -c` script of steps. A step runs
//! one tool with `--json` and prints `@@ NAME rc=STATUS [KEY=VALUE ...]
//! JSON`; the host acts on some of these lines as they arrive
//! ([`Vm::on_line`]: flipping bytes in a backing image), and checks every
//! step's status and report after the VM exits, then the images themselves.
//! QEMU forgets ZNS zone state when it exits, so each test's steps share one
//! boot.
//!
//! The guest never sleeps blindly: after the host is told to damage an
//! image, the guest repeats a read-only scrub (at most [`DETECT_TRIES`]
//! times, one second apart) until it reports errors.

use serde_json::Value;
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vm_rig::{Controller, Outcome, Vm, GUEST_BDFS};

const MIB: u64 = 1 << 20;

/// The allocator's block: one crc32c each, the unit scrub verifies.
const BLOCK: u64 = 4096;

/// seqwrite's default `--bs`: one write, one extent (owner = the write's
/// sequence number).
const WRITE_BYTES: u64 = 256 << 10;

/// Blocks per write (and per extent).
const WRITE_BLOCKS: u64 = WRITE_BYTES / BLOCK;

/// The controllers' addresses in the guest, in the order they are given.
const FIRST: &str = GUEST_BDFS[0];
const SECOND: &str = GUEST_BDFS[1];
const THIRD: &str = GUEST_BDFS[2];
const FOURTH: &str = GUEST_BDFS[3];

/// Read-only scrubs the guest runs at most while waiting for the host's
/// damage to show (one second apart).
const DETECT_TRIES: u32 = 30;

/// How long one tool run may take in the guest (each takes seconds).
const STEP_LIMIT_S: u64 = 120;

/// What seqwrite writes on the mirrors whose copies get damaged: 512
/// writes, each a 256 KiB extent.
const DATA_BYTES: u64 = 128 * MIB;

/// Blocks (from the start of the data, in [`BLOCK`]s) whose first copy the
/// host damages: two in one extent, the others in extents of their own,
/// from the first to one near the end of the data.
const ONE_COPY_BAD: [u64; 5] =
    [0, 1, 17 * WRITE_BLOCKS + 9, 300 * WRITE_BLOCKS + WRITE_BLOCKS - 1, 500 * WRITE_BLOCKS + 31];

/// Extents [`ONE_COPY_BAD`] touches.
const ONE_COPY_BAD_EXTENTS: u64 = 4;

/// The block the host damages in both copies.
const BOTH_COPIES_BAD: u64 = 250 * WRITE_BLOCKS + 7;

/// Where in a block the host inverts bytes: clear of the 16-byte stamp
/// (write sequence number, block index) seqwrite puts at each block's
/// start, which identifies the block in both images.
const FLIP_OFFSET: u64 = 1024;
const FLIP_BYTES: usize = 16;

/// Runs `sh -c SCRIPT` after a prelude defining the step helpers; returns
/// the outcome and each step by name. A VM run that fails also says what
/// the host's part (`host`) had failed by then.
fn run_script(vm: Vm, script: &str, host: &Shared) -> (Outcome, BTreeMap<String, Step>) {
    let prelude = format!(
        r#"step() {{
    name=$1; shift
    out=$(timeout -s KILL {STEP_LIMIT_S} "$@"); rc=$?
    echo "@@ $name rc=$rc $out"
}}
# detect NAME SCRUB-ARGS...: read-only scrubs until one reports errors.
detect() {{
    name=$1; shift; tries=0
    while :; do
        tries=$((tries + 1))
        out=$(timeout -s KILL {STEP_LIMIT_S} scrub "$@" --readonly --json); rc=$?
        if [ $rc -ne 0 ] || [ $tries -ge {DETECT_TRIES} ]; then break; fi
        sleep 1
    done
    echo "@@ $name rc=$rc tries=$tries $out"
}}
"#
    );
    let outcome = vm
        .timeout(Duration::from_secs(600))
        .run(&["sh", "-c", &format!("{prelude}{script}")])
        .unwrap_or_else(|e| panic!("VM run failed: {e}\nthe host's part: {:?}", host.lock().unwrap().errors));
    let steps: BTreeMap<String, Step> =
        outcome.output.lines().filter_map(Step::parse).map(|step| (step.name.clone(), step)).collect();
    eprintln!("{:.1} s in the VM", outcome.elapsed.as_secs_f64());
    (outcome, steps)
}

/// One step's line: `@@ NAME rc=STATUS [KEY=VALUE ...] [JSON]`.
#[derive(Debug, Clone)]
struct Step {
    name: String,
    status: i32,
    fields: BTreeMap<String, String>,
    json: Value,
}

impl Step {
    fn parse(line: &str) -> Option<Step> {
        let rest = line.strip_prefix("@@ ")?;
        let (head, json) = match rest.find('{') {
            Some(at) => (&rest[..at], serde_json::from_str(&rest[at..]).unwrap_or(Value::Null)),
            None => (rest, Value::Null),
        };
        let mut words = head.split_whitespace();
        let name = words.next()?.to_owned();
        let fields: BTreeMap<String, String> =
            words.filter_map(|w| w.split_once('=')).map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
        let status = fields.get("rc")?.parse().ok()?;
        Some(Step { name, status, fields, json })
    }

    /// A scrub step's report.
    fn report(&self) -> &Value {
        &self.json["report"]
    }

    /// How many read-only scrubs a `detect` step ran.
    fn tries(&self) -> u32 {
        self.fields.get("tries").and_then(|t| t.parse().ok()).unwrap_or_else(|| panic!("{self:?}"))
    }

    fn u64(&self, pointer: &str) -> u64 {
        self.json.pointer(pointer).and_then(Value::as_u64).unwrap_or_else(|| panic!("{}: no {pointer}", self.name))
    }
}

/// The step named `name`, which must have exited with `status`.
fn step<'a>(steps: &'a BTreeMap<String, Step>, outcome: &Outcome, name: &str, status: i32) -> &'a Step {
    let step = steps.get(name).unwrap_or_else(|| panic!("no step {name}\n{}", outcome.report()));
    assert_eq!(step.status, status, "step {name}: {step:?}\n{}", outcome.report());
    step
}

/// Error counts of a scrub report: (checksum blocks, media blocks by
/// status, other failed blocks by reason, corrected blocks).
fn counts(step: &Step) -> (u64, BTreeMap<String, u64>, BTreeMap<String, u64>, u64) {
    let report = step.report();
    let map = |value: &Value| -> BTreeMap<String, u64> {
        value
            .as_object()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0))).collect())
            .unwrap_or_default()
    };
    (
        step.u64("/report/errors/checksum"),
        map(&report["errors"]["media"]),
        map(&report["errors"]["command"]),
        step.u64("/report/corrected_blocks"),
    )
}

/// A scrub report with no error of any kind, every byte read and verified.
fn assert_clean(step: &Step, bytes_total: u64) {
    let (checksum, media, command, corrected) = counts(step);
    assert_eq!((checksum, media.len(), command.len(), corrected), (0, 0, 0, 0), "{step:?}");
    assert_eq!(step.report()["uncorrectable"], Value::Array(Vec::new()), "{step:?}");
    assert_eq!(step.u64("/report/bytes_total"), bytes_total, "{step:?}");
    assert_eq!(step.u64("/report/bytes_verified"), bytes_total, "{step:?}");
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

    /// Controller `index`'s backing image (the rig names them `nvmeN.img`).
    fn image(&self, index: usize) -> PathBuf {
        self.0.join(format!("nvme{index}.img"))
    }
}

impl Drop for ImageDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// One block the host damaged (or, for a block it only looked at,
/// `damaged` equal to `original`).
#[derive(Debug, Clone)]
struct Damage {
    image: PathBuf,
    offset: u64,
    original: Vec<u8>,
    damaged: Vec<u8>,
}

impl Damage {
    /// seqwrite's stamp: (write sequence number = extent owner, block
    /// index within the write).
    fn stamp(&self) -> (u64, u64) {
        stamp(&self.original)
    }
}

fn stamp(block: &[u8]) -> (u64, u64) {
    let word = |at: usize| u64::from_le_bytes(block[at..at + 8].try_into().expect("8 bytes"));
    (word(0), word(8))
}

fn read_block(image: &Path, offset: u64) -> Result<Vec<u8>, String> {
    let file = File::open(image).map_err(|e| format!("{}: {e}", image.display()))?;
    let mut block = vec![0u8; BLOCK as usize];
    file.read_exact_at(&mut block, offset).map_err(|e| format!("reading {} at {offset}: {e}", image.display()))?;
    Ok(block)
}

/// Inverts [`FLIP_BYTES`] bytes of the block at `offset` of `image`, as a
/// failing medium might, after checking the block holds seqwrite's data
/// (its stamp names a write of `writes` and a block of it). QEMU's nvme
/// device reads its backing file through the host page cache (the rig's
/// drives use QEMU's default writeback cache, no O_DIRECT), so the guest's
/// next read sees the change.
fn damage(image: &Path, offset: u64, writes: u64) -> Result<Damage, String> {
    let original = read_block(image, offset)?;
    let (sequence, index) = stamp(&original);
    if sequence >= writes || index >= WRITE_BLOCKS {
        return Err(format!(
            "{} at {offset}: stamp ({sequence}, {index}) is not seqwrite's ({writes} writes)",
            image.display()
        ));
    }
    let mut damaged = original.clone();
    for byte in &mut damaged[FLIP_OFFSET as usize..FLIP_OFFSET as usize + FLIP_BYTES] {
        *byte = !*byte;
    }
    let file = File::options().write(true).open(image).map_err(|e| format!("{}: {e}", image.display()))?;
    file.write_all_at(&damaged, offset).map_err(|e| format!("writing {} at {offset}: {e}", image.display()))?;
    eprintln!("host: damaged {} at {offset} (write {sequence}, block {index})", image.display());
    Ok(Damage { image: image.to_owned(), offset, original, damaged })
}

/// Every block-aligned offset of `image` holding exactly `content`.
fn find(image: &Path, content: &[u8]) -> Vec<u64> {
    let file = File::open(image).unwrap_or_else(|e| panic!("{}: {e}", image.display()));
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut chunk = vec![0u8; 4 * MIB as usize];
    let mut found = Vec::new();
    let mut at = 0;
    while at < size {
        let len = chunk.len().min((size - at) as usize);
        file.read_exact_at(&mut chunk[..len], at).unwrap_or_else(|e| panic!("{}: {e}", image.display()));
        for (index, block) in chunk[..len].chunks_exact(BLOCK as usize).enumerate() {
            if block == content {
                found.push(at + index as u64 * BLOCK);
            }
        }
        at += len as u64;
    }
    found
}

/// What the host did, and what went wrong doing it (asserted after the
/// run; a panic in the observer would only lose the guest's output).
#[derive(Debug, Default)]
struct Host {
    /// Per step name, the blocks damaged when its line arrived.
    damage: BTreeMap<String, Vec<Damage>>,
    errors: Vec<String>,
}

type Shared = Arc<Mutex<Host>>;

/// seqwrite's report: (where the data starts in each image, bytes written).
fn data_extent(step: &Step) -> Result<(u64, u64), String> {
    let offset = step.json["data_offset_bytes"].as_u64();
    let bytes = step.json["bytes"].as_u64();
    match (step.status, offset, bytes) {
        (0, Some(offset), Some(bytes)) => Ok((offset, bytes)),
        _ => Err(format!("seqwrite step {step:?}")),
    }
}

/// Damages the first copy of each of [`ONE_COPY_BAD`] (in `image`) once
/// seqwrite has reported where its data is.
fn damage_first_copies(step: &Step, image: &Path) -> Result<Vec<Damage>, String> {
    let (data_offset, bytes) = data_extent(step)?;
    ONE_COPY_BAD
        .iter()
        .map(|&block| {
            if (block + 1) * BLOCK > bytes {
                return Err(format!("block {block} lies beyond the {bytes} bytes written"));
            }
            damage(image, data_offset + block * BLOCK, bytes / WRITE_BYTES)
        })
        .collect()
}

/// Damages [`BOTH_COPIES_BAD`] in `first` and the same block of the
/// second copy, found in `second` by content, first copy first.
fn damage_both_copies(data_offset: u64, bytes: u64, first: &Path, second: &Path) -> Result<Vec<Damage>, String> {
    let offset = data_offset + BOTH_COPIES_BAD * BLOCK;
    let block = read_block(first, offset)?;
    let twins = find(second, &block);
    let [twin] = twins[..] else {
        return Err(format!("the block at {offset} of {} is at {twins:?} in {}", first.display(), second.display()));
    };
    Ok(vec![damage(first, offset, bytes / WRITE_BYTES)?, damage(second, twin, bytes / WRITE_BYTES)?])
}

/// Checks, once seqwrite has reported where its data is, that the data
/// starts at `predicted_data_offset` (where the blkdebug sectors were put
/// before the boot) and that each of `offsets` (bytes from the start of the
/// data) lies inside it; returns the blocks holding them, read from the
/// host (blkdebug fails only QEMU's reads), unchanged.
fn faulty_blocks(
    step: &Step,
    image: &Path,
    predicted_data_offset: u64,
    offsets: &[u64],
) -> Result<Vec<Damage>, String> {
    let (data_offset, bytes) = data_extent(step)?;
    if data_offset != predicted_data_offset {
        return Err(format!("data starts at {data_offset}, not {predicted_data_offset}: the blkdebug sectors miss it"));
    }
    offsets
        .iter()
        .map(|&offset| {
            let at = data_offset + offset / BLOCK * BLOCK;
            let block = read_block(image, at)?;
            let (sequence, index) = stamp(&block);
            if offset >= bytes || sequence >= bytes / WRITE_BYTES || index >= WRITE_BLOCKS {
                return Err(format!("data + {offset}: not seqwrite's data ({sequence}, {index})"));
            }
            Ok(Damage { image: image.to_owned(), offset: at, original: block.clone(), damaged: block })
        })
        .collect()
}

/// What the host does when a step's line arrives: the blocks it damaged.
type Action = Box<dyn Fn(&Step) -> Result<Vec<Damage>, String> + Send + Sync>;

fn action(f: impl Fn(&Step) -> Result<Vec<Damage>, String> + Send + Sync + 'static) -> Action {
    Box::new(f)
}

/// An observer running each action on the line of the step it names.
fn on_step(host: &Shared, actions: Vec<(&'static str, Action)>) -> impl Fn(&str) + Send + Sync + 'static {
    let host = Arc::clone(host);
    move |line: &str| {
        let Some(step) = Step::parse(line) else { return };
        for (name, action) in &actions {
            if step.name == *name {
                let result = action(&step);
                let mut host = host.lock().unwrap_or_else(|p| p.into_inner());
                match result {
                    Ok(damage) => {
                        host.damage.insert(step.name.clone(), damage);
                    }
                    Err(e) => host.errors.push(format!("{name}: {e}")),
                }
            }
        }
    }
}

/// The uncorrectable entries of a scrub report, as (extent, owner, copy,
/// blocks), sorted.
fn uncorrectable(step: &Step) -> Vec<(u64, u64, u64, Vec<u64>)> {
    let mut entries: Vec<(u64, u64, u64, Vec<u64>)> = step.report()["uncorrectable"]
        .as_array()
        .unwrap_or_else(|| panic!("{step:?}"))
        .iter()
        .map(|u| {
            let blocks =
                u["blocks"].as_array().map(|b| b.iter().filter_map(Value::as_u64).collect()).unwrap_or_default();
            (
                u["extent"].as_u64().unwrap_or(u64::MAX),
                u["owner"].as_u64().unwrap_or(u64::MAX),
                u["lane"].as_u64().unwrap_or(u64::MAX),
                blocks,
            )
        })
        .collect();
    entries.sort();
    entries
}

/// A mirror across two ZNS controllers, in one boot:
///
/// - one copy's blocks damaged by the host are detected, repaired by
///   relocation (the damaged blocks stay where they were, the good data is
///   written elsewhere in the first image) and a second scrub is clean;
/// - a scrub cancelled after 64 MiB and resumed in a new process from its
///   saved checkpoint reads each byte once: the two runs' bytes read add up
///   to the total, whether it stopped between the copies (at full depth)
///   or inside the first (one read at a time);
/// - on a second mirror whose first controller's image sits behind QEMU's
///   blkdebug driver, reads of two sectors inside the first copy's data
///   fail: scrub reports the media errors, repairs from the second copy by
///   relocation, and a second scrub is clean.
///
/// Repaired media errors are tested on ZNS. blkdebug's rules persist for
/// the life of QEMU and a write to the sector does not clear them (a drive
/// would remap the sector on the write). ZNS repair relocates the copy, so
/// the failing sectors hold dead data that no later scrub reads: the second
/// scrub must be clean, a sound check. On a conventional namespace the
/// repair rewrites in place and its confirming read fails again: that is
/// the test of a sector that cannot be healed (see the conventional test).
#[test]
fn zns_mirror_repairs_by_relocation_resumes_and_survives_media_errors() {
    // blkdebug's rules are fixed when QEMU starts, before seqwrite can say
    // where the data is. The allocator puts two metadata segments of whole
    // zones first (allocator/src/lib.rs); on 512 MiB with 32 MiB zones its
    // worst-case checkpoint (a few MiB) fits one zone, so data starts at
    // zone 2. The host checks this when seqwrite's report arrives.
    const ZONE: u64 = 32 * MIB;
    const PREDICTED_DATA_OFFSET: u64 = 2 * ZONE;
    const MEDIA_DATA_BYTES: u64 = 64 * MIB;
    // Two sectors in two extents, as byte offsets from the start of the
    // data: in the first block of the data's fifth extent and in the sixth
    // block of its 41st.
    let media_errors: [u64; 2] = [4 * WRITE_BYTES + 3 * 512, 40 * WRITE_BYTES + 5 * BLOCK + 512];
    let sectors: Vec<u64> = media_errors.iter().map(|b| (PREDICTED_DATA_OFFSET + b) / 512).collect();

    let images = ImageDir::new("qemu-scrub-zns");
    let host: Shared = Arc::default();
    let first = images.image(0);
    let faulty = images.image(2);
    let observer = on_step(
        &host,
        vec![
            ("seqwrite-a", action(move |step| damage_first_copies(step, &first))),
            ("seqwrite-b", action(move |step| faulty_blocks(step, &faulty, PREDICTED_DATA_OFFSET, &media_errors))),
        ],
    );
    let vm = Vm::new()
        .controller(Controller::zns(512 * MIB, ZONE))
        .controller(Controller::zns(512 * MIB, ZONE))
        .controller(Controller::zns(512 * MIB, ZONE).read_errors(sectors))
        .controller(Controller::zns(512 * MIB, ZONE))
        .images(&images.0)
        .on_line(observer);
    let (data_mib, media_mib) = (DATA_BYTES / MIB, MEDIA_DATA_BYTES / MIB);
    let script = format!(
        "A='--pci {FIRST} --pci {SECOND}'
B='--pci {THIRD} --pci {FOURTH}'
step seqwrite-a seqwrite --profile mirror $A --format --yes --size {data_mib}M --zero-copy --verify --json
detect detect-a $A --copy 0
step repair-a scrub $A --json
step rescrub-a scrub $A --json
step pause-a scrub $A --json --state /tmp/a.state --cancel-after 64M
step resume-a scrub $A --json --state /tmp/a.state --resume
step pause-mid-a scrub $A --json --state /tmp/m.state --cancel-after 64M --submit-and-wait
step resume-mid-a scrub $A --json --state /tmp/m.state --resume
step verify-a scrub $A --readonly --json
step seqwrite-b seqwrite --profile mirror $B --format --yes --size {media_mib}M --json
step media-readonly-b scrub $B --readonly --json
step media-b scrub $B --json
step rescrub-b scrub $B --json
"
    );
    let (outcome, steps) = run_script(vm, &script, &host);
    let host = host.lock().unwrap();
    assert!(host.errors.is_empty(), "the host's part failed: {:?}\n{}", host.errors, outcome.report());
    let total = 2 * DATA_BYTES;

    // One copy damaged: detected, repaired by relocation, then clean.
    // Written in buffers the volume lent (mapped for the devices to read
    // only) and read back whole: only the other copy was copied in.
    let written = step(&steps, &outcome, "seqwrite-a", 0);
    assert_eq!(written.u64("/volume/copied_in_bytes"), DATA_BYTES, "{written:?}");
    let detect = step(&steps, &outcome, "detect-a", 3);
    eprintln!("the damage showed at read-only scrub {} of at most {DETECT_TRIES}", detect.tries());
    assert_eq!(counts(detect), (ONE_COPY_BAD.len() as u64, BTreeMap::new(), BTreeMap::new(), 0), "{detect:?}");
    assert_eq!(detect.u64("/report/bytes_total"), DATA_BYTES, "copy 0 only: {detect:?}");
    let repair = step(&steps, &outcome, "repair-a", 0);
    let bad = ONE_COPY_BAD.len() as u64;
    assert_eq!(counts(repair), (bad, BTreeMap::new(), BTreeMap::new(), bad), "{repair:?}");
    assert_eq!(uncorrectable(repair), Vec::new(), "{repair:?}");
    assert_clean(step(&steps, &outcome, "rescrub-a", 0), total);
    // Relocated: each damaged block is still damaged where it was (a zone
    // cannot be overwritten), and its original data is in exactly one other
    // place of the first image, where the repair wrote the extent anew.
    let damaged = &host.damage["seqwrite-a"];
    for d in damaged {
        assert_eq!(read_block(&d.image, d.offset).unwrap(), d.damaged, "{} at {}", d.image.display(), d.offset);
        let copies = find(&d.image, &d.original);
        assert!(copies.len() == 1 && copies[0] != d.offset, "write {:?}: original data at {copies:?}", d.stamp());
    }
    let owners: std::collections::BTreeSet<u64> = damaged.iter().map(|d| d.stamp().0).collect();
    assert_eq!(owners.len() as u64, ONE_COPY_BAD_EXTENTS, "{damaged:?}");

    // Cancelled, then resumed by a new process: nothing read twice. The
    // engine checkpoints (and so cancels) at 64 MiB; at full depth the
    // reads in flight then finish, so the cancelled run reads a little
    // more; one read at a time it stops within a read of 64 MiB.
    for (pause, resume, paused_at) in
        [("pause-a", "resume-a", 64 * MIB..total), ("pause-mid-a", "resume-mid-a", 64 * MIB..65 * MIB)]
    {
        let pause = step(&steps, &outcome, pause, 0);
        let resume = step(&steps, &outcome, resume, 0);
        let (paused_bytes, resumed_bytes) = (pause.u64("/report/bytes_read"), resume.u64("/report/bytes_read"));
        assert_eq!(pause.report()["cancelled"], Value::Bool(true), "{pause:?}");
        assert!(paused_at.contains(&paused_bytes), "cancelled after {paused_bytes} bytes: {pause:?}");
        assert_eq!(resume.report()["resumed"], Value::Bool(true), "{resume:?}");
        assert_eq!(resume.report()["cancelled"], Value::Bool(false), "{resume:?}");
        assert_eq!(paused_bytes + resumed_bytes, total, "bytes read by the two runs\n{pause:?}\n{resume:?}");
        assert_eq!(counts(resume), (0, BTreeMap::new(), BTreeMap::new(), 0), "{resume:?}");
        eprintln!(
            "{}: cancelled after {} MiB, resumed for {} MiB",
            pause.name,
            paused_bytes / MIB,
            resumed_bytes / MIB
        );
    }
    // What seqwrite wrote, every block of both copies, matches its checksum.
    assert_clean(step(&steps, &outcome, "verify-a", 0), total);

    // Media errors on the first copy: QEMU completes a read that blkdebug
    // fails with EIO as Unrecovered Read Error (hw/nvme/ctrl.c,
    // nvme_aio_err). The scrub narrows a failed read to its extents and
    // counts each unreadable extent's blocks.
    step(&steps, &outcome, "seqwrite-b", 0);
    let unreadable = BTreeMap::from([("Unrecovered Read Error".to_owned(), media_errors.len() as u64 * WRITE_BLOCKS)]);
    let readonly = step(&steps, &outcome, "media-readonly-b", 3);
    assert_eq!(counts(readonly), (0, unreadable.clone(), BTreeMap::new(), 0), "{readonly:?}");
    assert!(readonly.u64("/report/errors/failed_reads") >= 1, "{readonly:?}");
    let media = step(&steps, &outcome, "media-b", 0);
    let corrected = media_errors.len() as u64 * WRITE_BLOCKS;
    assert_eq!(counts(media), (0, unreadable, BTreeMap::new(), corrected), "{media:?}");
    assert_eq!(uncorrectable(media), Vec::new(), "{media:?}");
    assert_clean(step(&steps, &outcome, "rescrub-b", 0), 2 * MEDIA_DATA_BYTES);
    // Relocated: the blocks under the failing sectors are intact in the
    // image, and the repair wrote a second copy of each elsewhere.
    for d in &host.damage["seqwrite-b"] {
        let copies = find(&d.image, &d.original);
        assert!(copies.len() == 2 && copies.contains(&d.offset), "write {:?}: data at {copies:?}", d.stamp());
    }
}

/// A mirror across two conventional controllers, in one boot:
///
/// - one copy's blocks damaged by the host are detected and repaired in
///   place (the first image holds the original bytes again where the
///   damage was), and a second scrub is clean;
/// - one block damaged in both copies: scrub exits 3 and reports it
///   uncorrectable in each copy with its extent and owner (seqwrite's write
///   number); a read-only scrub afterwards sees exactly the same, and both
///   images still hold the damaged bytes: nothing was changed;
/// - on a second mirror, a sector of the first copy that blkdebug fails on
///   every read, even after the in-place rewrite: reported uncorrectable,
///   exit 3, not a failed scrub.
#[test]
fn conventional_mirror_repairs_in_place_and_reports_uncorrectable_blocks() {
    // The data of a volume on this geometry starts after 14 zones (software
    // zones of 1 MiB of data, the default for 512 MiB, each with its 4 KiB
    // checksum area after it, and two metadata segments of 7 zones: the
    // worst checkpoint, every extent a block, at 7/8 of a segment);
    // checked when seqwrite reports.
    const PREDICTED_DATA_OFFSET: u64 = 14 * (MIB + BLOCK);
    const MEDIA_DATA_BYTES: u64 = 64 * MIB;
    // A sector in the second block of the data's 11th extent.
    let media_error = 10 * WRITE_BYTES + BLOCK + 512;
    let sector = (PREDICTED_DATA_OFFSET + media_error) / 512;

    let images = ImageDir::new("qemu-scrub-conventional");
    let host: Shared = Arc::default();
    let (first, second, faulty) = (images.image(0), images.image(1), images.image(2));
    let data: Arc<Mutex<Option<(u64, u64)>>> = Arc::default();
    let observer = on_step(
        &host,
        vec![
            (
                "seqwrite-c",
                action({
                    let data = Arc::clone(&data);
                    let first = first.clone();
                    move |step| {
                        *data.lock().unwrap() = Some(data_extent(step)?);
                        damage_first_copies(step, &first)
                    }
                }),
            ),
            (
                "corrupt-both",
                action(move |_| {
                    let written = *data.lock().unwrap();
                    let (data_offset, bytes) = written.ok_or("seqwrite did not report")?;
                    damage_both_copies(data_offset, bytes, &first, &second)
                }),
            ),
            ("seqwrite-d", action(move |step| faulty_blocks(step, &faulty, PREDICTED_DATA_OFFSET, &[media_error]))),
        ],
    );
    let vm = Vm::new()
        .controller(Controller::nvme(512 * MIB))
        .controller(Controller::nvme(512 * MIB))
        .controller(Controller::nvme(512 * MIB).read_errors([sector]))
        .controller(Controller::nvme(512 * MIB))
        .images(&images.0)
        .on_line(observer);
    let (data_mib, media_mib) = (DATA_BYTES / MIB, MEDIA_DATA_BYTES / MIB);
    let script = format!(
        "C='--pci {FIRST} --pci {SECOND}'
D='--pci {THIRD} --pci {FOURTH}'
step seqwrite-c seqwrite --profile mirror $C --format --yes --size {data_mib}M --json
detect detect-c $C --copy 0
step repair-c scrub $C --json
step rescrub-c scrub $C --json
step verify-c scrub $C --readonly --json
echo '@@ corrupt-both rc=0'
detect detect-both $C --copy 1
step uncorrectable-c scrub $C --json
step readonly-c scrub $C --readonly --json
step seqwrite-d seqwrite --profile mirror $D --format --yes --size {media_mib}M --json
step stuck-d scrub $D --json
step stuck-readonly-d scrub $D --readonly --json
"
    );
    let (outcome, steps) = run_script(vm, &script, &host);
    let host = host.lock().unwrap();
    assert!(host.errors.is_empty(), "the host's part failed: {:?}\n{}", host.errors, outcome.report());
    let total = 2 * DATA_BYTES;
    let bad = ONE_COPY_BAD.len() as u64;

    // One copy damaged: detected, repaired in place, then clean.
    step(&steps, &outcome, "seqwrite-c", 0);
    let detect = step(&steps, &outcome, "detect-c", 3);
    eprintln!("the damage showed at read-only scrub {} of at most {DETECT_TRIES}", detect.tries());
    assert_eq!(counts(detect), (bad, BTreeMap::new(), BTreeMap::new(), 0), "{detect:?}");
    let repair = step(&steps, &outcome, "repair-c", 0);
    assert_eq!(counts(repair), (bad, BTreeMap::new(), BTreeMap::new(), bad), "{repair:?}");
    assert_clean(step(&steps, &outcome, "rescrub-c", 0), total);
    assert_clean(step(&steps, &outcome, "verify-c", 0), total);

    // Both copies damaged: uncorrectable in each copy, nothing changed.
    let both = &host.damage["corrupt-both"];
    let (owner, block) = both[0].stamp();
    let detect = step(&steps, &outcome, "detect-both", 3);
    assert_eq!(detect.u64("/report/errors/checksum"), 1, "copy 1 only: {detect:?}");
    let scrubbed = step(&steps, &outcome, "uncorrectable-c", 3);
    assert_eq!(counts(scrubbed), (2, BTreeMap::new(), BTreeMap::new(), 0), "{scrubbed:?}");
    let entries = uncorrectable(scrubbed);
    let extent = entries.first().map_or(u64::MAX, |e| e.0);
    assert_eq!(entries, vec![(extent, owner, 0, vec![block]), (extent, owner, 1, vec![block])], "{scrubbed:?}");
    let readonly = step(&steps, &outcome, "readonly-c", 3);
    assert_eq!(counts(readonly), (2, BTreeMap::new(), BTreeMap::new(), 0), "{readonly:?}");
    assert_eq!(uncorrectable(readonly), entries, "{readonly:?}");

    // In place: the first copies hold the original bytes again; the blocks
    // bad in both copies were left as they were.
    for d in &host.damage["seqwrite-c"] {
        assert_eq!(read_block(&d.image, d.offset).unwrap(), d.original, "{} at {}", d.image.display(), d.offset);
    }
    for d in both {
        assert_eq!(read_block(&d.image, d.offset).unwrap(), d.damaged, "{} at {}", d.image.display(), d.offset);
    }

    // A sector that stays unreadable after the in-place rewrite (blkdebug's
    // rule outlives the write, as a sector a drive failed to remap): the
    // scrub repairs, re-reads, finds the copy still failing and reports it
    // uncorrectable (the whole extent: a failed read is narrowed to
    // extents), then exits 3; a read-only scrub sees the same media error
    // and, with copy 1 good, calls nothing uncorrectable.
    step(&steps, &outcome, "seqwrite-d", 0);
    let (owner, _) = host.damage["seqwrite-d"][0].stamp();
    let unreadable = BTreeMap::from([("Unrecovered Read Error".to_owned(), WRITE_BLOCKS)]);
    let stuck = step(&steps, &outcome, "stuck-d", 3);
    assert_eq!(counts(stuck), (0, unreadable.clone(), BTreeMap::new(), 0), "{stuck:?}");
    let entries = uncorrectable(stuck);
    let extent = entries.first().map_or(u64::MAX, |e| e.0);
    assert_eq!(entries, vec![(extent, owner, 0, (0..WRITE_BLOCKS).collect())], "{stuck:?}");
    let readonly = step(&steps, &outcome, "stuck-readonly-d", 3);
    assert_eq!(counts(readonly), (0, unreadable, BTreeMap::new(), 0), "{readonly:?}");
    assert_eq!(uncorrectable(readonly), Vec::new(), "{readonly:?}");
}

//! Members that went on apart: telling a stale member (it missed what the
//! other committed, and rejoins) from two that each went on without the
//! other (their histories cannot both be kept), by the sessions their
//! records carry (see [`SessionRecord`]).
//!
//! Each time the volume goes on without a member (a degraded open, a
//! member given up while running) it begins a new session on the
//! survivor: a random ID written in every record since, and kept, with
//! the session it parted from, in the metadata. At open, the newest
//! header on each device names its session. When they differ, each
//! device's metadata is recovered alone:
//!
//! - a side whose session the other went on from is stale: it rejoins,
//!   and the state is recovered from the other alone (what only it holds
//!   past the parting was never acknowledged: a commit is acknowledged
//!   once every member in use holds it);
//! - two sides neither of which went on from the other's session both
//!   committed alone: open refuses them, naming each side, and writes
//!   nothing ([`Error::Diverged`]);
//! - a record that two copies hold with the same numbers but other
//!   contents is two histories too, never a bad copy to rewrite.
//!
//! mdraid compares event counts, and ZFS opens from the newest uberblock:
//! both order one history, and would take the side with the higher count
//! and lose the other's commits without a word. Here the operator
//! chooses ([`Volume::resolve`]).

use super::{Volume, VolumeOptions};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::journal::layout::SegmentImage;
use crate::journal::recovery::{max_generation, recover, Recovered};
use crate::journal::{Op, SessionRecord};
use crate::table::{LocationBits, Table};
use crate::BLOCK_SIZE;
use std::fmt;

/// One side of a mirror whose members went on apart: its last commit,
/// and what it holds that the other does not.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DivergedSide {
    /// The device's place in the volume.
    pub place: usize,
    /// Its index in the list of devices given.
    pub device: usize,
    /// Its address, where the caller named it (`Device::set_identity`).
    pub name: String,
    /// The session it went on under.
    pub session: u64,
    /// Its last commit's generation (0 when its metadata does not recover
    /// alone).
    pub last_generation: u64,
    /// Its last commit's sequence number.
    pub last_seq: u64,
    /// When its last commit was written, in seconds since the Unix epoch.
    pub last_commit_unix_s: u64,
    /// Extents it holds.
    pub extents: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Extents it holds that the other side does not hold alike (added,
    /// or moved, since they parted): what keeping the other side loses.
    pub extents_only_here: u64,
    /// Their bytes.
    pub bytes_only_here: u64,
    /// The highest generation its metadata carries (what a rebuild of it
    /// must write above).
    #[serde(skip)]
    pub(crate) max_generation: u64,
}

impl fmt::Display for DivergedSide {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = if self.name.is_empty() { String::new() } else { format!(" ({})", self.name) };
        write!(
            f,
            "place {} on device {}{name}: last commit {} of generation {} at {} (Unix s), {} extent(s) of {} \
             byte(s), of which {} extent(s) of {} byte(s) the other side lacks",
            self.place,
            self.device,
            self.last_seq,
            self.last_generation,
            self.last_commit_unix_s,
            self.extents,
            self.bytes,
            self.extents_only_here,
            self.bytes_only_here
        )
    }
}

/// What open makes of two members' histories.
#[derive(Debug)]
pub(super) enum Fork {
    /// One history.
    Same,
    /// Metadata copy `keep` went on from the others' session: they are
    /// stale, and the state is recovered from it alone.
    Stale { keep: usize },
    /// Each side went on alone.
    Diverged(Vec<DivergedSide>),
}

/// One copy's history, recovered alone.
struct Side {
    /// Its newest record's session, and every session it went on from.
    session: u64,
    lineage: Vec<u64>,
    recovered: Option<Recovered>,
    table: Option<Table>,
    max_generation: u64,
}

/// Recovers each metadata copy of `images` alone (every one read whole)
/// and tells whether they hold one history, a stale one and a newer one,
/// or two (`conflict`: recovery from all of them found a record two
/// copies hold differently). `places` gives each copy's device place, and
/// `given` each place's index in the devices given and its name.
pub(super) fn analyze(
    images: &mut [Option<[SegmentImage; 2]>],
    volume_id: u64,
    bits: LocationBits,
    conflict: bool,
    places: &[usize],
    given: &[(usize, String)],
) -> Fork {
    let mut sides: Vec<Option<Side>> = Vec::new();
    for copy in 0..images.len() {
        if images[copy].is_none() {
            sides.push(None);
            continue;
        }
        sides.push(Some(super::open::only_copy(images, copy, |alone| side(alone, volume_id, bits))));
    }
    let present: Vec<usize> = (0..sides.len()).filter(|&c| sides[c].is_some()).collect();
    if present.len() < 2 {
        return Fork::Same;
    }
    let side_of = |c: usize| sides[c].as_ref().expect("present");
    // A copy another went on from (its session in the other's lineage,
    // under another session) is stale; the rest are the heads. One
    // session among the heads is one history; two or more, each went on
    // alone (with three metadata copies, any of them may have).
    let stale = |c: usize| {
        let this = side_of(c);
        present
            .iter()
            .any(|&d| d != c && side_of(d).session != this.session && side_of(d).lineage.contains(&this.session))
    };
    let heads: Vec<usize> = present.iter().copied().filter(|&c| !stale(c)).collect();
    let mut sessions: Vec<u64> = heads.iter().map(|&c| side_of(c).session).collect();
    sessions.sort_unstable();
    sessions.dedup();
    if !conflict && sessions.len() == 1 {
        return match heads.len() == present.len() {
            true => Fork::Same,
            false => Fork::Stale { keep: heads[0] },
        };
    }
    // The two sides to name: two heads of different sessions, or (copies
    // that hold one record differently) the first two copies.
    let (a, b) = match heads.iter().find(|&&c| side_of(c).session != side_of(heads[0]).session) {
        Some(&other) => (heads[0], other),
        None => (present[0], present[1]),
    };
    let (x, y) = (side_of(a), side_of(b));
    let describe = |copy: usize, this: &Side, other: &Side| {
        let place = places[copy];
        let (device, name) = given[place].clone();
        let mut out = DivergedSide {
            place,
            device,
            name,
            session: this.session,
            last_generation: 0,
            last_seq: 0,
            last_commit_unix_s: 0,
            extents: 0,
            bytes: 0,
            extents_only_here: 0,
            bytes_only_here: 0,
            max_generation: this.max_generation,
        };
        if let Some(r) = &this.recovered {
            (out.last_generation, out.last_seq, out.last_commit_unix_s) =
                (r.generation, r.seq, u64::from(r.last_unix_s));
        }
        if let Some(table) = &this.table {
            for (id, entry) in table.iter() {
                let bytes = u64::from(entry.blocks) * BLOCK_SIZE as u64;
                out.extents += 1;
                out.bytes += bytes;
                if other.table.as_ref().is_none_or(|t| t.get(id) != Some(entry)) {
                    out.extents_only_here += 1;
                    out.bytes_only_here += bytes;
                }
            }
        }
        out
    };
    Fork::Diverged(vec![describe(a, x, y), describe(b, y, x)])
}

/// One copy's history: recovered alone, its extent table rebuilt, its
/// sessions. A copy that does not recover alone keeps the sessions its
/// headers name.
fn side(images: &[Option<[SegmentImage; 2]>], volume_id: u64, bits: LocationBits) -> Side {
    let max_generation = max_generation(images, volume_id);
    let Ok(recovered) = recover(images, volume_id, false) else {
        let tips = crate::journal::recovery::tips(images, volume_id);
        let header_session = tips.iter().flatten().next().map_or(0, |t| t.session);
        return Side {
            session: header_session,
            lineage: vec![header_session],
            recovered: None,
            table: None,
            max_generation,
        };
    };
    let mut lineage: Vec<u64> = recovered.sessions.iter().map(|s| s.id).collect();
    let mut table = Table::new(bits);
    let mut whole = true;
    for replay in &recovered.replay {
        match replay.pages(images, volume_id) {
            Ok(pages) => {
                for page in pages {
                    whole &= table.load_page(&page).is_ok();
                }
            }
            Err(_) => whole = false,
        }
    }
    for replay in &recovered.replay {
        let Ok(ops) = replay.ops(images) else {
            whole = false;
            continue;
        };
        for op in ops {
            match op {
                Op::Add(record) => whole &= table.put(record.id, &record.entry).is_ok(),
                Op::Free(id) => {
                    table.remove(id);
                }
                Op::Move { id, lane, to } => {
                    table.set_location(id, usize::from(lane), to);
                }
                Op::Relane { id, from, lane, to } => {
                    table.relane(id, usize::from(from), usize::from(lane), to);
                }
                Op::Session(SessionRecord { id, .. }) => lineage.push(id),
                _ => {}
            }
        }
    }
    table.finish_load();
    let session = recovered.last_session;
    lineage.push(session);
    Side { session, lineage, table: whole.then_some(table), recovered: Some(recovered), max_generation }
}

impl Volume {
    /// Opens a mirror whose members went on apart ([`Error::Diverged`]),
    /// keeping the side on `devices[keep]`: that side opens alone, and the
    /// other device is taken as a blank replacement in its place (its
    /// data and metadata from its own history overwritten: see what
    /// [`Error::Diverged`] says it loses), every copy it should hold
    /// missing. The caller then resilvers it ([`Volume::resilver`] or the
    /// scrub crate's engine). Refused, with nothing written, unless the
    /// two devices given are this volume's two members and have diverged.
    pub fn resolve(devices: Vec<Device>, keep: usize, options: &VolumeOptions) -> Result<Volume> {
        if devices.len() != 2 || keep > 1 {
            return Err(Error::InvalidArgument(format!(
                "resolve takes the mirror's two devices and which to keep (0 or 1); got {} device(s), keep {keep}",
                devices.len()
            )));
        }
        let together = VolumeOptions { degraded: false, ..options.clone() };
        let mut front = super::open::front(devices, &together, true, true)?;
        let superblock = front.label.superblock.clone();
        let id = front.label.volume_id;
        let fork = super::open::fork(&mut front.images, &superblock, id, false, &front.order, &front.devices)?;
        let Fork::Diverged(sides) = fork else {
            return Err(Error::InvalidArgument(
                "the members have not gone on apart: open them together (a stale member rejoins by itself)".into(),
            ));
        };
        let lost = sides.iter().find(|s| s.device != keep).expect("two sides").clone();
        let above = sides.iter().map(|s| s.max_generation).max().unwrap_or(0);
        let mut take = |given: usize| {
            let place = front.order.iter().position(|&g| g == Some(given)).expect("both placed");
            front.devices[place].take().expect("present")
        };
        let (kept, dropped) = (take(keep), take(1 - keep));
        log::warn!("keeping device {keep}; the other side loses {lost}");
        let alone = VolumeOptions { degraded: true, ..options.clone() };
        let mut volume = Volume::open(vec![kept], &alone)?;
        // Every record the rebuilt device held stays outranked.
        volume.journal.next_generation = volume.journal.next_generation.max(above + 1);
        volume.replace(lost.place, dropped, true)?;
        Ok(volume)
    }
}

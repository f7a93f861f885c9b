//! What stands outside the devices: the [`Host`] a scenario asks to damage
//! media, pull a device or run a tool, and to bring the controllers up as
//! a new process would. On QEMU that is the machine running QEMU, asked by
//! lines on the guest's console (`hack/guest`'s `volume-check`); on the
//! simulator, the test itself (`testkit/tests/sim_scenarios.rs`).

use nvme_driver::Controller;
use std::time::Duration;
use zoned_allocator::Device;

/// How long a scenario waits for the host's change to a device to show
/// (the QEMU host hashes whole images first), and how often it looks.
pub const HOST_WAIT_MAX: Duration = Duration::from_secs(60);
pub const HOST_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Bytes of one device's media: namespace 1 of the phase's controller
/// `device` (in the order the phase names its controllers), from byte
/// `offset` (an LBA times the LBA size).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MediaRange {
    pub device: usize,
    pub offset: u64,
    pub len: u64,
}

/// The host of a scenario or phase. Requests may return before their
/// change shows through the device: the scenario looks until it does,
/// within a bound.
pub trait Host {
    /// Inverts `len` bytes at byte `offset` of namespace 1 of the first
    /// controller (an LBA times the LBA size, plus an offset in the
    /// block), for at most [`super::CORRUPTION_WAIT_MAX`] to show.
    fn corrupt(&mut self, offset: u64, len: usize) -> Result<(), String>;

    /// Brings up the phase's controllers, in the phase's order, as a new
    /// process finds them.
    fn controllers(&mut self) -> Result<Vec<Controller>, String>;

    /// The address device `device` of the phase goes by (its PCI address
    /// on QEMU), which the volume's status shows.
    fn address(&self, device: usize) -> String;

    /// Overwrites `ranges` with random bytes, in order, each from its last
    /// block to its first: a scenario that watches a range's first block
    /// (a label, a segment's checkpoint) sees the rest changed once that
    /// block has. Keeps what they held for [`Host::restore`]; nothing may
    /// write to the devices until then.
    fn overwrite(&mut self, ranges: &[MediaRange]) -> Result<(), String>;

    /// Requires that nothing wrote to the devices since the last
    /// overwrite, then writes back what `ranges` held before it, each
    /// from its last block to its first.
    fn restore(&mut self, ranges: &[MediaRange]) -> Result<(), String>;

    /// Runs the `seqwrite` tool, without `--format`, on the phase's two
    /// controllers as a mirror, the scenario having let them go; returns
    /// its refusal (which must say "nothing was formatted"), or why it did
    /// not refuse.
    fn seqwrite_refusal(&mut self) -> Result<String, String>;

    /// Pulls device `device` out of the machine while the scenario uses
    /// it, as a hot unplug does.
    fn unplug(&mut self, device: usize) -> Result<(), String>;

    /// Waits until the device an earlier phase pulled has left the machine
    /// for good; says how long that took.
    fn wait_removed(&mut self) -> Result<String, String>;

    /// Takes the pulled device's `Device` and controller at the end of the
    /// phase that pulled it. By default they are dropped.
    fn release_pulled(&mut self, device: Device, controller: Controller) {
        drop((device, controller));
    }
}

/// Random bytes for `len` bytes at byte `offset` of a device, seeded by
/// the place so that a rerun writes the same: what a failing or foreign
/// writer leaves. Both hosts overwrite with these.
pub fn garbage(offset: u64, len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    crate::Prng::new(offset ^ 0x6A09_E667_F3BC_C908).fill(&mut bytes);
    bytes
}

/// What a host's overwrites replaced, for its restores: per place `K` (a
/// device, a backing image), each range's offset and the bytes it held,
/// latest last.
#[derive(Debug)]
pub struct SavedRanges<K> {
    saved: Vec<(K, u64, Vec<u8>)>,
}

impl<K> Default for SavedRanges<K> {
    fn default() -> Self {
        SavedRanges { saved: Vec::new() }
    }
}

impl<K: PartialEq> SavedRanges<K> {
    /// Keeps what `offset..offset + held.len()` of `place` held.
    pub fn keep(&mut self, place: K, offset: u64, held: Vec<u8>) {
        self.saved.push((place, offset, held));
    }

    /// What `len` bytes at `offset` of `place` held before the latest
    /// overwrite that covered them all.
    pub fn held(&self, place: &K, offset: u64, len: u64) -> Option<&[u8]> {
        let (_, start, bytes) =
            self.saved.iter().rev().find(|(p, start, bytes)| {
                p == place && *start <= offset && offset + len <= start + bytes.len() as u64
            })?;
        let at = (offset - start) as usize;
        Some(&bytes[at..at + len as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_covering_overwrite_answers() {
        let mut saved = SavedRanges::default();
        saved.keep(0usize, 100, vec![1; 50]);
        saved.keep(1usize, 100, vec![2; 50]);
        saved.keep(0usize, 120, vec![3; 10]);
        assert_eq!(saved.held(&0, 120, 10), Some(&[3u8; 10][..]));
        assert_eq!(saved.held(&0, 110, 20), Some(&[1u8; 20][..]));
        assert_eq!(saved.held(&1, 140, 10), Some(&[2u8; 10][..]));
        assert_eq!(saved.held(&0, 140, 11), None, "past the end");
        assert_eq!(saved.held(&2, 100, 1), None, "another place");
    }

    #[test]
    fn garbage_is_a_function_of_its_place() {
        assert_eq!(garbage(4096, 64), garbage(4096, 64));
        assert_ne!(garbage(4096, 64), garbage(8192, 64));
        assert!(garbage(0, 4096).iter().any(|&b| b != 0));
    }
}

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

//! Opening controllers, devices and volumes the way every tool does:
//! one VFIO container, the devices chosen from `--pci` and `--ns`
//! ([`VolumeLocation`], which the volume tools share), each device told
//! its address.

use crate::args::{self, BLOCK_BYTES, SOFTWARE_ZONE_BYTES_MAX};
use nvme_driver::vfio::{self, Vfio};
use nvme_driver::{Controller, ControllerOptions, Transport};
use std::sync::Arc;
use zoned_allocator::{Device, DeviceOptions, DeviceState, Error, Volume, VolumeOptions};

/// The VFIO container every controller a tool opens goes into: one IOMMU
/// address space, so a DMA buffer of one controller is reachable by the
/// others (a resilver writes the survivor's reads to the new device as
/// they are).
fn container() -> Result<Arc<Vfio>, String> {
    static CONTAINER: std::sync::OnceLock<Arc<Vfio>> = std::sync::OnceLock::new();
    if let Some(container) = CONTAINER.get() {
        return Ok(Arc::clone(container));
    }
    let container = Vfio::new().map_err(|e| e.to_string())?;
    Ok(Arc::clone(CONTAINER.get_or_init(|| container)))
}

/// Opens and brings up the controller at `pci`, or the first NVMe function
/// bound to vfio-pci, in the tool's one VFIO container.
pub fn open_controller(pci: Option<&str>, options: ControllerOptions) -> Result<Controller, String> {
    let bdf = match pci {
        Some(bdf) => bdf.to_string(),
        None => vfio::vfio_nvme_functions()
            .into_iter()
            .next()
            .ok_or_else(|| nvme_driver::Error::NoVfioDevice.to_string())?,
    };
    let device = container()?.open(&bdf).map_err(|e| e.to_string())?;
    let transport: Arc<dyn Transport> = device;
    Controller::init(transport, options).map_err(|e| format!("{bdf}: {e}"))
}

/// Brings up the controllers `pci` names, in order, or the first NVMe
/// function bound to vfio-pci when it names none.
pub fn open_controllers(pci: &[String]) -> Result<Vec<Controller>, String> {
    let options = ControllerOptions::default();
    if pci.is_empty() {
        return Ok(vec![open_controller(None, options)?]);
    }
    pci.iter().map(|bdf| open_controller(Some(bdf), options.clone())).collect()
}

/// One device of a volume: which controller (an index into the `--pci`
/// list, or 0 for the default controller) and which namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceChoice {
    /// Index of the controller.
    pub controller: usize,
    /// Namespace ID.
    pub nsid: u32,
}

/// The devices a volume of `wanted` devices (1 to [`VOLUME_DEVICES_MAX`])
/// is on, from the `--pci` and `--ns` lists exactly as given; no `--ns` is
/// namespace 1. Nothing is inferred: N devices are N `--pci` (with one
/// `--ns` for all, or one each), or one controller and N different `--ns`.
pub fn choose_devices(pci: &[String], ns: &[u32], wanted: usize) -> Result<Vec<DeviceChoice>, String> {
    assert!((1..=VOLUME_DEVICES_MAX).contains(&wanted), "a volume is on 1 to {VOLUME_DEVICES_MAX} devices");
    let how = if wanted == 2 {
        "give two --pci (one namespace each, --ns for both or one per --pci), or one --pci and two --ns (e.g. --ns 1,2)"
            .to_string()
    } else {
        format!(
            "give {wanted} --pci (one namespace each, --ns for all or one per --pci), or one --pci and {wanted} --ns"
        )
    };
    if pci.len() > wanted || ns.len() > wanted {
        return Err(format!("{wanted} device(s) wanted, {} --pci and {} --ns given", pci.len(), ns.len()));
    }
    if let Some(bdf) = pci.iter().enumerate().find(|(at, bdf)| pci[..*at].contains(bdf)).map(|(_, bdf)| bdf) {
        return Err(format!("--pci {bdf} given twice: {how}"));
    }
    let first = ns.first().copied().unwrap_or(1);
    let choices: Vec<DeviceChoice> = if wanted == 1 {
        vec![DeviceChoice { controller: 0, nsid: first }]
    } else if pci.len() == wanted {
        if ns.len() > 1 && ns.len() != wanted {
            return Err(format!("{} --ns for {wanted} --pci: one for all, or one each", ns.len()));
        }
        (0..wanted).map(|c| DeviceChoice { controller: c, nsid: ns.get(c).copied().unwrap_or(first) }).collect()
    } else if pci.len() <= 1 && ns.len() == wanted {
        if let Some(&twice) = ns.iter().enumerate().find(|(at, n)| ns[..*at].contains(n)).map(|(_, n)| n) {
            return Err(format!("--ns {twice},{twice} is one namespace twice: {how}"));
        }
        ns.iter().map(|&nsid| DeviceChoice { controller: 0, nsid }).collect()
    } else {
        let given = pci.len().max(ns.len()).max(1);
        let words = if wanted == 2 { "two devices wanted".to_string() } else { format!("{wanted} devices wanted") };
        return Err(format!("{words}, {given} given: {how}"));
    };
    assert_eq!(choices.len(), wanted, "one choice per device");
    Ok(choices)
}

/// Devices a volume is on, at most: a pool's sixteen.
pub const VOLUME_DEVICES_MAX: usize = zoned_allocator::chooser::MAX_DEVICES;

/// Where a volume is, as every volume tool takes it (flattened into the
/// tool's arguments; the tool has a `--sim` these conflict with).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct VolumeLocation {
    /// Controller PCI address of the volume's devices: one, or one per
    /// device of a volume across controllers (up to 16). Default: the
    /// first NVMe function bound to vfio-pci.
    #[arg(long = "pci", value_name = "BDF", value_parser = args::pci_address)]
    pub pci: Vec<String>,
    /// Namespace IDs (1..=4294967294), comma-separated, one per device, in
    /// any order: a mirror on one controller takes two (--ns 1,2); with
    /// several --pci, one ID serves all. Default: 1.
    #[arg(long = "ns", value_name = "NSID", value_delimiter = ',', value_parser = args::nsid, conflicts_with = "sim")]
    pub ns: Vec<u32>,
    /// Software zone size the volume was formatted with (conventional
    /// namespaces), a multiple of 4k.
    #[arg(long, value_parser = args::size_in(BLOCK_BYTES, BLOCK_BYTES, SOFTWARE_ZONE_BYTES_MAX))]
    pub software_zone: Option<u64>,
    /// Open a mirror with members missing, blank or failing (up to its
    /// copies less one), on the devices left; each is recorded failed
    /// (`volume replace` puts a new device in its place, `volume rebuild`
    /// writes its copies onto the others).
    #[arg(long)]
    pub degraded: bool,
}

impl VolumeLocation {
    /// The volume's devices, exactly as --pci and --ns give them (1 to
    /// 16; the volume finds each one's place from its label).
    pub fn device_choices(&self) -> Result<Vec<DeviceChoice>, String> {
        let wanted = self.pci.len().max(self.ns.len()).max(1);
        if wanted > VOLUME_DEVICES_MAX {
            return Err(format!(
                "a volume is on 1 to {VOLUME_DEVICES_MAX} devices: {} --pci and {} --ns given",
                self.pci.len(),
                self.ns.len()
            ));
        }
        choose_devices(&self.pci, &self.ns, wanted)
    }

    /// Brings up the controllers --pci names, in order (or the first
    /// vfio-pci NVMe function).
    pub fn open_controllers(&self) -> Result<Vec<Controller>, String> {
        open_controllers(&self.pci)
    }

    /// Opens the devices [`VolumeLocation::device_choices`] names on
    /// `controllers`, each told its controller's address.
    pub fn open_devices(&self, controllers: &[Controller], options: DeviceOptions) -> Result<Vec<Device>, String> {
        let chosen = self.device_choices()?;
        chosen.into_iter().map(|choice| open_device(controllers, choice, options)).collect()
    }

    /// The options to open the volume with.
    pub fn volume_options(&self, degraded: bool) -> VolumeOptions {
        VolumeOptions { software_zone_bytes: self.software_zone, degraded, ..VolumeOptions::default() }
    }

    /// Opens the volume on `devices` (degraded when asked).
    pub fn open_volume(&self, devices: Vec<Device>, degraded: bool) -> Result<Volume, String> {
        Volume::open(devices, &self.volume_options(degraded)).map_err(|e| format!("open: {}", explain(e)))
    }
}

/// Opens the device `choice` names on `controllers`, told its address.
pub fn open_device(controllers: &[Controller], choice: DeviceChoice, options: DeviceOptions) -> Result<Device, String> {
    let controller = controllers.get(choice.controller).ok_or("a device on a controller not opened")?;
    let name = controller.transport().name().to_string();
    let nsid = choice.nsid;
    let mut device = Device::open(controller, nsid, options).map_err(|e| format!("{name} namespace {nsid}: {e}"))?;
    device.set_identity(&name);
    Ok(device)
}

/// How a confirmation names `device` before destroying what it holds:
/// its namespace and address, the controller's model and serial, its size,
/// and what it holds ([`Volume::probe`], reads only). On a host with
/// several drives the address alone is how the wrong one gets wiped.
pub fn named(device: &mut Device) -> String {
    named_and_held(device).0
}

/// [`named`], and what the device holds.
pub fn named_and_held(device: &mut Device) -> (String, DeviceState) {
    let state = Volume::probe(device);
    (format!("{}, which holds {}", identified(device), holds(&state)), state)
}

/// A device by its namespace, address, model, serial and size.
fn identified(device: &Device) -> String {
    let (address, model, serial) = device.identity();
    let ns = device.namespace();
    let bytes = ns.capacity_blocks() * u64::from(ns.block_size());
    let kind = if device.is_zoned() { ", zoned" } else { "" };
    format!(
        "namespace {} of {address} ({model}, serial {serial}, {}{kind})",
        ns.nsid(),
        crate::volume_view::human_bytes(bytes)
    )
}

/// [`named`] for namespace `nsid` of `controller`, for a tool that writes
/// to the namespace itself (perf, zeroout): opened as a device to read
/// what it holds, then closed.
pub fn named_namespace(controller: &Controller, nsid: u32) -> String {
    probe_namespace(controller, nsid, controller.transport().name()).0
}

/// [`named_namespace`] with the controller at `address`, and what the
/// namespace holds (`None` when it cannot be opened as a device to read
/// it).
pub fn probe_namespace(controller: &Controller, nsid: u32, address: &str) -> (String, Option<DeviceState>) {
    let options = DeviceOptions { queue_depth: 8, buffers: 4, ..DeviceOptions::default() };
    match Device::open(controller, nsid, options) {
        Ok(mut device) => {
            device.set_identity(address);
            let (named, state) = named_and_held(&mut device);
            (named, Some(state))
        }
        Err(error) => {
            let id = controller.identify();
            let named = format!(
                "namespace {nsid} of {address} ({}, serial {}; what it holds could not be read: {error})",
                id.mn.trim(),
                id.sn.trim()
            );
            (named, None)
        }
    }
}

/// What a device holds, in words.
pub fn holds(state: &DeviceState) -> String {
    match state {
        DeviceState::Blank => "nothing (blank)".into(),
        DeviceState::Member { volume_id, device_index, profile } => {
            let profile = format!("{profile:?}").to_lowercase();
            format!("place {device_index} of {profile} volume {volume_id:#018x}")
        }
        DeviceState::Unreadable(what) => format!("no label, and reads failed ({what}): it may hold a volume"),
        DeviceState::Unrecognized => "data that is not a volume's".into(),
        DeviceState::OtherVersion(version) => format!("a volume of format version {version}"),
    }
}

/// Opens the volume on `devices` for a tool that writes to it, without
/// `--format`: `Ok(None)` when there is none and every device reads back
/// blank (nothing can be lost, so the tool may make one); any other error
/// (unreadable, damaged, foreign, another version, degraded) is a refusal
/// with its reason. A tool never formats by inference.
pub fn open_for_writing(devices: Vec<Device>, options: &VolumeOptions) -> Result<Option<Volume>, String> {
    match Volume::open(devices, options) {
        Ok(volume) => Ok(Some(volume)),
        Err(Error::NoVolume) => Ok(None),
        Err(e) => Err(refusal(e)),
    }
}

/// Why a tool that writes will not open the volume, and what to do. Only
/// a device that holds something unknown hears of `--format`: never a
/// member of the volume, one that could not be read, or another volume's.
fn refusal(error: Error) -> String {
    match error {
        e @ Error::Degraded { .. } => format!("open: {e}; pass --degraded to write to it on the devices left"),
        e @ (Error::Unreadable { .. } | Error::BlankDevice { .. }) => format!(
            "open: {e}; nothing was formatted or written. Pass --degraded to go on without that device, then \
             `volume replace` puts a new device in its place"
        ),
        e @ Error::Unrecognized { .. } => {
            format!("open: {e}; nothing was formatted (--format destroys what the devices hold, after asking)")
        }
        e => format!("open: {e}; nothing was formatted or written"),
    }
}

/// An error from opening (or checking) a volume, with what to do about it
/// when there is something.
pub fn explain(error: Error) -> String {
    match error {
        Error::Degraded { .. } => format!(
            "{error}; pass --degraded to open it on the devices left (then `volume replace` puts a new device in \
             the missing one's place)"
        ),
        error => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A confirmation names a device by what it is and what it holds:
    /// blank, then a volume's member with the volume's ID.
    #[test]
    fn a_device_is_named_by_address_model_serial_and_what_it_holds() {
        use nvme_driver::sim::{SimConfig, Simulator};
        let config = SimConfig { serial: "SN-7".into(), ..SimConfig::zoned(64 << 11, 512, 8 << 11, 8 << 11) };
        let transport: Arc<dyn Transport> = Simulator::new(config);
        let controller = Controller::init(transport, ControllerOptions::default()).unwrap();
        let blank = named_namespace(&controller, 1);
        assert!(blank.starts_with("namespace 1 of sim (QEMU NVMe Ctrl, serial SN-7, 64.0 MiB, zoned)"), "{blank}");
        assert!(blank.ends_with("which holds nothing (blank)"), "{blank}");
        let device = Device::open(&controller, 1, DeviceOptions::default()).unwrap();
        let volume = Volume::format(vec![device], &VolumeOptions::default()).unwrap();
        let id = volume.id();
        drop(volume.close().unwrap());
        let member = named_namespace(&controller, 1);
        assert!(member.ends_with(&format!("which holds place 0 of single volume {id:#018x}")), "{member}");
    }

    fn choose(pci: &[&str], ns: &[u32], wanted: usize) -> Result<Vec<(usize, u32)>, String> {
        let pci: Vec<String> = pci.iter().map(|s| s.to_string()).collect();
        choose_devices(&pci, ns, wanted).map(|c| c.iter().map(|d| (d.controller, d.nsid)).collect())
    }

    /// A member that cannot be read, or is blank, or another volume's
    /// device, never hears of `--format`; a device holding something
    /// unknown does.
    #[test]
    fn refusals_mention_format_only_for_unknown_contents() {
        let unreadable = refusal(Error::Unreadable { device: 0, what: "reading extent 3: unrecovered".into() });
        assert!(!unreadable.contains("--format") && unreadable.contains("--degraded"), "{unreadable}");
        assert!(unreadable.contains("volume replace"), "{unreadable}");
        let blank = refusal(Error::BlankDevice { device: 1, volume_id: 7 });
        assert!(!blank.contains("--format") && blank.contains("volume replace"), "{blank}");
        let foreign = refusal(Error::ForeignDevice { device: 1, found: 7, expected: 8 });
        assert!(!foreign.contains("--format"), "{foreign}");
        assert!(refusal(Error::Unrecognized { device: 0 }).contains("--format"));
        // Every refusal says nothing was formatted (scripts and tests look for it).
        for text in [unreadable, blank, foreign] {
            assert!(text.contains("nothing was formatted"), "{text}");
        }
    }

    #[test]
    fn one_device() {
        assert_eq!(choose(&[], &[], 1), Ok(vec![(0, 1)]));
        assert_eq!(choose(&["a"], &[3], 1), Ok(vec![(0, 3)]));
        assert!(choose(&["a", "b"], &[], 1).unwrap_err().contains("2 --pci"));
        assert!(choose(&["a"], &[1, 2], 1).unwrap_err().contains("2 --ns"));
    }

    #[test]
    fn two_devices_are_given_never_inferred() {
        // The old inference: one controller, one namespace, a mirror on N and N+1.
        for ns in [&[][..], &[1], &[4]] {
            let message = choose(&["a"], ns, 2).unwrap_err();
            assert!(message.contains("two --pci") && message.contains("two --ns"), "{message}");
            assert!(choose(&[], ns, 2).is_err());
        }
        assert!(choose(&["a"], &[1, 1], 2).unwrap_err().contains("one namespace twice"));
        assert!(choose(&["a", "a"], &[], 2).unwrap_err().contains("given twice"));
        assert_eq!(choose(&["a"], &[1, 2], 2), Ok(vec![(0, 1), (0, 2)]));
        assert_eq!(choose(&[], &[2, 1], 2), Ok(vec![(0, 2), (0, 1)]));
        assert_eq!(choose(&["a", "b"], &[], 2), Ok(vec![(0, 1), (1, 1)]));
        assert_eq!(choose(&["a", "b"], &[3], 2), Ok(vec![(0, 3), (1, 3)]));
        assert_eq!(choose(&["a", "b"], &[3, 1], 2), Ok(vec![(0, 3), (1, 1)]));
        assert!(choose(&["a", "b", "c"], &[], 2).is_err());
        assert!(choose(&["a"], &[1, 2, 3], 2).is_err());
    }

    #[test]
    fn a_pool_of_many_devices_is_given_device_by_device() {
        assert_eq!(choose(&["a", "b", "c", "d"], &[], 4), Ok(vec![(0, 1), (1, 1), (2, 1), (3, 1)]));
        assert_eq!(choose(&["a", "b", "c"], &[2], 3), Ok(vec![(0, 2), (1, 2), (2, 2)]));
        assert_eq!(choose(&["a", "b", "c"], &[3, 2, 1], 3), Ok(vec![(0, 3), (1, 2), (2, 1)]));
        assert_eq!(choose(&["a"], &[1, 2, 3], 3), Ok(vec![(0, 1), (0, 2), (0, 3)]));
        assert!(choose(&["a", "b", "c"], &[1, 2], 3).unwrap_err().contains("2 --ns for 3 --pci"));
        assert!(choose(&["a", "b", "a"], &[], 3).unwrap_err().contains("given twice"));
        assert!(choose(&["a"], &[1, 2, 1], 3).unwrap_err().contains("one namespace twice"));
        assert!(choose(&["a", "b"], &[], 3).unwrap_err().contains("3 devices wanted, 2 given"));
    }
}

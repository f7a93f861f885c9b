//! Emulated NVMe controllers, one namespace each, as QEMU 7.2's `nvme` and
//! `nvme-ns` devices describe them (QEMU `hw/nvme/ctrl.c`, `hw/nvme/ns.c`).
//!
//! Supported: Debian bookworm's QEMU 7.2, which `hack/deps` installs, and
//! 10.0.1 or later (`RIG_QEMU`: bookworm-backports has 10.0.2); not 10.0.0,
//! whose controller hot-plug is broken. Both remove a controller safely only
//! once the driver has deleted its I/O queues (docs/rig.md, "QEMU and
//! removal"); neither hot-plugs a namespace onto a controller, so a
//! [`Controller::hot_added`] controller brings its own. The rig's tests run
//! on 7.2; on 10.0.2 only hack/run's configuration was run (docs/rig.md).
//!
//! A controller's backing image can sit behind QEMU's `blkdebug` driver
//! (QEMU `block/blkdebug.c`, `docs/devel/testing/blkdebug.rst`), which fails
//! reads of chosen sectors: see [`Controller::read_errors`].

use crate::Error;
use crate::{format_size, parse_size};

/// What the backing drive does with a deallocate (DSM) request. With
/// `Ignore` (QEMU's default) deallocated blocks keep their old data although
/// the controller reports DLFEAT "reads zeroes".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Discard {
    #[default]
    Ignore,
    Unmap,
}

/// Zoned namespace geometry and limits (`nvme-ns` `zoned.*` properties).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Zoned {
    pub zone_size_bytes: u64,
    /// Zone capacity; `None` means equal to the zone size.
    pub zone_capacity_bytes: Option<u64>,
    /// Max open zones; `None` means no limit (QEMU's 0).
    pub max_open: Option<u32>,
    /// Max active zones; `None` means no limit.
    pub max_active: Option<u32>,
    /// Zone Append Size Limit as a power of two of the minimum page size;
    /// `None` means MDTS applies. A property of the controller, not the
    /// namespace.
    pub zasl: Option<u8>,
}

/// One emulated controller with one namespace on its own backing image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Controller {
    pub size_bytes: u64,
    /// Logical block size: 512 or 4096.
    pub lba_bytes: u32,
    /// Maximum Data Transfer Size as a power of two of the minimum page size;
    /// `None` keeps QEMU's default (7, 512 KiB).
    pub mdts: Option<u8>,
    pub discard: Discard,
    /// Report Intel's PCI IDs (8086:5845) instead of Red Hat's (1b36:0010).
    pub intel_id: bool,
    /// Leave the controller to the guest kernel's nvme driver.
    pub kernel: bool,
    /// Put the controller behind a PCIe root port of its own (at the
    /// controller's slot), so it can be hot-unplugged with `device_del`.
    /// The controller then appears in the guest on the root port's
    /// secondary bus (`0000:01:00.0` for the first such controller).
    pub hotplug: bool,
    /// Absent at boot: an empty PCIe root port (a slot) and the backing
    /// image wait for [`Controller::hot_add_command`], QMP `device_add`,
    /// which plugs a controller with namespace 1 on that image, as an
    /// operator slides a new drive into a slot. QEMU 7.2 and 10.0 cannot
    /// hot-plug a namespace device onto a controller, so the namespace is
    /// the controller's own (`nvme` `drive=`), formatted without metadata
    /// (LBA format 0); QEMU lists the formats with metadata too, for a
    /// Format NVM.
    pub hot_added: bool,
    pub zoned: Option<Zoned>,
    /// 512-byte sectors of the backing image whose reads fail; see
    /// [`Controller::read_errors`]. Empty: no blkdebug layer.
    pub read_error_sectors: Vec<u64>,
    /// Per-LBA metadata bytes, in a separate buffer, no protection
    /// information (`nvme-ns` `ms=`, `mset=0`, `pi=0`); 0 for none. QEMU
    /// keeps it after the data in the backing image, so the namespace
    /// holds `size / (lba + ms)` LBAs.
    pub metadata_bytes: u16,
}

/// `errno` blkdebug fails a matching read with: EIO, which QEMU's NVMe
/// controller completes as Unrecovered Read Error (SCT 2h / SC 81h,
/// `nvme_aio_err` in `hw/nvme/ctrl.c`).
const BLKDEBUG_EIO: u32 = 5;

impl Controller {
    /// A conventional namespace of `size_bytes` with 512-byte blocks.
    pub fn nvme(size_bytes: u64) -> Self {
        Controller {
            size_bytes,
            lba_bytes: 512,
            mdts: None,
            discard: Discard::Ignore,
            intel_id: false,
            kernel: false,
            hotplug: false,
            hot_added: false,
            zoned: None,
            read_error_sectors: Vec::new(),
            metadata_bytes: 0,
        }
    }

    /// A zoned namespace of `size_bytes` with zones of `zone_size_bytes`.
    pub fn zns(size_bytes: u64, zone_size_bytes: u64) -> Self {
        Controller {
            zoned: Some(Zoned {
                zone_size_bytes,
                zone_capacity_bytes: None,
                max_open: None,
                max_active: None,
                zasl: None,
            }),
            ..Controller::nvme(size_bytes)
        }
    }

    pub fn lba(mut self, lba_bytes: u32) -> Self {
        self.lba_bytes = lba_bytes;
        self
    }
    /// Formats the namespace with `bytes` of metadata per LBA in a
    /// separate buffer (8, 16 or 64, as QEMU 7.2's formats offer).
    pub fn metadata(mut self, bytes: u16) -> Self {
        self.metadata_bytes = bytes;
        self
    }

    pub fn mdts(mut self, mdts: u8) -> Self {
        self.mdts = Some(mdts);
        self
    }
    pub fn discard(mut self, discard: Discard) -> Self {
        self.discard = discard;
        self
    }
    pub fn intel_id(mut self) -> Self {
        self.intel_id = true;
        self
    }
    pub fn kernel(mut self) -> Self {
        self.kernel = true;
        self
    }
    /// See [`Controller::hotplug`](Controller#structfield.hotplug).
    pub fn hotplug(mut self) -> Self {
        self.hotplug = true;
        self
    }
    /// See [`Controller::hot_added`](Controller#structfield.hot_added);
    /// implies [`Controller::hotplug`].
    pub fn hot_added(mut self) -> Self {
        self.hotplug = true;
        self.hot_added = true;
        self
    }
    /// The QMP command that plugs controller number `index`, made with
    /// [`Controller::hot_added`], into its slot (QOM id `nvme{index}`).
    pub fn hot_add_command(&self, index: usize) -> String {
        format!(
            r#"{{"execute":"device_add","arguments":{{"driver":"nvme","id":"nvme{index}","bus":"rp{index}","serial":"rig{index}","drive":"drive{index}","logical_block_size":{lba},"physical_block_size":{lba}}}}}"#,
            lba = self.lba_bytes
        )
    }
    /// Puts the backing image behind QEMU's `blkdebug` driver with one rule
    /// per sector: every read of the image that covers byte `sector * 512`
    /// fails with EIO, for as long as QEMU runs (the rules do not fire
    /// once and stop, and a write to the sector does not clear them).
    /// Writes, flushes and discards pass through. Sectors are 512 bytes
    /// whatever the namespace's block size, counted from the start of the
    /// image (the namespace's byte offset / 512).
    ///
    /// Each rule is `event=read_aio` (the raw format driver announces every
    /// guest data read to its `file` child, here blkdebug) with
    /// `iotype=read`, so only reads are failed.
    pub fn read_errors(mut self, sectors: impl IntoIterator<Item = u64>) -> Self {
        self.read_error_sectors.extend(sectors);
        self
    }
    fn zoned_mut(&mut self) -> &mut Zoned {
        self.zoned.as_mut().expect("zone options need a ZNS controller (Controller::zns)")
    }
    pub fn zone_capacity(mut self, bytes: u64) -> Self {
        self.zoned_mut().zone_capacity_bytes = Some(bytes);
        self
    }
    pub fn max_open(mut self, zones: u32) -> Self {
        self.zoned_mut().max_open = Some(zones);
        self
    }
    pub fn max_active(mut self, zones: u32) -> Self {
        self.zoned_mut().max_active = Some(zones);
        self
    }
    pub fn zasl(mut self, zasl: u8) -> Self {
        self.zoned_mut().zasl = Some(zasl);
        self
    }

    /// Parses the `hack/vm` forms `SIZE[,lba=N][,ms=N][,mdts=N][,discard=unmap|ignore][,intel-id][,kernel]`
    /// (`zoned == false`) and `SIZE,zone=SIZE[,cap=SIZE][,max-open=N][,max-active=N][,zasl=N][,ms=N][,kernel]`.
    pub fn parse(text: &str, zoned: bool) -> Result<Self, Error> {
        let mut parts = text.split(',');
        let size_bytes = parse_size(parts.next().unwrap_or_default())?;
        let mut controller = Controller::nvme(size_bytes);
        let mut zone =
            Zoned { zone_size_bytes: 0, zone_capacity_bytes: None, max_open: None, max_active: None, zasl: None };
        for part in parts {
            let (key, value) = match part.split_once('=') {
                Some((key, value)) => (key, Some(value)),
                None => (part, None),
            };
            fn need<'a>(key: &str, value: Option<&'a str>) -> Result<&'a str, Error> {
                value.ok_or_else(|| Error::Spec(format!("option {key:?} needs a value")))
            }
            let number = |value: Option<&str>| -> Result<u32, Error> {
                let v = need(key, value)?;
                v.parse().map_err(|_| Error::Spec(format!("option {key}={v}: not a number")))
            };
            match (key, zoned) {
                ("lba", _) => controller.lba_bytes = number(value)?,
                ("ms", _) => {
                    controller.metadata_bytes = u16::try_from(number(value)?)
                        .map_err(|_| Error::Spec(format!("ms={}: expected 8, 16 or 64", value.unwrap_or_default())))?
                }
                ("mdts", _) => controller.mdts = Some(small(key, number(value)?)?),
                ("discard", false) => {
                    controller.discard = match need(key, value)? {
                        "unmap" => Discard::Unmap,
                        "ignore" => Discard::Ignore,
                        other => return Err(Error::Spec(format!("discard={other}: expected unmap or ignore"))),
                    }
                }
                ("intel-id", false) if value.is_none() => controller.intel_id = true,
                ("kernel", _) if value.is_none() => controller.kernel = true,
                ("zone", true) => zone.zone_size_bytes = parse_size(need(key, value)?)?,
                ("cap", true) => zone.zone_capacity_bytes = Some(parse_size(need(key, value)?)?),
                ("max-open", true) => zone.max_open = Some(number(value)?),
                ("max-active", true) => zone.max_active = Some(number(value)?),
                ("zasl", true) => zone.zasl = Some(small(key, number(value)?)?),
                _ => {
                    let kind = if zoned { "--zns" } else { "--nvme" };
                    return Err(Error::Spec(format!("unknown {kind} option {part:?} in {text:?}")));
                }
            }
        }
        if zoned {
            controller.zoned = Some(zone);
        }
        controller.validate()?;
        Ok(controller)
    }

    /// Checks what QEMU would otherwise reject with a less helpful message.
    pub fn validate(&self) -> Result<(), Error> {
        let fail = |msg: String| Err(Error::Spec(msg));
        if self.lba_bytes != 512 && self.lba_bytes != 4096 {
            return fail(format!("lba={}: expected 512 or 4096", self.lba_bytes));
        }
        if self.size_bytes == 0 || !self.size_bytes.is_multiple_of(u64::from(self.lba_bytes)) {
            return fail(format!("size {} is not a non-zero multiple of the block size", self.size_bytes));
        }
        if ![0, 8, 16, 64].contains(&self.metadata_bytes) {
            return fail(format!("ms={}: expected 8, 16 or 64 (QEMU 7.2's metadata sizes)", self.metadata_bytes));
        }
        if self.hot_added && (self.metadata_bytes > 0 || self.zoned.is_some() || self.kernel || self.mdts.is_some()) {
            // The controller's own namespace takes none of these (see
            // `hot_added`); a Format NVM in the guest gives it metadata.
            return fail("a hot-added controller is conventional, without ms=, mdts= or kernel".into());
        }
        if self.metadata_bytes > 0 && self.kernel {
            // Linux's nvme driver gives a namespace whose metadata it
            // cannot supply (no protection information) a capacity of 0.
            return fail("ms= and kernel: the guest's nvme driver cannot use metadata without protection".into());
        }
        let sectors = self.size_bytes / 512;
        if let Some(bad) = self.read_error_sectors.iter().find(|&&s| s >= sectors) {
            return fail(format!("read error at sector {bad}: the image has {sectors} sectors"));
        }
        if let Some(zoned) = &self.zoned {
            if zoned.zone_size_bytes == 0 {
                return fail("a ZNS controller needs zone=SIZE".into());
            }
            if zoned.zone_size_bytes % u64::from(self.lba_bytes) != 0 || zoned.zone_size_bytes > self.size_bytes {
                return fail(format!(
                    "zone={} must be a multiple of the block size and at most the namespace size",
                    format_size(zoned.zone_size_bytes)
                ));
            }
            if let Some(cap) = zoned.zone_capacity_bytes {
                if cap == 0 || cap > zoned.zone_size_bytes || cap % u64::from(self.lba_bytes) != 0 {
                    return fail(format!("cap={} must be a block multiple no larger than the zone", format_size(cap)));
                }
            }
            if let (Some(open), Some(active)) = (zoned.max_open, zoned.max_active) {
                if open > active {
                    return fail(format!("max-open={open} exceeds max-active={active}"));
                }
            }
        }
        Ok(())
    }

    /// The QEMU arguments for controller number `index`, with its backing
    /// image at `image` and its function at PCI slot `slot` of the root bus.
    pub(crate) fn qemu_args(&self, index: usize, image: &str, slot: u8) -> Vec<String> {
        let discard = match self.discard {
            Discard::Unmap => "unmap",
            Discard::Ignore => "ignore",
        };
        let mut args = Vec::new();
        let mut ctrl = if self.hotplug {
            let chassis = index + 1;
            args.extend([
                "-device".to_string(),
                format!("pcie-root-port,id=rp{index},bus=pcie.0,addr={slot:#x},chassis={chassis},slot={chassis}"),
            ]);
            format!("nvme,id=nvme{index},serial=rig{index},bus=rp{index}")
        } else {
            format!("nvme,id=nvme{index},serial=rig{index},bus=pcie.0,addr={slot:#x}")
        };
        if let Some(mdts) = self.mdts {
            ctrl += &format!(",mdts={mdts}");
        }
        if self.intel_id {
            ctrl += ",use-intel-id=on";
        }
        let lba = self.lba_bytes;
        let mut ns = format!(
            "nvme-ns,drive=drive{index},bus=nvme{index},nsid=1,logical_block_size={lba},physical_block_size={lba}"
        );
        if self.metadata_bytes > 0 {
            ns += &format!(",ms={},mset=0,pi=0", self.metadata_bytes);
        }
        if let Some(zoned) = &self.zoned {
            if let Some(zasl) = zoned.zasl {
                ctrl += &format!(",zoned.zasl={zasl}");
            }
            ns += &format!(",zoned=on,zoned.zone_size={}", zoned.zone_size_bytes);
            if let Some(cap) = zoned.zone_capacity_bytes {
                ns += &format!(",zoned.zone_capacity={cap}");
            }
            ns += &format!(
                ",zoned.max_open={},zoned.max_active={}",
                zoned.max_open.unwrap_or(0),
                zoned.max_active.unwrap_or(0)
            );
        }
        args.extend(["-drive".into(), self.drive_arg(index, image, discard)]);
        if !self.hot_added {
            args.extend(["-device".into(), ctrl, "-device".into(), ns]);
        }
        args
    }

    /// The `-drive` value: the raw image, or the image behind blkdebug
    /// (`format=raw` over `file.driver=blkdebug` over the image file) with
    /// one `inject-error` rule per sector of [`Controller::read_errors`].
    fn drive_arg(&self, index: usize, image: &str, discard: &str) -> String {
        let common = format!("if=none,id=drive{index},format=raw,discard={discard}");
        if self.read_error_sectors.is_empty() {
            return format!("file={image},{common}");
        }
        let mut arg = format!("{common},file.driver=blkdebug,file.image.driver=file,file.image.filename={image}");
        for (rule, sector) in self.read_error_sectors.iter().enumerate() {
            let key = format!("file.inject-error.{rule}");
            arg += &format!(",{key}.event=read_aio,{key}.iotype=read,{key}.errno={BLKDEBUG_EIO},{key}.sector={sector}");
        }
        arg
    }
}

fn small(key: &str, value: u32) -> Result<u8, Error> {
    u8::try_from(value).ok().filter(|v| *v <= 31).ok_or_else(|| Error::Spec(format!("{key}={value}: expected 0..=31")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nvme_options() {
        let c = Controller::parse("1G,lba=4096,mdts=5,discard=unmap,intel-id,kernel", false).unwrap();
        assert_eq!(c, Controller::nvme(1 << 30).lba(4096).mdts(5).discard(Discard::Unmap).intel_id().kernel());
    }

    #[test]
    fn metadata_formats_the_namespace_and_is_checked() {
        let c = Controller::parse("1G,zone=64M,ms=8", true).unwrap();
        assert_eq!(c.metadata_bytes, 8);
        let args = c.qemu_args(0, "img", 0x10);
        assert!(args.iter().any(|a| a.starts_with("nvme-ns,") && a.contains(",ms=8,mset=0,pi=0")), "{args:?}");
        assert!(Controller::parse("1G,ms=12", false).is_err());
        assert!(Controller::parse("1G,ms=8,kernel", false).is_err());
        let plain = Controller::nvme(1 << 30).qemu_args(0, "img", 0x10);
        assert!(!plain.iter().any(|a| a.contains("ms=")), "{plain:?}");
    }

    #[test]
    fn parses_zns_options() {
        let c = Controller::parse("2G,zone=64M,cap=48M,max-open=8,max-active=12,zasl=5", true).unwrap();
        let want = Controller::zns(2 << 30, 64 << 20).zone_capacity(48 << 20).max_open(8).max_active(12).zasl(5);
        assert_eq!(c, want);
    }

    #[test]
    fn rejects_bad_specs() {
        for (text, zoned) in [
            ("1G,lba=1024", false),
            ("1G,zone=64M", false),
            ("2G", true),
            ("2G,zone=64M,cap=128M", true),
            ("2G,zone=4G", true),
            ("2G,zone=64M,max-open=9,max-active=8", true),
            ("1G,discard=maybe", false),
            ("1G,mdts=40", false),
            ("1G,intel-id=1", false),
            ("1G,bogus", false),
            ("x", false),
        ] {
            assert!(Controller::parse(text, zoned).is_err(), "{text} accepted");
        }
    }

    #[test]
    fn a_hot_added_controller_leaves_an_empty_slot_and_its_image_for_device_add() {
        let controller = Controller::nvme(1 << 30).hot_added();
        controller.validate().unwrap();
        let args = controller.qemu_args(2, "/tmp/x.img", 0x12).join(" ");
        assert!(args.contains("-device pcie-root-port,id=rp2,bus=pcie.0,addr=0x12,chassis=3,slot=3"), "{args}");
        assert!(args.contains("-drive file=/tmp/x.img,if=none,id=drive2"), "{args}");
        assert!(!args.contains("nvme,") && !args.contains("nvme-ns"), "{args}");
        let command = controller.hot_add_command(2);
        let value: serde_json::Value = serde_json::from_str(&command).unwrap();
        assert_eq!(value["execute"], "device_add");
        assert_eq!(value["arguments"]["bus"], "rp2");
        assert_eq!(value["arguments"]["drive"], "drive2");
        assert!(Controller::nvme(1 << 30).metadata(8).hot_added().validate().is_err());
    }

    #[test]
    fn hotplug_controllers_sit_behind_a_root_port() {
        let args = Controller::nvme(1 << 30).hotplug().qemu_args(0, "/tmp/x.img", 0x10).join(" ");
        assert!(args.contains("-device pcie-root-port,id=rp0,bus=pcie.0,addr=0x10,chassis=1,slot=1"), "{args}");
        assert!(args.contains("nvme,id=nvme0,serial=rig0,bus=rp0 "), "{args}");
        assert!(!args.contains("bus=pcie.0,addr=0x10,mdts"), "{args}");
    }

    #[test]
    fn plain_drives_name_the_image_directly() {
        let args = Controller::nvme(1 << 30).discard(Discard::Unmap).qemu_args(2, "/tmp/x.img", 0x12);
        let drive = &args[args.iter().position(|a| a == "-drive").unwrap() + 1];
        assert_eq!(drive, "file=/tmp/x.img,if=none,id=drive2,format=raw,discard=unmap");
    }

    #[test]
    fn read_errors_put_the_image_behind_blkdebug() {
        let c = Controller::zns(512 << 20, 32 << 20).read_errors([131_072, 140_000]);
        let args = c.qemu_args(0, "/tmp/x.img", 0x10);
        let drive = &args[args.iter().position(|a| a == "-drive").unwrap() + 1];
        assert_eq!(
            drive,
            "if=none,id=drive0,format=raw,discard=ignore,\
             file.driver=blkdebug,file.image.driver=file,file.image.filename=/tmp/x.img,\
             file.inject-error.0.event=read_aio,file.inject-error.0.iotype=read,\
             file.inject-error.0.errno=5,file.inject-error.0.sector=131072,\
             file.inject-error.1.event=read_aio,file.inject-error.1.iotype=read,\
             file.inject-error.1.errno=5,file.inject-error.1.sector=140000"
        );
        // The namespace still names the drive.
        assert!(args.iter().any(|a| a.starts_with("nvme-ns,drive=drive0,bus=nvme0,")), "{args:?}");
    }

    #[test]
    fn read_errors_must_fall_inside_the_image() {
        assert!(Controller::nvme(1 << 20).read_errors([2047]).validate().is_ok());
        assert!(Controller::nvme(1 << 20).read_errors([2048]).validate().is_err());
    }

    #[test]
    fn qemu_args_name_the_configured_geometry() {
        let c = Controller::zns(2 << 30, 64 << 20).max_open(8).max_active(8).zasl(5).lba(4096);
        let args = c.qemu_args(1, "/tmp/x.img", 0x11).join(" ");
        assert!(args.contains("nvme,id=nvme1,serial=rig1,bus=pcie.0,addr=0x11,zoned.zasl=5"), "{args}");
        assert!(args.contains("zoned=on,zoned.zone_size=67108864"), "{args}");
        assert!(args.contains("zoned.max_open=8,zoned.max_active=8"), "{args}");
        assert!(args.contains("logical_block_size=4096"), "{args}");
    }
}

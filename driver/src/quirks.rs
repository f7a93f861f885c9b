//! Device quirks: behaviour the NVMe specification does not describe, keyed
//! by PCI vendor:device and optionally by Identify Controller MN/FR.
//!
//! A quirk only ever narrows or sharpens what the device reports; it never
//! stands in for a missing capability. `DEALLOCATE_ZEROES` means nothing on
//! a controller whose ONCS lacks Dataset Management, and the code that
//! picks a zero-out strategy ([`crate::zeroout`]) checks ONCS before it
//! looks at the quirk. That rule is the lesson of the Linux 6.12 zero-out
//! regression: the quirk began to apply to old Intel SSDs whose firmware
//! had Dataset Management disabled, so every Write Zeroes became a command
//! the drive rejected. Linux 58a0c875ce02 ("nvme: don't apply
//! NVME_QUIRK_DEALLOCATE_ZEROES when DSM is not supported") gated the quirk
//! on ONCS.DSM, and b0de5456e201 ("nvme-pci: remove two deallocate zeroes
//! quirks"; both in v6.13-rc2) took it off the P4500/P4600 (8086:0a54) and
//! the Dell Express Flash P4600 (8086:0a55).
//!
//! Every row of [`table`] cites the Linux table it comes from. Bit values
//! match Linux's `enum nvme_quirks` (drivers/nvme/host/nvme.h), so a hex
//! mask means the same here as in a Linux bug report.
//!
//! Users can correct the table without a rebuild: a [`QuirkOverride`]
//! parsed from `VID:DID:FLAGS` (modelled on Linux's `quirks=VID:DID:flags`
//! module parameters) adds or removes quirks for one PCI ID, and
//! [`effective`] applies the table and then the overrides in order.

use std::fmt;
use std::str::FromStr;

bitflags::bitflags! {
    /// Quirks the driver acts on. Bit positions follow Linux's
    /// `enum nvme_quirks`; Linux quirks this driver has no use for are not
    /// defined here.
    ///
    /// The bitflags macro generates `Quirks::from_name`, which matches the
    /// exact constant name; [`Quirks::parse_name`] is the forgiving form
    /// for names typed by people.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
    pub struct Quirks: u32 {
        /// Deallocated logical blocks read back as zeroes, although DLFEAT
        /// bits 2:0 (Identify Namespace byte 33) may report the read
        /// behaviour as not reported. Only meaningful when ONCS (Identify
        /// Controller bytes 521:520) reports Dataset Management: without
        /// DSM there is no deallocate to rely on, and the quirk must be
        /// ignored (Linux 58a0c875ce02). Linux `NVME_QUIRK_DEALLOCATE_ZEROES`.
        const DEALLOCATE_ZEROES = 1 << 2;
        /// Do not issue Write Zeroes even if ONCS offers it: the command is
        /// broken or slow on these controllers. Linux
        /// `NVME_QUIRK_DISABLE_WRITE_ZEROES` ("Broken Write Zeroes").
        const DISABLE_WRITE_ZEROES = 1 << 9;
        /// A separate metadata buffer (MPTR) whose length is 512 bytes or
        /// more and not a multiple of 512 is moved only in part: QEMU 7.2
        /// moves metadata through `dma_blk_read`/`dma_blk_write` with a
        /// 512-byte alignment, and `dma_blk_cb` (softmmu/dma-helpers.c)
        /// then discards `QEMU_ALIGN_DOWN(size, 512)` bytes from the back
        /// of an unaligned transfer instead of its unaligned tail, so only
        /// `size % 512` bytes land (65 blocks of 8 bytes: 8 of 520). The
        /// driver refuses such transfers (`RequestError::MetadataTruncated`)
        /// rather than let them corrupt. No Linux counterpart (its driver
        /// never moves metadata without protection information); the bit
        /// is ours, above Linux's.
        const METADATA_DMA_TRUNCATED = 1 << 30;
    }
}

impl Quirks {
    /// The names of the flags that are set, e.g. `["DEALLOCATE_ZEROES"]`.
    /// Bits that name no quirk are left out.
    pub fn names(self) -> Vec<&'static str> {
        self.iter_names().map(|(name, _)| name).collect()
    }

    /// One quirk by name, ignoring case and treating `-` like `_`:
    /// `deallocate-zeroes` and `DEALLOCATE_ZEROES` are the same quirk.
    /// `None` for an unknown name.
    pub fn parse_name(name: &str) -> Option<Quirks> {
        let wanted = name.trim();
        Quirks::all().iter_names().find(|(known, _)| same_name(known, wanted)).map(|(_, flag)| flag)
    }
}

/// `known` is a constant name (upper case, `_`); `typed` is what a person
/// wrote.
fn same_name(known: &str, typed: &str) -> bool {
    let fold = |b: u8| if b == b'-' { b'_' } else { b.to_ascii_uppercase() };
    known.len() == typed.len() && known.bytes().zip(typed.bytes()).all(|(k, t)| k == fold(t))
}

/// One row of the quirk table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct QuirkEntry {
    /// PCI vendor ID.
    pub vendor: u16,
    /// PCI device ID.
    pub device: u16,
    /// Matches when Identify Controller MN starts with this, both trimmed
    /// of spaces; `None` matches any model.
    pub model_prefix: Option<&'static str>,
    /// Matches when Identify Controller FR starts with this, both trimmed
    /// of spaces; `None` matches any firmware.
    pub firmware_prefix: Option<&'static str>,
    /// The quirks the row turns on.
    pub quirks: Quirks,
    /// Where the row comes from, precise enough to check.
    pub source: &'static str,
}

impl QuirkEntry {
    /// Whether this row applies to a controller. `model` and `firmware`
    /// are the Identify Controller MN and FR fields, padded or not.
    pub fn matches(&self, vendor: u16, device: u16, model: &str, firmware: &str) -> bool {
        self.vendor == vendor
            && self.device == device
            && prefix_matches(self.model_prefix, model)
            && prefix_matches(self.firmware_prefix, firmware)
    }
}

/// Identify ASCII fields are space padded (and some devices pad with NULs),
/// so both sides are trimmed before comparing.
fn prefix_matches(prefix: Option<&str>, value: &str) -> bool {
    match prefix {
        None => true,
        Some(prefix) => trim_padding(value).starts_with(trim_padding(prefix)),
    }
}

fn trim_padding(text: &str) -> &str {
    text.trim_matches(|c| c == ' ' || c == '\0')
}

const INTEL: u16 = 0x8086;
const SAMSUNG: u16 = 0x144d;
const SANDISK: u16 = 0x15b7;
const PHISON: u16 = 0x1987;
const SK_HYNIX: u16 = 0x1c5c;
const UNION_MEMORY: u16 = 0x1cc4;
const LONGSYS: u16 = 0x1d97;
const KINGSTON: u16 = 0x2646;

/// A row keyed by PCI ID alone, as every row of Linux's `nvme_id_table` is.
const fn pci(vendor: u16, device: u16, quirks: Quirks, source: &'static str) -> QuirkEntry {
    QuirkEntry { vendor, device, model_prefix: None, firmware_prefix: None, quirks, source }
}

/// The built-in table. Rows come from Linux `drivers/nvme/host/pci.c`
/// `nvme_id_table`, checked against a tree that already holds
/// b0de5456e201 (v6.13-rc2); each `source` names Linux's comment for the
/// row and all of Linux's quirks for it, of which only those in [`Quirks`]
/// are carried here. Linux's model-keyed `core_quirks` table
/// (drivers/nvme/host/core.c) has no row with either quirk.
///
/// Not here, on purpose: Intel P4500/P4600 (8086:0a54) and Dell Express
/// Flash P4600 (8086:0a55). Linux listed both with
/// NVME_QUIRK_DEALLOCATE_ZEROES until b0de5456e201 removed it; some of
/// their firmware ships with Dataset Management disabled, which is how the
/// quirk turned into the 6.12 regression (see the module docs). Linux keeps
/// the two rows for quirks this driver does not model (stripe size, SUBNQN,
/// bogus namespace IDs), so nothing of them is left to list.
static QUIRK_TABLE: &[QuirkEntry] = &[
    // The first row of Linux's table; deallocated blocks read zeroes.
    pci(
        INTEL,
        0x0953,
        Quirks::DEALLOCATE_ZEROES,
        "Linux drivers/nvme/host/pci.c nvme_id_table: Intel 750/P3500/P3600/P3700 (8086:0953) \
         NVME_QUIRK_STRIPE_SIZE | NVME_QUIRK_DEALLOCATE_ZEROES",
    ),
    // Same controller family as 0953, same quirks in Linux.
    pci(
        INTEL,
        0x0a53,
        Quirks::DEALLOCATE_ZEROES,
        "Linux drivers/nvme/host/pci.c nvme_id_table: Intel P3520 (8086:0a53) \
         NVME_QUIRK_STRIPE_SIZE | NVME_QUIRK_DEALLOCATE_ZEROES",
    ),
    pci(
        INTEL,
        0xf1a5,
        Quirks::DISABLE_WRITE_ZEROES,
        "Linux drivers/nvme/host/pci.c nvme_id_table: Intel 600P/P3100 (8086:f1a5) \
         NVME_QUIRK_NO_DEEPEST_PS | NVME_QUIRK_MEDIUM_PRIO_SQ | NVME_QUIRK_NO_TEMP_THRESH_CHANGE | \
         NVME_QUIRK_DISABLE_WRITE_ZEROES",
    ),
    // QEMU's emulated controller with `use-intel-id=on` (the rig's
    // `intel_id`). QEMU's default ID, Red Hat 1b36:0010, has only
    // NVME_QUIRK_BOGUS_NID in Linux and so no row here.
    // QEMU's own ID, and QEMU with `use-intel-id=on`: its metadata DMA
    // (see the flag). Keyed on the model, for any QEMU version until a
    // fixed one is known; an override removes it.
    QuirkEntry {
        vendor: 0x1b36,
        device: 0x0010,
        model_prefix: Some("QEMU NVMe Ctrl"),
        firmware_prefix: None,
        quirks: Quirks::METADATA_DMA_TRUNCATED,
        source: "QEMU 7.2 (1b36:0010) softmmu/dma-helpers.c dma_blk_cb: \
                 qemu_iovec_discard_back(QEMU_ALIGN_DOWN(size, align)); hw/nvme/ctrl.c nvme_blk_read and \
                 nvme_blk_write move MPTR metadata with BDRV_SECTOR_SIZE alignment",
    },
    QuirkEntry {
        vendor: INTEL,
        device: 0x5845,
        model_prefix: Some("QEMU NVMe Ctrl"),
        firmware_prefix: None,
        quirks: Quirks::METADATA_DMA_TRUNCATED,
        source: "QEMU 7.2 with use-intel-id (8086:5845) softmmu/dma-helpers.c dma_blk_cb, as for 1b36:0010",
    },
    pci(
        INTEL,
        0x5845,
        Quirks::DISABLE_WRITE_ZEROES,
        "Linux drivers/nvme/host/pci.c nvme_id_table: Qemu emulated controller (8086:5845) \
         NVME_QUIRK_IDENTIFY_CNS | NVME_QUIRK_DISABLE_WRITE_ZEROES | NVME_QUIRK_BOGUS_NID",
    ),
    pci(
        SAMSUNG,
        0xa822,
        Quirks::DISABLE_WRITE_ZEROES,
        "Linux drivers/nvme/host/pci.c nvme_id_table: Samsung PM1725a (144d:a822) \
         NVME_QUIRK_DELAY_BEFORE_CHK_RDY | NVME_QUIRK_DISABLE_WRITE_ZEROES | NVME_QUIRK_IGNORE_DEV_SUBNQN",
    ),
    pci(
        PHISON,
        0x5019,
        Quirks::DISABLE_WRITE_ZEROES,
        "Linux drivers/nvme/host/pci.c nvme_id_table: phison E19 (1987:5019) NVME_QUIRK_DISABLE_WRITE_ZEROES",
    ),
    pci(
        PHISON,
        0x5021,
        Quirks::DISABLE_WRITE_ZEROES,
        "Linux drivers/nvme/host/pci.c nvme_id_table: Phison E21 (1987:5021) NVME_QUIRK_DISABLE_WRITE_ZEROES",
    ),
    pci(
        SK_HYNIX,
        0x1504,
        Quirks::DISABLE_WRITE_ZEROES,
        "Linux drivers/nvme/host/pci.c nvme_id_table: SK Hynix PC400 (1c5c:1504) NVME_QUIRK_DISABLE_WRITE_ZEROES",
    ),
    pci(
        SK_HYNIX,
        0x1d59,
        Quirks::DISABLE_WRITE_ZEROES,
        "Linux drivers/nvme/host/pci.c nvme_id_table: SK Hynix BC901 (1c5c:1d59) NVME_QUIRK_DISABLE_WRITE_ZEROES",
    ),
    pci(
        SANDISK,
        0x2001,
        Quirks::DISABLE_WRITE_ZEROES,
        "Linux drivers/nvme/host/pci.c nvme_id_table: Sandisk Skyhawk (15b7:2001) NVME_QUIRK_DISABLE_WRITE_ZEROES",
    ),
    // Linux lists 1d97:2263 twice: this row, then "Lexar NM610" with only
    // NVME_QUIRK_BOGUS_NID. The PCI core takes the first match, so Linux
    // applies this row to both products.
    pci(
        LONGSYS,
        0x2263,
        Quirks::DISABLE_WRITE_ZEROES,
        "Linux drivers/nvme/host/pci.c nvme_id_table: SPCC (1d97:2263) NVME_QUIRK_DISABLE_WRITE_ZEROES",
    ),
    // Linux's comment names two capacities; the row matches the PCI ID, so
    // every capacity.
    pci(
        SAMSUNG,
        0xa80b,
        Quirks::DISABLE_WRITE_ZEROES,
        "Linux drivers/nvme/host/pci.c nvme_id_table: Samsung PM9B1 256G and 512G (144d:a80b) \
         NVME_QUIRK_DISABLE_WRITE_ZEROES | NVME_QUIRK_BOGUS_NID",
    ),
    pci(
        SAMSUNG,
        0xa809,
        Quirks::DISABLE_WRITE_ZEROES,
        "Linux drivers/nvme/host/pci.c nvme_id_table: Samsung MZALQ256HBJD 256G (144d:a809) \
         NVME_QUIRK_DISABLE_WRITE_ZEROES",
    ),
    pci(
        UNION_MEMORY,
        0x6303,
        Quirks::DISABLE_WRITE_ZEROES,
        "Linux drivers/nvme/host/pci.c nvme_id_table: UMIS RPJTJ512MGE1QDY 512G (1cc4:6303) \
         NVME_QUIRK_DISABLE_WRITE_ZEROES",
    ),
    pci(
        UNION_MEMORY,
        0x6302,
        Quirks::DISABLE_WRITE_ZEROES,
        "Linux drivers/nvme/host/pci.c nvme_id_table: UMIS RPJTJ256MGE1QDY 256G (1cc4:6302) \
         NVME_QUIRK_DISABLE_WRITE_ZEROES",
    ),
    pci(
        KINGSTON,
        0x5018,
        Quirks::DISABLE_WRITE_ZEROES,
        "Linux drivers/nvme/host/pci.c nvme_id_table: KINGSTON OM8SFP4xxxxP OS21012 NVMe SSD (2646:5018) \
         NVME_QUIRK_DISABLE_WRITE_ZEROES",
    ),
    pci(
        KINGSTON,
        0x5016,
        Quirks::DISABLE_WRITE_ZEROES,
        "Linux drivers/nvme/host/pci.c nvme_id_table: KINGSTON OM3PGP4xxxxP OS21011 NVMe SSD (2646:5016) \
         NVME_QUIRK_DISABLE_WRITE_ZEROES",
    ),
    pci(
        KINGSTON,
        0x501a,
        Quirks::DISABLE_WRITE_ZEROES,
        "Linux drivers/nvme/host/pci.c nvme_id_table: KINGSTON OM8PGP4xxxxP OS21005 NVMe SSD (2646:501A) \
         NVME_QUIRK_DISABLE_WRITE_ZEROES",
    ),
    pci(
        KINGSTON,
        0x501b,
        Quirks::DISABLE_WRITE_ZEROES,
        "Linux drivers/nvme/host/pci.c nvme_id_table: KINGSTON OM8PGP4xxxxQ OS21005 NVMe SSD (2646:501B) \
         NVME_QUIRK_DISABLE_WRITE_ZEROES",
    ),
    pci(
        KINGSTON,
        0x501e,
        Quirks::DISABLE_WRITE_ZEROES,
        "Linux drivers/nvme/host/pci.c nvme_id_table: KINGSTON OM3PGP4xxxxQ OS21011 NVMe SSD (2646:501E) \
         NVME_QUIRK_DISABLE_WRITE_ZEROES",
    ),
];

// What must never be in the table, checked at compile time: a row without
// quirks or source, and the deallocate-zeroes quirk on 8086:0a54/0a55.
const _: () = {
    let mut index = 0;
    while index < QUIRK_TABLE.len() {
        let entry = &QUIRK_TABLE[index];
        assert!(!entry.quirks.is_empty(), "a quirk table row without quirks");
        assert!(!entry.source.is_empty(), "a quirk table row without a source");
        let p4600 = entry.vendor == INTEL && (entry.device == 0x0a54 || entry.device == 0x0a55);
        assert!(!(p4600 && entry.quirks.contains(Quirks::DEALLOCATE_ZEROES)), "8086:0a54/0a55 must not be listed");
        index += 1;
    }
};

/// The built-in table, for tools that list it.
pub fn table() -> &'static [QuirkEntry] {
    QUIRK_TABLE
}

/// The table rows that apply to a controller, in table order.
pub fn matching<'a>(
    vendor: u16,
    device: u16,
    model: &'a str,
    firmware: &'a str,
) -> impl Iterator<Item = &'static QuirkEntry> + 'a {
    QUIRK_TABLE.iter().filter(move |entry| entry.matches(vendor, device, model, firmware))
}

/// The table's quirks for a controller: the union of every matching row,
/// so the order of rows does not matter (Linux's PCI table instead stops at
/// the first match).
pub fn lookup(vendor: u16, device: u16, model: &str, firmware: &str) -> Quirks {
    matching(vendor, device, model, firmware).fold(Quirks::empty(), |quirks, entry| quirks | entry.quirks)
}

/// The quirks a controller runs with: the table, then every override for
/// its vendor:device in order, so a later override wins over an earlier
/// one. The result still says nothing about capabilities: users of each
/// quirk check the ONCS bit it depends on.
pub fn effective(vendor: u16, device: u16, model: &str, firmware: &str, overrides: &[QuirkOverride]) -> Quirks {
    overrides
        .iter()
        .filter(|o| o.vendor == vendor && o.device == device)
        .fold(lookup(vendor, device, model, firmware), |quirks, o| o.apply(quirks))
}

/// A user's correction to the table for one PCI ID, parsed from
/// `VID:DID:FLAGS`:
///
/// - `VID` and `DID` are hex, with or without `0x`.
/// - `FLAGS` is either a hex mask (with or without `0x`), which replaces
///   the quirks outright: `add` is the mask and `remove` every other quirk,
///   the way a Linux `quirks=` parameter sets a device's flags; bits are
///   Linux's, and a bit no [`Quirks`] flag defines is an error rather than
///   silently dropped.
/// - or a comma list of `+NAME` (add), `-NAME` (remove) and `NAME` (add),
///   names as [`Quirks::parse_name`] reads them. Within one list a later
///   item wins over an earlier one for the same quirk.
///
/// `8086:0953:-deallocate_zeroes`, `0x8086:0x5845:0x0` and
/// `1b36:0010:+DISABLE_WRITE_ZEROES` all parse. No quirk name is made only
/// of hex digits, so the two forms cannot be confused.
///
/// `add` and `remove` never share a flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct QuirkOverride {
    /// PCI vendor ID the override applies to.
    pub vendor: u16,
    /// PCI device ID the override applies to.
    pub device: u16,
    /// Quirks turned on.
    pub add: Quirks,
    /// Quirks turned off.
    pub remove: Quirks,
}

impl QuirkOverride {
    /// `quirks` with this override applied.
    pub fn apply(&self, quirks: Quirks) -> Quirks {
        assert!(!self.add.intersects(self.remove), "override adds and removes {:?}", self.add & self.remove);
        quirks.difference(self.remove).union(self.add)
    }
}

/// Why a `VID:DID:FLAGS` override did not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QuirkParseError {
    /// Not three `:`-separated fields.
    WrongFieldCount {
        /// Fields found.
        found: usize,
    },
    /// A field with nothing in it.
    EmptyField {
        /// Which field ("vendor", "device" or "flags").
        field: &'static str,
    },
    /// A vendor, device or mask field that is not hex of the right width.
    BadHex {
        /// Which field ("vendor", "device" or "flags").
        field: &'static str,
        /// The field as given.
        text: String,
    },
    /// A mask with bits no quirk defines.
    UnknownBits {
        /// The bits no quirk defines.
        bits: u32,
    },
    /// A name no quirk has.
    UnknownName {
        /// The name as given.
        name: String,
    },
    /// A flags list item with no name (`,,`, or a lone `+` or `-`).
    EmptyName,
}

impl fmt::Display for QuirkParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuirkParseError::WrongFieldCount { found } => {
                write!(f, "expected VID:DID:FLAGS, found {found} field(s)")
            }
            QuirkParseError::EmptyField { field } => write!(f, "the {field} field is empty"),
            QuirkParseError::BadHex { field, text } => write!(f, "the {field} field {text:?} is not valid hex"),
            QuirkParseError::UnknownBits { bits } => {
                write!(f, "mask bits {bits:#x} name no quirk (known: {})", Quirks::all().names().join(", "))
            }
            QuirkParseError::UnknownName { name } => {
                write!(f, "unknown quirk {name:?} (known: {})", Quirks::all().names().join(", "))
            }
            QuirkParseError::EmptyName => write!(f, "a flags list item has no quirk name"),
        }
    }
}

impl std::error::Error for QuirkParseError {}

/// So a bad override composes with the driver's error type; it is the
/// caller's argument that is wrong.
impl From<QuirkParseError> for crate::Error {
    fn from(error: QuirkParseError) -> Self {
        crate::Error::InvalidArgument(format!("quirk override: {error}"))
    }
}

impl FromStr for QuirkOverride {
    type Err = QuirkParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fields: Vec<&str> = text.trim().split(':').map(str::trim).collect();
        let [vendor, device, flags] = fields[..] else {
            return Err(QuirkParseError::WrongFieldCount { found: fields.len() });
        };
        let vendor = parse_hex_u16("vendor", vendor)?;
        let device = parse_hex_u16("device", device)?;
        let (add, remove) = parse_flags(flags)?;
        Ok(QuirkOverride { vendor, device, add, remove })
    }
}

/// Writes the form [`FromStr`] reads: a hex mask when the override sets
/// every quirk one way or the other, otherwise a `+`/`-` list.
impl fmt::Display for QuirkOverride {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}:{:04x}:", self.vendor, self.device)?;
        if (self.add | self.remove).is_all() {
            return write!(f, "{:#x}", self.add.bits());
        }
        let added = self.add.names().into_iter().map(|name| format!("+{name}"));
        let removed = self.remove.names().into_iter().map(|name| format!("-{name}"));
        write!(f, "{}", added.chain(removed).collect::<Vec<_>>().join(","))
    }
}

fn strip_hex_prefix(text: &str) -> &str {
    text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")).unwrap_or(text)
}

fn parse_hex_u16(field: &'static str, text: &str) -> Result<u16, QuirkParseError> {
    if text.is_empty() {
        return Err(QuirkParseError::EmptyField { field });
    }
    let digits = strip_hex_prefix(text);
    // from_str_radix would take a sign; an ID has none.
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(QuirkParseError::BadHex { field, text: text.to_owned() });
    }
    u16::from_str_radix(digits, 16).map_err(|_| QuirkParseError::BadHex { field, text: text.to_owned() })
}

/// `(add, remove)` from a mask or a name list.
fn parse_flags(text: &str) -> Result<(Quirks, Quirks), QuirkParseError> {
    if text.is_empty() {
        return Err(QuirkParseError::EmptyField { field: "flags" });
    }
    let is_mask = text.starts_with("0x") || text.starts_with("0X") || text.bytes().all(|b| b.is_ascii_hexdigit());
    if is_mask {
        let digits = strip_hex_prefix(text);
        let bad_hex = || QuirkParseError::BadHex { field: "flags", text: text.to_owned() };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad_hex());
        }
        let bits = u32::from_str_radix(digits, 16).map_err(|_| bad_hex())?;
        let add = Quirks::from_bits(bits).ok_or(QuirkParseError::UnknownBits { bits: bits & !Quirks::all().bits() })?;
        return Ok((add, Quirks::all().difference(add)));
    }
    let mut add = Quirks::empty();
    let mut remove = Quirks::empty();
    for item in text.split(',').map(str::trim) {
        let (adding, name) = match item.as_bytes().first() {
            Some(b'+') => (true, &item[1..]),
            Some(b'-') => (false, &item[1..]),
            _ => (true, item),
        };
        if name.trim().is_empty() {
            return Err(QuirkParseError::EmptyName);
        }
        let flag = Quirks::parse_name(name).ok_or_else(|| QuirkParseError::UnknownName { name: name.to_owned() })?;
        if adding {
            add.insert(flag);
            remove.remove(flag);
        } else {
            remove.insert(flag);
            add.remove(flag);
        }
    }
    debug_assert!(!add.intersects(remove));
    Ok((add, remove))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<QuirkOverride, QuirkParseError> {
        text.parse()
    }

    #[test]
    fn bits_match_linux_enum_nvme_quirks() {
        // drivers/nvme/host/nvme.h: DEALLOCATE_ZEROES = 1 << 2,
        // DISABLE_WRITE_ZEROES = 1 << 9.
        assert_eq!(Quirks::DEALLOCATE_ZEROES.bits(), 0x4);
        assert_eq!(Quirks::DISABLE_WRITE_ZEROES.bits(), 0x200);
    }

    #[test]
    fn intel_p3700_and_p3520_read_deallocated_blocks_as_zeroes() {
        assert_eq!(lookup(0x8086, 0x0953, "INTEL SSDPEDMD400G4", "8DV10171"), Quirks::DEALLOCATE_ZEROES);
        assert_eq!(lookup(0x8086, 0x0a53, "INTEL SSDPE2MX450G7", "MDV10290"), Quirks::DEALLOCATE_ZEROES);
    }

    #[test]
    fn qemu_with_intel_id_has_write_zeroes_disabled() {
        assert_eq!(
            lookup(0x8086, 0x5845, "QEMU NVMe Ctrl", "8.2.2"),
            Quirks::DISABLE_WRITE_ZEROES | Quirks::METADATA_DMA_TRUNCATED
        );
        // QEMU's own ID has only the metadata DMA quirk, and only for
        // QEMU's model.
        assert_eq!(lookup(0x1b36, 0x0010, "QEMU NVMe Ctrl", "7.2.22"), Quirks::METADATA_DMA_TRUNCATED);
        assert_eq!(lookup(0x1b36, 0x0010, "Other NVMe", "1.0"), Quirks::empty());
    }

    #[test]
    fn p4500_p4600_have_no_quirks() {
        assert_eq!(lookup(0x8086, 0x0a54, "INTEL SSDPE2KX040T7", "QDV10170"), Quirks::empty());
        assert_eq!(lookup(0x8086, 0x0a55, "Dell Express Flash NVMe P4600 1.6TB SFF", "QDV1DP13"), Quirks::empty());
        assert!(table().iter().all(|entry| !(entry.vendor == 0x8086 && matches!(entry.device, 0x0a54 | 0x0a55))));
    }

    #[test]
    fn unknown_device_has_no_quirks() {
        assert_eq!(lookup(0x1234, 0x5678, "", ""), Quirks::empty());
    }

    #[test]
    fn table_rows_are_well_formed() {
        // Quirks with no Linux counterpart: their rows cite what shows them.
        let ours = Quirks::METADATA_DMA_TRUNCATED;
        for (index, entry) in table().iter().enumerate() {
            assert!(!entry.quirks.is_empty(), "{entry:?}");
            let id = format!("({:04x}:{:04x})", entry.vendor, entry.device);
            assert!(entry.source.to_lowercase().contains(&id), "{entry:?} does not cite {id}");
            if ours.contains(entry.quirks) {
                assert!(entry.model_prefix.is_some(), "{entry:?}: a quirk of ours names the model");
            } else {
                assert!(entry.source.starts_with("Linux drivers/nvme/host/"), "{entry:?}");
                for name in entry.quirks.names() {
                    assert!(entry.source.contains(&format!("NVME_QUIRK_{name}")), "{entry:?} does not cite {name}");
                }
            }
            for prefix in [entry.model_prefix, entry.firmware_prefix].into_iter().flatten() {
                assert!(!prefix.is_empty() && prefix.trim() == prefix, "{entry:?}");
            }
            let duplicate = table()[..index].iter().any(|earlier| {
                (earlier.vendor, earlier.device, earlier.model_prefix, earlier.firmware_prefix)
                    == (entry.vendor, entry.device, entry.model_prefix, entry.firmware_prefix)
            });
            assert!(!duplicate, "{entry:?} is listed twice");
        }
    }

    #[test]
    fn prefixes_match_after_trimming_padding() {
        let entry = QuirkEntry {
            vendor: 0x1234,
            device: 0x0001,
            model_prefix: Some("ACME Fast"),
            firmware_prefix: Some("1.2"),
            quirks: Quirks::DISABLE_WRITE_ZEROES,
            source: "test",
        };
        // Identify fields as the device sends them: space padded.
        let model = format!("{:<40}", "ACME Fast 960GB");
        let firmware = format!("{:<8}", "1.2.7");
        assert!(entry.matches(0x1234, 0x0001, &model, &firmware));
        assert!(entry.matches(0x1234, 0x0001, "  ACME Fast 960GB\0\0", "1.2"));
        assert!(!entry.matches(0x1234, 0x0001, "ACME Slow 960GB", "1.2.7"), "model differs");
        assert!(!entry.matches(0x1234, 0x0001, "ACME Fast 960GB", "1.3.0"), "firmware differs");
        assert!(!entry.matches(0x1234, 0x0001, "ACME Fa", "1.2.7"), "model shorter than the prefix");
        assert!(!entry.matches(0x1234, 0x0002, "ACME Fast 960GB", "1.2.7"), "device differs");
        assert!(!entry.matches(0x4321, 0x0001, "ACME Fast 960GB", "1.2.7"), "vendor differs");

        let any_model = QuirkEntry { model_prefix: None, firmware_prefix: None, ..entry };
        assert!(any_model.matches(0x1234, 0x0001, "", ""));
    }

    #[test]
    fn names_round_trip() {
        assert_eq!(Quirks::all().names(), ["DEALLOCATE_ZEROES", "DISABLE_WRITE_ZEROES", "METADATA_DMA_TRUNCATED"]);
        assert_eq!(Quirks::empty().names(), Vec::<&str>::new());
        assert_eq!(Quirks::from_bits_retain(1 << 31).names(), Vec::<&str>::new(), "unknown bits have no name");
        for (name, flag) in Quirks::all().iter_names() {
            assert_eq!(flag.names(), [name]);
            assert_eq!(Quirks::parse_name(name), Some(flag));
            assert_eq!(Quirks::parse_name(&name.to_lowercase().replace('_', "-")), Some(flag));
            // The grammar of QuirkOverride relies on this.
            assert!(!name.bytes().all(|b| b.is_ascii_hexdigit()), "{name} reads as a hex mask");
        }
        assert_eq!(Quirks::parse_name("Deallocate-Zeroes"), Some(Quirks::DEALLOCATE_ZEROES));
        assert_eq!(Quirks::parse_name(" disable_write-zeroes "), Some(Quirks::DISABLE_WRITE_ZEROES));
        assert_eq!(Quirks::parse_name("deallocate zeroes"), None);
        assert_eq!(Quirks::parse_name("DEALLOCATE_ZEROES_"), None);
        assert_eq!(Quirks::parse_name(""), None);
    }

    #[test]
    fn quirks_serialize_by_name() {
        fn serializable<T: serde::Serialize>() {}
        serializable::<Quirks>();
        serializable::<QuirkEntry>();
        serializable::<QuirkOverride>();
        // bitflags' serde support writes human-readable formats this way.
        let mut text = String::new();
        bitflags::parser::to_writer(&Quirks::all(), &mut text).unwrap();
        assert_eq!(text, "DEALLOCATE_ZEROES | DISABLE_WRITE_ZEROES | METADATA_DMA_TRUNCATED");
    }

    #[test]
    fn override_hex_mask_replaces() {
        let all = parse("8086:0953:0x200").unwrap();
        assert_eq!(
            all,
            QuirkOverride {
                vendor: 0x8086,
                device: 0x0953,
                add: Quirks::DISABLE_WRITE_ZEROES,
                remove: Quirks::DEALLOCATE_ZEROES | Quirks::METADATA_DMA_TRUNCATED,
            }
        );
        assert_eq!(parse("0x8086:0X0953:200").unwrap(), all, "prefixes optional, either case");
        assert_eq!(parse(" 8086 : 0953 : 0x200 ").unwrap(), all, "surrounding spaces ignored");

        let none = parse("8086:0953:0").unwrap();
        assert_eq!((none.add, none.remove), (Quirks::empty(), Quirks::all()));
        assert_eq!(effective(0x8086, 0x0953, "", "", &[none]), Quirks::empty());

        let both = parse("8086:0953:204").unwrap();
        let linux = Quirks::DEALLOCATE_ZEROES | Quirks::DISABLE_WRITE_ZEROES;
        assert_eq!((both.add, both.remove), (linux, Quirks::METADATA_DMA_TRUNCATED));
        let every = parse("8086:0953:40000204").unwrap();
        assert_eq!((every.add, every.remove), (Quirks::all(), Quirks::empty()));
    }

    #[test]
    fn override_names() {
        let o = parse("1b36:0010:disable-write-zeroes").unwrap();
        assert_eq!((o.vendor, o.device), (0x1b36, 0x0010));
        assert_eq!((o.add, o.remove), (Quirks::DISABLE_WRITE_ZEROES, Quirks::empty()));

        let o = parse("8086:0953:-DEALLOCATE_ZEROES").unwrap();
        assert_eq!((o.add, o.remove), (Quirks::empty(), Quirks::DEALLOCATE_ZEROES));

        let o = parse("8086:0953:+disable_write_zeroes, -deallocate-zeroes").unwrap();
        assert_eq!((o.add, o.remove), (Quirks::DISABLE_WRITE_ZEROES, Quirks::DEALLOCATE_ZEROES));
        assert_eq!(effective(0x8086, 0x0953, "", "", &[o]), Quirks::DISABLE_WRITE_ZEROES);

        // Within one list the later item wins.
        let o = parse("8086:0953:+DEALLOCATE_ZEROES,-DEALLOCATE_ZEROES").unwrap();
        assert_eq!((o.add, o.remove), (Quirks::empty(), Quirks::DEALLOCATE_ZEROES));
        let o = parse("8086:0953:-DEALLOCATE_ZEROES,DEALLOCATE_ZEROES").unwrap();
        assert_eq!((o.add, o.remove), (Quirks::DEALLOCATE_ZEROES, Quirks::empty()));
    }

    #[test]
    fn override_errors() {
        use QuirkParseError::*;
        assert_eq!(parse("8086:0953"), Err(WrongFieldCount { found: 2 }));
        assert_eq!(parse("8086:0953:0x4:extra"), Err(WrongFieldCount { found: 4 }));
        assert_eq!(parse(""), Err(WrongFieldCount { found: 1 }));
        assert_eq!(parse(":0953:0x4"), Err(EmptyField { field: "vendor" }));
        assert_eq!(parse("8086:0953:"), Err(EmptyField { field: "flags" }));
        assert_eq!(parse("80g6:0953:0x4"), Err(BadHex { field: "vendor", text: "80g6".into() }));
        assert_eq!(parse("8086:10953:0x4"), Err(BadHex { field: "device", text: "10953".into() }));
        assert_eq!(parse("8086:+953:0x4"), Err(BadHex { field: "device", text: "+953".into() }));
        assert_eq!(parse("8086:0x:0x4"), Err(BadHex { field: "device", text: "0x".into() }));
        assert_eq!(parse("8086:0953:0x"), Err(BadHex { field: "flags", text: "0x".into() }));
        assert_eq!(parse("8086:0953:0x4g"), Err(BadHex { field: "flags", text: "0x4g".into() }));
        assert_eq!(parse("8086:0953:100000000"), Err(BadHex { field: "flags", text: "100000000".into() }));
        assert_eq!(parse("8086:0953:0x5"), Err(UnknownBits { bits: 0x1 }), "Linux's STRIPE_SIZE is not modelled");
        assert_eq!(parse("8086:0953:+stripe_size"), Err(UnknownName { name: "stripe_size".into() }));
        assert_eq!(parse("8086:0953:+DEALLOCATE_ZEROES,,"), Err(EmptyName));
        assert_eq!(parse("8086:0953:-"), Err(EmptyName));

        let message = parse("8086:0953:bogus").unwrap_err().to_string();
        assert!(message.contains("\"bogus\"") && message.contains("DEALLOCATE_ZEROES"), "{message}");
        let error: crate::Error = parse("8086").unwrap_err().into();
        assert!(matches!(error, crate::Error::InvalidArgument(_)));
    }

    #[test]
    fn effective_applies_table_then_overrides_in_order() {
        // Only overrides for this vendor:device count.
        let elsewhere = parse("8086:0a53:-DEALLOCATE_ZEROES").unwrap();
        assert_eq!(effective(0x8086, 0x0953, "", "", &[elsewhere]), Quirks::DEALLOCATE_ZEROES);

        let remove = parse("8086:0953:-DEALLOCATE_ZEROES").unwrap();
        let add = parse("8086:0953:+DEALLOCATE_ZEROES").unwrap();
        assert_eq!(effective(0x8086, 0x0953, "", "", &[remove]), Quirks::empty());
        assert_eq!(effective(0x8086, 0x0953, "", "", &[remove, add]), Quirks::DEALLOCATE_ZEROES, "later add wins");
        assert_eq!(effective(0x8086, 0x0953, "", "", &[add, remove]), Quirks::empty(), "later remove wins");

        // A mask replaces what came before it; a later name list edits the result.
        let mask = parse("8086:0953:0x200").unwrap();
        assert_eq!(effective(0x8086, 0x0953, "", "", &[add, mask]), Quirks::DISABLE_WRITE_ZEROES);
        assert_eq!(
            effective(0x8086, 0x0953, "", "", &[mask, add]),
            Quirks::DEALLOCATE_ZEROES | Quirks::DISABLE_WRITE_ZEROES
        );

        // An override can give a device the table never lists a quirk.
        let p4600 = parse("8086:0a54:+deallocate-zeroes").unwrap();
        assert_eq!(effective(0x8086, 0x0a54, "", "", &[p4600]), Quirks::DEALLOCATE_ZEROES);
        assert_eq!(effective(0x8086, 0x0a54, "", "", &[]), Quirks::empty());
    }

    #[test]
    fn override_display_round_trips() {
        for text in [
            "8086:0953:0x200",
            "8086:0953:0",
            "1b36:0010:+DISABLE_WRITE_ZEROES",
            "8086:0953:-deallocate-zeroes",
            "8086:0953:+DISABLE_WRITE_ZEROES,-DEALLOCATE_ZEROES",
        ] {
            let parsed = parse(text).unwrap();
            let shown = parsed.to_string();
            assert_eq!(parse(&shown).unwrap(), parsed, "{text} shown as {shown}");
        }
        assert_eq!(parse("8086:953:-deallocate-zeroes").unwrap().to_string(), "8086:0953:-DEALLOCATE_ZEROES");
        assert_eq!(parse("8086:0953:0x200").unwrap().to_string(), "8086:0953:0x200");
    }
}

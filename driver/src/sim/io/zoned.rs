//! The Zoned Namespace Command Set 1.1's management commands: Zone
//! Management Send (open, close, finish, reset, offline) and Receive
//! (zone reports).

use super::*;

impl State {
    pub(super) fn zone_send(&mut self, index: usize, c: &Command) -> Result<(u32, u32), Status> {
        let action = match c.cdw13 & 0xFF {
            0x1 => Action::Close,
            0x2 => Action::Finish,
            0x3 => Action::Open,
            0x4 => Action::Reset,
            0x5 => Action::Offline,
            // Set Zone Descriptor Extension: ZDES is 0, nothing to set.
            _ => return Err(invalid_field()),
        };
        let select_all = c.cdw13 & ZSA_SELECT_ALL != 0;
        let namespace = &mut self.namespaces[index];
        let nsid = namespace.nsid;
        let zones = namespace.zones.as_mut().expect("a zoned namespace");
        let discard = |storage: &mut crate::sim::storage::Storage, effect: Effect| {
            if let Effect::Discard { zslba, blocks } = effect {
                // A reset is durable at once: the zone is Empty on the media.
                storage.zero(zslba, blocks, true);
                Some((zslba, blocks))
            } else {
                None
            }
        };
        let mut healed = Vec::new();
        if select_all {
            if action == Action::Open {
                zones.check_open_all()?;
            }
            for zone in 0..zones.count() {
                if zones.selected_by_all(zone, action) {
                    let effect = zones.apply(zone, action).expect("selected zones accept the action");
                    healed.extend(discard(&mut crate::sim::namespace::write(&namespace.storage), effect));
                }
            }
        } else {
            let slba = slba(c);
            if slba >= namespace.capacity_blocks {
                return Err(Status::from(GenericStatus::LbaOutOfRange).with_dnr());
            }
            let zone = zones.start(slba)?;
            let effect = zones.apply(zone, action)?;
            healed.extend(discard(&mut crate::sim::namespace::write(&namespace.storage), effect));
        }
        if cfg!(debug_assertions) {
            zones.check_invariants();
        }
        for (zslba, blocks) in healed {
            self.faults.heal(nsid, zslba, blocks);
        }
        Ok((0, 0))
    }

    pub(super) fn zone_receive(&mut self, index: usize, c: &Command) -> Result<(u32, u32), Status> {
        let action = c.cdw13 & 0xFF;
        let filter = (c.cdw13 >> 8) & 0xFF;
        let partial = c.cdw13 & ZRA_PARTIAL != 0;
        // Extended reports need zone descriptor extensions (ZDES = 0 here).
        if action != u32::from(ZRA_REPORT_ZONES) || filter > ZRASF_MAX {
            return Err(invalid_field());
        }
        let len = (u64::from(c.cdw12) + 1) * 4;
        let limit = self.config.max_transfer_bytes().unwrap_or(TRANSFER_BYTES_MAX);
        if len > limit {
            return Err(invalid_field());
        }
        let slba = slba(c);
        if slba >= self.namespaces[index].capacity_blocks {
            return Err(Status::from(GenericStatus::LbaOutOfRange).with_dnr());
        }
        let len = len as usize;
        let segments = self.resolve(c, len, true)?;
        let mut report = std::mem::take(&mut self.buffer);
        crate::sim::zeroed(&mut report, len.max(REPORT_HEADER_SIZE));
        let zones = self.namespaces[index].zones.as_ref().expect("a zoned namespace");
        let room = len.saturating_sub(REPORT_HEADER_SIZE) / ZONE_DESCRIPTOR_SIZE;
        let mut written = 0usize;
        let mut matching = 0u64;
        for zone in zones.index(slba)..zones.count() {
            let condition = zones.zone(zone).condition;
            if filter != 0 && condition.filter() != filter as u8 {
                continue;
            }
            matching += 1;
            if written < room {
                let at = REPORT_HEADER_SIZE + written * ZONE_DESCRIPTOR_SIZE;
                let descriptor = zones.descriptor(zone);
                let entry = &mut report[at..at + ZONE_DESCRIPTOR_SIZE];
                entry[0] = descriptor.zt;
                entry[1] = condition.zs() << 4;
                entry[2] = descriptor.za;
                entry[8..16].copy_from_slice(&descriptor.zcap.to_le_bytes());
                entry[16..24].copy_from_slice(&descriptor.zslba.to_le_bytes());
                entry[24..32].copy_from_slice(&descriptor.wp.to_le_bytes());
                written += 1;
            } else if partial {
                break;
            }
        }
        let reported = if partial { written as u64 } else { matching };
        report[..8].copy_from_slice(&reported.to_le_bytes());
        Transfer::new(&segments).put(&report[..len]);
        self.segments = segments;
        self.buffer = report;
        Ok((0, 0))
    }
}

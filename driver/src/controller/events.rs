//! Asynchronous events (NVMe Base 2.0 §5.2): their configuration, the
//! completions kept for [`Controller::poll_events`], and their decoding.

use super::*;
use crate::spec::log::{
    AEC_NOTICES, AEC_SMART_WARNINGS, AER_NOTICE_NS_ATTRIBUTE, AER_NOTICE_ZONE_DESCRIPTOR_CHANGED, AER_TYPE_ERROR,
    AER_TYPE_NOTICE, AER_TYPE_SMART, LOG_CHANGED_ZONE_LIST,
};

/// What an Asynchronous Event Request reported (NVMe Base 2.0 §5.2,
/// Figures 146 to 151).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AsyncEvent {
    /// Asynchronous Event Type (DW0 bits 2:0): 0h error, 1h SMART / health,
    /// 2h notice, 6h I/O command set specific, 7h vendor specific.
    pub event_type: u8,
    /// Asynchronous Event Information (DW0 bits 15:8).
    pub information: u8,
    /// The log page that clears the event (DW0 bits 23:16).
    pub log_page: u8,
    /// The event, decoded where the driver knows it.
    pub kind: AsyncEventKind,
}

/// The events the driver names; the raw fields are in [`AsyncEvent`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum AsyncEventKind {
    /// SMART / Health status (type 1h): information 00h reliability, 01h
    /// temperature threshold, 02h spare below threshold. The critical
    /// warning comes from the SMART / Health log, read to re-arm the event.
    Smart {
        /// Critical Warning (byte 0 of the SMART / Health Information log,
        /// NVMe Base 2.0 §5.16.1.3).
        critical_warning: crate::spec::log::CriticalWarning,
    },
    /// Zone Descriptor Changed notice (type 2h, information EFh; NVMe ZNS
    /// 1.1 §5.5): report zones again. The driver reads each zoned
    /// namespace's Changed Zone List log (BFh) to re-arm it.
    ZoneDescriptorChanged,
    /// Namespace Attribute Changed notice (type 2h, information 00h).
    NamespaceAttributeChanged,
    /// An error status event (type 0h).
    Error,
    /// Anything else; see the raw fields.
    Other,
}

/// Keeps an Asynchronous Event Request's completion for
/// [`Controller::poll_events`]; anything else arriving outside a wait is a
/// late completion of an abandoned command, and dropped.
pub(super) fn route_aer(completion: IoCompletion, kept: &mut VecDeque<u32>, armed: &mut bool, dropped: &mut u64) {
    if completion.token != AER_TOKEN {
        return;
    }
    *armed = false;
    // An error status (Abort, a reset ending it) is no event.
    if completion.status.is_ok() {
        if kept.len() == EVENTS_MAX {
            kept.pop_front();
            *dropped += 1;
        }
        kept.push_back(completion.dw0);
    }
}

/// Asynchronous Event Configuration: SMART critical warnings, and the
/// notices OAES offers (NVMe Base 2.0 §5.27.1.7; QEMU raises a SMART event
/// only for warning bits enabled here). A controller that refuses the
/// value gets the SMART bits alone, and one that refuses those none. Then
/// the first Asynchronous Event Request goes out.
pub(super) fn configure_events(
    shared: &Shared,
    identify: &IdentifyController,
    namespaces: &[NamespaceInfo],
) -> Result<()> {
    let mut admin = shared.admin();
    admin.zoned_nsids = namespaces.iter().filter(|ns| ns.zoned.is_some()).map(|ns| ns.nsid).collect();
    let timeout = shared.options.admin_timeout;
    let wanted = AEC_SMART_WARNINGS | identify.oaes & AEC_NOTICES;
    for config in [wanted, AEC_SMART_WARNINGS] {
        match admin.run(admin::set_features(admin::FID_ASYNC_EVENT_CONFIG, config, false), timeout) {
            Ok(_) => {
                admin.setup.async_event_config = Some(config);
                break;
            }
            Err(Error::Command { .. }) => continue,
            Err(other) => return Err(other),
        }
    }
    admin.aer_armed = false;
    admin.arm_aer();
    Ok(())
}

impl Controller {
    /// Events the controller reported through Asynchronous Event Requests
    /// since the last call, oldest first (NVMe Base 2.0 §5.2). The driver
    /// keeps one request outstanding; the admin queue is polled here and
    /// at every admin command, so call this now and then (say, once a
    /// second). For each event the driver reads the log page that re-arms
    /// it (the SMART / Health log for a SMART event, whose critical warning
    /// the event carries). At most 64 events wait; older ones are dropped
    /// ([`Controller::events_dropped`]).
    ///
    /// The host's request for the device back (vfio-pci's device request)
    /// is checked here too, so that an owner with no I/O in flight, whose
    /// queue pairs' health checks do not run, still lets the device go:
    /// the controller quiesces and stops as it does from a pair
    /// ([`Controller::is_gone`] turns true, and every pair learns of it at
    /// its next poll).
    pub fn poll_events(&self) -> Result<Vec<AsyncEvent>> {
        let mut admin = self.shared.admin();
        if self.shared.transport.removal_requested() {
            admin.device_gone();
        }
        admin.poll();
        let timeout = self.shared.options.admin_timeout;
        let mut events = Vec::new();
        while let Some(dw0) = admin.aer_completions.pop_front() {
            let event_type = (dw0 & 0b111) as u8;
            let information = (dw0 >> 8) as u8;
            let log_page = (dw0 >> 16) as u8;
            let kind = match (event_type, information) {
                (AER_TYPE_SMART, _) => {
                    // Reading the log with RAE clear re-arms SMART events.
                    let command = admin::get_log_page(log::LOG_SMART_HEALTH, 0xFFFF_FFFF, 512, 0, 0, 0);
                    let (_, data) = admin.run_with_scratch(command, 512, timeout)?;
                    AsyncEventKind::Smart { critical_warning: SmartHealthLog::parse(&data)?.critical_warning }
                }
                (AER_TYPE_NOTICE, AER_NOTICE_ZONE_DESCRIPTOR_CHANGED) => {
                    for nsid in admin.zoned_nsids.clone() {
                        let command = admin::get_log_page(LOG_CHANGED_ZONE_LIST, nsid, 4096, 0, 0, 0);
                        // A controller without the log has nothing to re-arm.
                        let _ = admin.run_with_scratch(command, 4096, timeout);
                    }
                    AsyncEventKind::ZoneDescriptorChanged
                }
                (AER_TYPE_NOTICE, AER_NOTICE_NS_ATTRIBUTE) => {
                    let command = admin::get_log_page(log::LOG_CHANGED_NAMESPACES, 0xFFFF_FFFF, 4096, 0, 0, 0);
                    let _ = admin.run_with_scratch(command, 4096, timeout);
                    AsyncEventKind::NamespaceAttributeChanged
                }
                (AER_TYPE_ERROR, _) => {
                    let command = admin::get_log_page(log::LOG_ERROR_INFORMATION, 0, 64, 0, 0, 0);
                    let _ = admin.run_with_scratch(command, 64, timeout);
                    AsyncEventKind::Error
                }
                _ => AsyncEventKind::Other,
            };
            events.push(AsyncEvent { event_type, information, log_page, kind });
        }
        if !admin.aer_armed && self.shared.epoch.condition() == Condition::Live {
            admin.arm_aer();
        }
        Ok(events)
    }
}

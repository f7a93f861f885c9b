//! Zoned namespaces over the simulator, through the driver's requests and,
//! where the driver would refuse, raw commands: the ZNS 1.1 state machine,
//! write pointer rules, resources, Zone Append, reports.

mod sim_support;

use nvme_driver::cmd::zns::{ReportFilter, ZoneSendAction};
use nvme_driver::cmd::{nvm, zns as zns_cmd};
use nvme_driver::dma::DmaMemory;
use nvme_driver::sim::{Fault, FullZoneWritePointer, NamespaceConfig, SimConfig};
use nvme_driver::spec::command::Command;
use nvme_driver::spec::status::{CommandSpecificStatus, GenericStatus, Status, StatusCode};
use nvme_driver::spec::zns::{parse_report_zones, ZoneDescriptor, ZoneState};
use nvme_driver::Request;
use sim_support::{code, pattern, Rig};

const ZONE: u64 = 1024;
const ZCAP: u64 = 768;

/// A zoned namespace of 16 zones of 1024 blocks of 512 bytes, 768 of them
/// writable; ZASL 32 KiB.
fn zoned(namespace: NamespaceConfig) -> Rig {
    let mut config = SimConfig::empty().with_namespace(namespace);
    config.zasl = 3;
    Rig::new(config)
}

/// At most 3 open and 4 active zones.
fn rig() -> Rig {
    zoned(NamespaceConfig::zoned(16 * ZONE, 512, ZONE, ZCAP).max_open_zones(3).max_active_zones(4))
}

fn specific(code: CommandSpecificStatus) -> StatusCode {
    StatusCode::CommandSpecific(code)
}

fn send(rig: &mut Rig, zslba: u64, action: ZoneSendAction, all: bool) -> Result<(), Status> {
    let request = rig.ns.zone_send(zslba, action, all, 0).unwrap();
    rig.status(request)
}

fn state(rig: &Rig, zone: u64) -> (ZoneState, u64) {
    let zones = rig.sim.zones(1);
    (zones[zone as usize].state, zones[zone as usize].wp)
}

fn append(rig: &mut Rig, zslba: u64, data: &[u8]) -> Result<u64, Status> {
    let request = rig.ns.zone_append(zslba, rig.buffer_with(data), false, 0).unwrap();
    let completion = rig.run(request);
    sim_support::device(completion.status).map(|()| completion.result_u64())
}

fn report(rig: &mut Rig, slba: u64, filter: ReportFilter, partial: bool, len: usize) -> (u64, Vec<ZoneDescriptor>) {
    let request = rig.ns.report_zones(slba, filter, partial, rig.buffer(len), 0).unwrap();
    let completion = rig.run(request);
    completion.status.unwrap();
    let buffer = completion.buffer.unwrap();
    let mut data = vec![0u8; len];
    buffer.buffer().copy_out(0, &mut data);
    parse_report_zones(&data).unwrap()
}

/// A command as built, past the driver's validation, with a buffer of
/// `len` bytes (none for 0).
fn raw(rig: &mut Rig, command: Command, len: usize) -> Result<(), Status> {
    let buffer = (len > 0).then(|| rig.buffer(len));
    rig.status(Request { command, buffer, metadata: None, token: 0 })
}

#[test]
fn writes_follow_the_write_pointer_up_to_the_zone_capacity() {
    let mut rig = rig();
    let data = pattern(1, 8 * 512);
    rig.write(0, &data, false).unwrap();
    assert_eq!(state(&rig, 0), (ZoneState::ImplicitlyOpened, 8));
    assert_eq!(rig.read(0, 8 * 512).unwrap(), data);
    assert_eq!(code(rig.write(4, &data, false)), specific(CommandSpecificStatus::ZoneInvalidWrite));
    assert_eq!(code(rig.write(100, &data, false)), specific(CommandSpecificStatus::ZoneInvalidWrite));
    // Up to ZCAP: 8 + 11 * 64 = 712, then 57 blocks cross the capacity.
    let chunk = vec![0xEEu8; 64 * 512];
    for step in 0..11 {
        rig.write(8 + step * 64, &chunk, false).unwrap();
    }
    assert_eq!(code(rig.write(712, &[0u8; 57 * 512], false)), specific(CommandSpecificStatus::ZoneBoundaryError));
    rig.write(712, &[0u8; 56 * 512], false).unwrap();
    assert_eq!(state(&rig, 0).0, ZoneState::Full);
    assert_eq!(state(&rig, 0).1, u64::MAX, "a Full zone reports no valid write pointer (all ones, as QEMU)");
    assert_eq!(code(rig.write(ZCAP, &[0u8; 512], false)), specific(CommandSpecificStatus::ZoneIsFull));
    // Reads past ZCAP inside the zone read zeroes; a read across zones is
    // a Zone Boundary Error (OZCS bit 0 clear).
    assert_eq!(rig.read(ZCAP, 512).unwrap(), vec![0u8; 512]);
    let crossing = raw(&mut rig, nvm::read(1, ZONE - 1, 2), 1024);
    assert_eq!(code(crossing), specific(CommandSpecificStatus::ZoneBoundaryError));
    // Write Zeroes and Copy follow the write pointer too.
    let request = rig.ns.write_zeroes(ZONE, 4, false, 0).unwrap();
    rig.status(request).unwrap();
    let request = rig.ns.copy(ZONE + 4, &[(0, 8)], rig.buffer(4096), 0).unwrap();
    rig.status(request).unwrap();
    assert_eq!(state(&rig, 1), (ZoneState::ImplicitlyOpened, ZONE + 12));
    assert_eq!(rig.read(ZONE + 4, 8 * 512).unwrap(), data);
    let request = rig.ns.copy(ZONE + 100, &[(0, 8)], rig.buffer(4096), 0).unwrap();
    assert_eq!(code(rig.status(request)), specific(CommandSpecificStatus::ZoneInvalidWrite));
}

#[test]
fn copy_across_namespaces_follows_the_destination_zones() {
    // Namespace 1 zoned, namespace 2 conventional, both of 512-byte blocks.
    let config = SimConfig::empty()
        .with_namespace(NamespaceConfig::zoned(16 * ZONE, 512, ZONE, ZCAP))
        .with_namespace(NamespaceConfig::nvm(1 << 16, 512));
    let mut rig = Rig::new(config);
    let conventional = rig.controller.namespace(2).unwrap();
    let data = pattern(11, 8 * 512);
    rig.write_on(&conventional, 500, &data).unwrap();
    // Into zone 1 at its write pointer: written and the pointer moves, as
    // a Copy within the namespace does.
    let request = rig.ns.copy_from(ZONE, 2, &[(500, 8)], rig.buffer(4096), 0).unwrap();
    rig.status(request).unwrap();
    assert_eq!(state(&rig, 1), (ZoneState::ImplicitlyOpened, ZONE + 8));
    assert_eq!(rig.read(ZONE, 8 * 512).unwrap(), data);
    // Anywhere else in the zone: Zone Invalid Write, nothing written.
    let request = rig.ns.copy_from(ZONE + 100, 2, &[(500, 8)], rig.buffer(4096), 0).unwrap();
    assert_eq!(code(rig.status(request)), specific(CommandSpecificStatus::ZoneInvalidWrite));
    assert_eq!(state(&rig, 1), (ZoneState::ImplicitlyOpened, ZONE + 8));
    // Out of the zoned namespace: its read rules apply to the source.
    let request = conventional.copy_from(0, 1, &[(ZONE, 8)], rig.buffer(4096), 0).unwrap();
    rig.status(request).unwrap();
    assert_eq!(rig.read_on(&conventional, 0, 8 * 512).unwrap(), data);
    let request = conventional.copy_from(0, 1, &[(ZONE - 4, 8)], rig.buffer(4096), 0).unwrap();
    assert_eq!(code(rig.status(request)), specific(CommandSpecificStatus::ZoneBoundaryError));
}

#[test]
fn reads_may_cross_zones_when_the_namespace_says_so() {
    let mut rig = zoned(NamespaceConfig::zoned(4 * ZONE, 512, ZONE, ZONE).read_across_zone_boundaries());
    for piece in 0..4 {
        rig.write(piece * 256, &vec![3u8; 256 * 512], false).unwrap();
    }
    assert_eq!(state(&rig, 0).0, ZoneState::Full);
    let data = rig.read(ZONE - 1, 1024).unwrap();
    assert_eq!((data[0], data[600]), (3, 0));
}

#[test]
fn zone_append_returns_the_lba_written_and_respects_zasl() {
    let mut rig = rig();
    let zslba = 2 * ZONE;
    assert_eq!(append(&mut rig, zslba, &pattern(1, 4096)).unwrap(), zslba);
    assert_eq!(append(&mut rig, zslba, &pattern(2, 1024)).unwrap(), zslba + 8);
    assert_eq!(append(&mut rig, zslba, &pattern(3, 512)).unwrap(), zslba + 10);
    assert_eq!(rig.read(zslba + 8, 1024).unwrap(), pattern(2, 1024));
    assert_eq!(state(&rig, 2), (ZoneState::ImplicitlyOpened, zslba + 11));
    // Not a zone start: Invalid Field (the driver would refuse it first).
    let command = zns_cmd::zone_append(1, zslba + 1, 1, false);
    let outcome = raw(&mut rig, command, 512);
    assert_eq!(code(outcome), StatusCode::Generic(GenericStatus::InvalidFieldInCommand));
    // Over ZASL (32 KiB): Invalid Field.
    assert_eq!(rig.ns.zones().unwrap().zone_append_max_bytes, 32 * 1024);
    let command = zns_cmd::zone_append(1, zslba, 128, false);
    let outcome = raw(&mut rig, command, 64 * 1024);
    assert_eq!(code(outcome), StatusCode::Generic(GenericStatus::InvalidFieldInCommand));
    // Not enough capacity left: Zone Boundary Error; a Full zone: Zone Is Full.
    for step in 0..11 {
        assert_eq!(append(&mut rig, zslba, &[1u8; 32 * 1024]).unwrap(), zslba + 11 + step * 64);
    }
    let outcome = append(&mut rig, zslba, &[1u8; 32 * 1024]);
    assert_eq!(outcome.unwrap_err().code(), specific(CommandSpecificStatus::ZoneBoundaryError), "53 blocks left");
    assert_eq!(append(&mut rig, zslba, &[1u8; 53 * 512]).unwrap(), zslba + 715);
    assert_eq!(state(&rig, 2).0, ZoneState::Full);
    assert_eq!(append(&mut rig, zslba, &[0u8; 512]).unwrap_err().code(), specific(CommandSpecificStatus::ZoneIsFull));
    send(&mut rig, 3 * ZONE, ZoneSendAction::Finish, false).unwrap();
    assert_eq!(
        append(&mut rig, 3 * ZONE, &[0u8; 512]).unwrap_err().code(),
        specific(CommandSpecificStatus::ZoneIsFull)
    );
}

#[test]
fn open_and_active_limits_hold() {
    let mut rig = rig();
    for zone in 0..3 {
        rig.write(zone * ZONE, &[1u8; 512], false).unwrap();
    }
    assert_eq!(code(rig.write(3 * ZONE, &[1u8; 512], false)), specific(CommandSpecificStatus::TooManyOpenZones));
    assert_eq!(
        code(send(&mut rig, 3 * ZONE, ZoneSendAction::Open, false)),
        specific(CommandSpecificStatus::TooManyOpenZones)
    );
    send(&mut rig, 0, ZoneSendAction::Close, false).unwrap();
    assert_eq!(state(&rig, 0), (ZoneState::Closed, 1));
    rig.write(3 * ZONE, &[1u8; 512], false).unwrap();
    // Four active now (0 Closed, 1..3 open): a fifth may not even open.
    send(&mut rig, ZONE, ZoneSendAction::Close, false).unwrap();
    assert_eq!(code(rig.write(4 * ZONE, &[1u8; 512], false)), specific(CommandSpecificStatus::TooManyActiveZones));
    // Reopening a Closed zone needs only an open resource.
    send(&mut rig, ZONE, ZoneSendAction::Open, false).unwrap();
    assert_eq!(state(&rig, 1).0, ZoneState::ExplicitlyOpened);
    // Finishing frees both.
    send(&mut rig, 0, ZoneSendAction::Finish, false).unwrap();
    send(&mut rig, ZONE, ZoneSendAction::Finish, false).unwrap();
    rig.write(4 * ZONE, &[1u8; 512], false).unwrap();
}

#[test]
fn zone_actions_follow_the_state_machine() {
    let mut rig = rig();
    let transition = specific(CommandSpecificStatus::InvalidZoneStateTransition);
    assert_eq!(code(send(&mut rig, 5 * ZONE, ZoneSendAction::Close, false)), transition, "Empty cannot close");
    send(&mut rig, 5 * ZONE, ZoneSendAction::Open, false).unwrap();
    assert_eq!(state(&rig, 5), (ZoneState::ExplicitlyOpened, 5 * ZONE));
    send(&mut rig, 5 * ZONE, ZoneSendAction::Close, false).unwrap();
    assert_eq!(state(&rig, 5).0, ZoneState::Empty, "closing an unwritten zone empties it");
    let data = pattern(5, 4096);
    rig.write(5 * ZONE, &data, false).unwrap();
    send(&mut rig, 5 * ZONE, ZoneSendAction::Close, false).unwrap();
    assert_eq!(state(&rig, 5), (ZoneState::Closed, 5 * ZONE + 8));
    send(&mut rig, 5 * ZONE, ZoneSendAction::Finish, false).unwrap();
    assert_eq!(state(&rig, 5), (ZoneState::Full, u64::MAX));
    assert_eq!(rig.read(5 * ZONE, 4096).unwrap(), data, "Finish keeps the data");
    assert_eq!(rig.read(5 * ZONE + 8, 512).unwrap(), vec![0u8; 512], "and the rest reads as deallocated");
    send(&mut rig, 5 * ZONE, ZoneSendAction::Reset, false).unwrap();
    assert_eq!(state(&rig, 5), (ZoneState::Empty, 5 * ZONE));
    assert_eq!(rig.read(5 * ZONE, 4096).unwrap(), vec![0u8; 4096], "Reset discards the data");
    assert_eq!(code(send(&mut rig, 5 * ZONE, ZoneSendAction::Offline, false)), transition);
    // Set Zone Descriptor Extension: no extensions here (ZDES 0).
    let outcome = send(&mut rig, 5 * ZONE, ZoneSendAction::SetZoneDescriptorExtension, false);
    assert_eq!(code(outcome), StatusCode::Generic(GenericStatus::InvalidFieldInCommand));
    // Not a zone start.
    let command = zns_cmd::zone_management_send(1, 5 * ZONE + 1, ZoneSendAction::Open, false);
    assert_eq!(code(raw(&mut rig, command, 0)), StatusCode::Generic(GenericStatus::InvalidFieldInCommand));
}

#[test]
fn select_all_acts_on_the_zones_in_the_right_states() {
    let mut rig = rig();
    for zone in 0..3 {
        rig.write(zone * ZONE, &[1u8; 512], false).unwrap();
    }
    send(&mut rig, 0, ZoneSendAction::Close, true).unwrap();
    assert!((0..3).all(|zone| state(&rig, zone).0 == ZoneState::Closed));
    rig.write(3 * ZONE, &[1u8; 512], false).unwrap();
    // Opening all three Closed zones would need four open resources: all
    // or nothing.
    let outcome = send(&mut rig, 0, ZoneSendAction::Open, true);
    assert_eq!(code(outcome), specific(CommandSpecificStatus::TooManyOpenZones));
    assert!((0..3).all(|zone| state(&rig, zone).0 == ZoneState::Closed));
    send(&mut rig, 3 * ZONE, ZoneSendAction::Finish, false).unwrap();
    send(&mut rig, 0, ZoneSendAction::Open, true).unwrap();
    assert!((0..3).all(|zone| state(&rig, zone).0 == ZoneState::ExplicitlyOpened));
    send(&mut rig, 0, ZoneSendAction::Close, true).unwrap();
    assert!((0..3).all(|zone| state(&rig, zone).0 == ZoneState::Closed));
    send(&mut rig, 0, ZoneSendAction::Finish, true).unwrap();
    assert!((0..4).all(|zone| state(&rig, zone).0 == ZoneState::Full));
    assert_eq!(state(&rig, 4).0, ZoneState::Empty, "Finish all leaves Empty zones alone");
    send(&mut rig, 0, ZoneSendAction::Reset, true).unwrap();
    assert!(rig.sim.zones(1).iter().all(|zone| zone.state == ZoneState::Empty));
}

#[test]
fn report_zones_filters_and_partial_reports() {
    let mut rig = rig();
    rig.write(0, &[1u8; 512], false).unwrap();
    send(&mut rig, ZONE, ZoneSendAction::Open, false).unwrap();
    send(&mut rig, 2 * ZONE, ZoneSendAction::Finish, false).unwrap();
    rig.write(3 * ZONE, &[1u8; 512], false).unwrap();
    send(&mut rig, 3 * ZONE, ZoneSendAction::Close, false).unwrap();
    let (count, zones) = report(&mut rig, 0, ReportFilter::All, false, 4096);
    assert_eq!((count, zones.len()), (16, 16));
    let states: Vec<ZoneState> = zones.iter().take(5).map(|zone| zone.state).collect();
    assert_eq!(
        states,
        [
            ZoneState::ImplicitlyOpened,
            ZoneState::ExplicitlyOpened,
            ZoneState::Full,
            ZoneState::Closed,
            ZoneState::Empty
        ]
    );
    assert_eq!((zones[0].wp, zones[2].wp, zones[3].wp), (1, u64::MAX, 3 * ZONE + 1));
    assert!(zones.iter().all(|zone| zone.zcap == ZCAP && zone.zt == 2));
    // Room for two descriptors: without Partial the count is every match.
    let (count, zones) = report(&mut rig, 0, ReportFilter::All, false, 64 * 3);
    assert_eq!((count, zones.len()), (16, 2));
    let (count, zones) = report(&mut rig, 0, ReportFilter::All, true, 64 * 3);
    assert_eq!((count, zones.len()), (2, 2));
    // Filters, from a start LBA inside zone 1.
    let (count, zones) = report(&mut rig, ZONE + 5, ReportFilter::Empty, false, 4096);
    assert_eq!((count, zones[0].zslba), (12, 4 * ZONE));
    for (filter, expected) in [
        (ReportFilter::ImplicitlyOpened, 0),
        (ReportFilter::ExplicitlyOpened, ZONE),
        (ReportFilter::Full, 2 * ZONE),
        (ReportFilter::Closed, 3 * ZONE),
    ] {
        let (count, zones) = report(&mut rig, 0, filter, false, 4096);
        assert_eq!((count, zones[0].zslba), (1, expected), "{filter:?}");
    }
    let (count, _) = report(&mut rig, 0, ReportFilter::Offline, false, 4096);
    assert_eq!(count, 0);
    // Extended reports need descriptor extensions, which these zones lack.
    let mut command = zns_cmd::report_zones(1, 0, 4096, ReportFilter::All, false, 0, 0);
    command.cdw13 |= 1;
    assert_eq!(code(raw(&mut rig, command, 4096)), StatusCode::Generic(GenericStatus::InvalidFieldInCommand));
    // The driver's tool-level report agrees.
    assert_eq!(rig.controller.report_zones(1, 0, 4).unwrap()[3].state, ZoneState::Closed);
}

#[test]
fn full_zones_may_report_their_write_boundary_instead() {
    let namespace =
        NamespaceConfig::zoned(4 * ZONE, 512, ZONE, ZCAP).full_zone_write_pointer(FullZoneWritePointer::WriteBoundary);
    let mut rig = zoned(namespace);
    send(&mut rig, ZONE, ZoneSendAction::Finish, false).unwrap();
    let (_, zones) = report(&mut rig, 0, ReportFilter::Full, false, 4096);
    assert_eq!(zones[0].wp, ZONE + ZCAP);
}

#[test]
fn read_only_and_offline_zones() {
    let mut rig = rig();
    let data = pattern(7, 4096);
    rig.write(6 * ZONE, &data, false).unwrap();
    rig.sim.inject(Fault::ZoneReadOnly { nsid: 1, zslba: 6 * ZONE });
    assert_eq!(state(&rig, 6), (ZoneState::ReadOnly, u64::MAX));
    assert_eq!(code(rig.write(6 * ZONE + 8, &data, false)), specific(CommandSpecificStatus::ZoneIsReadOnly));
    assert_eq!(rig.read(6 * ZONE, 4096).unwrap(), data, "a Read Only zone still reads");
    let transition = specific(CommandSpecificStatus::InvalidZoneStateTransition);
    assert_eq!(code(send(&mut rig, 6 * ZONE, ZoneSendAction::Reset, false)), transition);
    send(&mut rig, 0, ZoneSendAction::Offline, true).unwrap();
    assert_eq!(state(&rig, 6).0, ZoneState::Offline);
    assert_eq!(code(rig.read(6 * ZONE, 4096).map(|_| ())), specific(CommandSpecificStatus::ZoneIsOffline));
    assert_eq!(code(rig.write(6 * ZONE, &data, false)), specific(CommandSpecificStatus::ZoneIsOffline));
    rig.sim.inject(Fault::ZoneOffline { nsid: 1, zslba: 7 * ZONE });
    assert_eq!(state(&rig, 7).0, ZoneState::Offline);
}

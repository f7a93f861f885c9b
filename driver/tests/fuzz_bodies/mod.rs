//! The bodies of the fuzz targets (`fuzz/`), shared with the regression
//! test that replays their corpora (`fuzz_corpus.rs`): whatever the fuzzer
//! found interesting stays tested in every `hack/test`.
#![allow(dead_code)]

use nvme_driver::cmd::nvm;
use nvme_driver::loopback;
use nvme_driver::spec::identify::{
    command_set, parse_active_namespace_list, parse_ns_id_descriptors, IdentifyController, IdentifyControllerNvm,
    IdentifyNamespace,
};
use nvme_driver::spec::log::{parse_error_log, SmartHealthLog};
use nvme_driver::spec::status::Status;
use nvme_driver::spec::zns::parse_report_zones;
use nvme_driver::spec::zns::{IdentifyControllerZns, IdentifyNamespaceZns};
use nvme_driver::Request;

/// Every Identify parser on arbitrary bytes: a typed error or a value,
/// never a panic; validation accessors are total too.
pub fn identify(data: &[u8]) {
    if let Ok(id) = IdentifyController::parse(data) {
        let _ = id.max_transfer_bytes(4096);
        let _ = id.version();
    }
    if let Ok(ns) = IdentifyNamespace::parse(data) {
        let _ = ns.block_size();
        let _ = ns.current_lba_format();
        let _ = ns.deallocate_features().read_behavior();
    }
    if let Ok(zns) = IdentifyNamespaceZns::parse(data) {
        let _ = zns.zone_size_blocks(0);
        let _ = zns.max_open_resources();
        let _ = zns.max_active_resources();
    }
    if let Ok(nvm) = IdentifyControllerNvm::parse(data) {
        let _ = nvm.write_zeroes_size_limit_bytes(4096);
    }
    if let Ok(zns) = IdentifyControllerZns::parse(data) {
        let _ = zns.zone_append_size_limit_bytes(4096, Some(1 << 20));
    }
    if let Ok(descriptors) = parse_ns_id_descriptors(data) {
        let _ = command_set(&descriptors);
    }
    let _ = parse_active_namespace_list(data);
}

/// Zone reports and log pages on arbitrary bytes: never a panic.
pub fn zone_report(data: &[u8]) {
    if let Ok((reported, zones)) = parse_report_zones(data) {
        assert!(zones.len() as u64 <= reported);
        assert!(zones.len() <= data.len() / 64);
    }
    let _ = SmartHealthLog::parse(data);
    let _ = parse_error_log(data);
}

/// Completion processing against a hostile device: the bytes decide which
/// commands the host submits and which completion entries (any command
/// identifier, status and order, duplicates, unknown identifiers) the
/// device posts. The queue pair must deliver each submitted token at most
/// once, only tokens it submitted, keep its in-flight count exact, and
/// never panic.
pub fn completions(data: &[u8]) {
    let Some((&depth_byte, script)) = data.split_first() else { return };
    let depth = 2 + u16::from(depth_byte % 15);
    let Ok((mut pair, mut device, _)) = loopback::queue_pair(depth) else { return };
    let capacity = pair.capacity();
    let mut next_token = 0u64;
    let mut outstanding = std::collections::HashSet::new();
    let mut fetched = Vec::new();
    // Entries posted but not yet reaped, so the CQ never overflows.
    let mut unreaped = 0usize;
    for chunk in script.chunks(4) {
        let op = chunk[0] % 4;
        let arg = u16::from_le_bytes([*chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)]);
        let status_field = u16::from(*chunk.get(3).unwrap_or(&0)) << 1;
        match op {
            0 => {
                // Submit a few commands.
                for _ in 0..=(arg % 4) {
                    match pair.submit(Request {
                        command: nvm::flush(1),
                        buffer: None,
                        metadata: None,
                        token: next_token,
                    }) {
                        Ok(()) => {
                            outstanding.insert(next_token);
                            next_token += 1;
                        }
                        Err((_, request)) => assert_eq!(request.token, next_token),
                    }
                }
                pair.ring();
            }
            1 => {
                // The device takes published commands off the SQ.
                while let Some(command) = device.fetch() {
                    fetched.push(command.cid);
                }
            }
            2 if unreaped + 1 < usize::from(depth) => {
                // The device posts a completion: for a fetched command, or
                // for any identifier at all.
                let cid = if arg % 2 == 0 && !fetched.is_empty() {
                    fetched.swap_remove(usize::from(arg / 2) % fetched.len())
                } else {
                    arg
                };
                let status = Status::from_field(status_field);
                if device.post(cid, status, 0) {
                    unreaped += 1;
                }
            }
            _ => {
                let before = pair.in_flight();
                let mut reaped = 0;
                pair.poll(|completion| {
                    assert!(
                        outstanding.remove(&completion.token),
                        "token {} delivered twice or never submitted",
                        completion.token
                    );
                    reaped += 1;
                });
                assert_eq!(pair.in_flight(), before - reaped);
                unreaped = 0;
            }
        }
        assert!(pair.in_flight() <= capacity);
        assert_eq!(pair.in_flight(), outstanding.len());
    }
}

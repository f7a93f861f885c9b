//! Bring-up (NVMe Base 2.0 §3.5.1): the CC/CSTS handshakes, Identify,
//! the number of I/O queues, shadow doorbells and the Copy descriptor
//! formats the host must enable.

use super::*;

impl Controller {
    /// Resets and enables the controller, identifies it and its active
    /// namespaces, asks for I/O queues, turns on shadow doorbells where
    /// offered, and enables Copy across namespaces (descriptor format 2h)
    /// where the controller supports it.
    pub fn init(transport: Arc<dyn Transport>, options: ControllerOptions) -> Result<Self> {
        let cap = Cap(transport.read64(registers::CAP));
        if cap.0 == u64::MAX {
            return Err(Error::DeviceGone);
        }
        let vs = Vs(transport.read32(registers::VS));
        let css = if cap.css().contains(CapCss::IO_COMMAND_SETS) {
            // All supported I/O command sets, so zoned namespaces answer
            // zone commands (QEMU hw/nvme/ctrl.c nvme_select_iocs_ns).
            registers::CC_CSS_ALL_IO
        } else if cap.css().contains(CapCss::NVM) {
            registers::CC_CSS_NVM
        } else {
            return Err(Error::Unsupported(format!("CAP.CSS {:#x} offers no I/O command set", cap.css().bits())));
        };
        // Host memory is managed in 4 KiB pages: CC.MPS = 0.
        if cap.min_page_size() > PAGE_SIZE {
            return Err(Error::Unsupported(format!("minimum memory page size {} > 4096", cap.min_page_size())));
        }
        let ready_timeout = Duration::from_millis(u64::from(cap.timeout_ms()).max(500));

        disable(&*transport, ready_timeout)?;

        let entries = options.admin_queue_entries.clamp(2, registers::ADMIN_QUEUE_ENTRIES_MAX);
        let entries = u16::try_from(u32::from(entries).min(cap.max_queue_entries())).unwrap_or(entries);
        let doorbells = DoorbellConfig { dstrd: cap.dstrd(), shadow: None, policy: ShadowPolicy::Off };
        let queue = QueuePair::new(&transport, 0, entries, doorbells)?;
        enable(&*transport, &queue, entries, css, ready_timeout)?;

        let scratch = DmaRegion::allocate(&transport, SCRATCH_LEN)?;
        let epoch = Arc::new(Epoch::default());
        let setup = Setup {
            transport: Arc::clone(&transport),
            ready_timeout,
            admin_timeout: options.admin_timeout,
            shutdown_timeout: options.shutdown_timeout,
            css,
            admin_entries: entries,
            io_queues_requested: options.io_queue_pairs.max(1),
            async_event_config: None,
            cross_namespace_copy: false,
        };
        let admin = Admin {
            queue,
            scratch,
            qid_in_use: vec![true],
            shadow: None,
            setup,
            epoch: Arc::clone(&epoch),
            // Armed at the end of bring-up.
            aer_armed: true,
            aer_completions: VecDeque::new(),
            events_dropped: 0,
            zoned_nsids: Vec::new(),
            resets: 0,
            quarantine: Quarantine::default(),
        };
        let shared = Shared { transport, options, cap, admin: Mutex::new(admin), epoch };

        let identify = IdentifyController::parse(&shared.identify_page(admin::identify_controller(0))?)?;
        if identify.nn == 0 {
            // NN 0 is outside the spec: there is nothing to talk to.
            return Err(Error::Parse(crate::spec::ParseError::InvalidField {
                what: "Identify Controller",
                field: "NN",
                value: 0,
            }));
        }
        // The I/O-command-set-specific controller structures are optional:
        // a controller that rejects the CNS simply has none.
        let identify_nvm = shared
            .optional_identify(admin::identify_csi_controller(CSI_NVM, 0))?
            .map(|page| IdentifyControllerNvm::parse(&page))
            .transpose()?;
        let identify_zns = if css == registers::CC_CSS_ALL_IO {
            shared
                .optional_identify(admin::identify_csi_controller(CSI_ZONED, 0))?
                .map(|page| IdentifyControllerZns::parse(&page))
                .transpose()?
        } else {
            None
        };
        let active =
            identify::parse_active_namespace_list(&shared.identify_page(admin::identify_active_namespaces(0, 0))?)?;
        let namespaces =
            active.into_iter().map(|nsid| identify_namespace(&shared, nsid)).collect::<Result<Vec<_>>>()?;

        let requested = shared.options.io_queue_pairs.max(1);
        let completion = shared.command(admin::set_number_of_queues(requested, requested))?;
        let (sq_count, cq_count) = admin::NumberOfQueues::from_dw0(completion.dw0);
        let io_queue_pairs = sq_count.min(cq_count);
        shared.admin().qid_in_use = vec![false; usize::from(io_queue_pairs) + 1];
        shared.admin().qid_in_use[0] = true;

        if shared.options.shadow_doorbells && identify.oacs.contains(Oacs::DOORBELL_BUFFER_CONFIG) {
            let shadow = enable_shadow_doorbells(&shared, io_queue_pairs)?;
            let mut admin = shared.admin();
            if let Some(shadow) = &shadow {
                // Controllers differ in whether they read queue 0's shadow:
                // write both the shadow and the register for the admin queue.
                admin.queue.use_shadow(shadow.pages, ShadowPolicy::Always);
            }
            admin.shadow = shadow;
        }
        if identify.copy_formats().contains(CopyFormats::FORMAT_2) && identify.oncs.contains(Oncs::COPY) {
            let mut admin = shared.admin();
            let enabled = admin.enable_copy_format_2();
            admin.settle(&enabled);
            admin.setup.cross_namespace_copy = enabled?;
        }
        configure_events(&shared, &identify, &namespaces)?;

        let pci = shared.transport.pci_id();
        let quirks = crate::quirks::effective(
            pci.vendor,
            pci.device,
            &identify.mn,
            &identify.fr,
            &shared.options.quirk_overrides,
        );
        Ok(Controller {
            shared: Arc::new(shared),
            vs,
            css,
            identify,
            identify_nvm,
            identify_zns,
            namespaces,
            io_queue_pairs,
            quirks,
            zero_states: Mutex::new(Vec::new()),
        })
    }
}

/// Doorbell Buffer Config (NVMe Base 2.0 §5.8): one page of shadow
/// doorbells and one of EventIdx, when every queue's slots fit one page.
/// A controller that rejects the command just keeps MMIO doorbells.
pub(super) fn enable_shadow_doorbells(shared: &Shared, io_queue_pairs: u16) -> Result<Option<ShadowBuffers>> {
    let stride = registers::doorbell_stride_bytes(shared.cap.dstrd());
    if (usize::from(io_queue_pairs) + 1) * 2 * stride > PAGE_SIZE {
        return Ok(None);
    }
    let values = DmaRegion::allocate(&shared.transport, PAGE_SIZE)?;
    let event_idx = DmaRegion::allocate(&shared.transport, PAGE_SIZE)?;
    match shared.command(admin::doorbell_buffer_config(values.iova(), event_idx.iova())) {
        Ok(_) => {
            let pages = ShadowPages { values: values.raw_parts().0, event_idx: event_idx.raw_parts().0 };
            Ok(Some(ShadowBuffers { values, event_idx, pages }))
        }
        Err(Error::Command { .. }) => Ok(None),
        Err(other) => Err(other),
    }
}

pub(super) fn identify_namespace(shared: &Shared, nsid: u32) -> Result<NamespaceInfo> {
    let identify = IdentifyNamespace::parse(&shared.identify_page(admin::identify_namespace(nsid, 0))?)?;
    let block_size = identify.block_size()?;
    let descriptors = match shared.optional_identify(admin::identify_ns_id_descriptors(nsid, 0))? {
        Some(page) => identify::parse_ns_id_descriptors(&page)?,
        None => Vec::new(),
    };
    let csi = identify::command_set(&descriptors).unwrap_or(CSI_NVM);
    let zoned = if csi == CSI_ZONED {
        let page = shared.identify_page(admin::identify_csi_namespace(nsid, CSI_ZONED, 0))?;
        let zns = IdentifyNamespaceZns::parse(&page)?;
        let format = identify.current_lba_format_index();
        let zone_size_blocks = zns.lbafe.get(format).map(|e| e.zsze).unwrap_or(0);
        if zone_size_blocks == 0 || zone_size_blocks > identify.nsze {
            return Err(Error::Parse(crate::spec::ParseError::InvalidField {
                what: "Identify Namespace (ZNS)",
                field: "ZSZE",
                value: zone_size_blocks,
            }));
        }
        Some(ZonedInfo {
            zone_size_blocks,
            max_open_zones: zns.max_open_resources(),
            max_active_zones: zns.max_active_resources(),
            identify: zns,
        })
    } else {
        None
    };
    Ok(NamespaceInfo { nsid, csi, block_size, capacity_blocks: identify.nsze, identify, zoned })
}

/// Points the controller at the admin queue (AQA, ASQ, ACQ), enables it
/// (NVMe Base 2.0 §3.5.1 steps 4 to 7) and waits for CSTS.RDY within
/// CAP.TO.
pub(super) fn enable(
    transport: &dyn Transport,
    queue: &QueuePair,
    entries: u16,
    css: u8,
    timeout: Duration,
) -> Result<()> {
    transport.write32(registers::AQA, Aqa::new(entries, entries).0);
    transport.write64(registers::ASQ, queue.sq_iova());
    transport.write64(registers::ACQ, queue.cq_iova());
    let cc = Cc::new()
        .with_css(css)
        .with_mps(0)
        .with_ams(registers::CC_AMS_ROUND_ROBIN)
        .with_iosqes(6) // 64-byte SQEs
        .with_iocqes(4) // 16-byte CQEs
        .with_enable(true);
    transport.write32(registers::CC, cc.0);
    wait_ready(transport, true, timeout)
}

/// A normal shutdown notification (CC.SHN = 01b), then a bounded wait for
/// CSTS.SHST "complete" (NVMe Base 2.0 §3.6.1): the controller writes its
/// cache back. Does nothing on a disabled controller.
pub(super) fn notify_shutdown(transport: &dyn Transport, timeout: Duration) -> Result<()> {
    let cc = Cc(transport.read32(registers::CC));
    if cc.0 == u32::MAX {
        return Err(Error::DeviceGone);
    }
    if !cc.enable() {
        return Ok(());
    }
    transport.write32(registers::CC, cc.with_shn(Shn::Normal).0);
    wait_for(transport, "shutdown (CSTS.SHST)", timeout, |csts| Ok(csts.shst() == ShutdownStatus::Complete))
}

/// [`disable`], and a function-level reset if the controller stays ready.
pub(super) fn stop(transport: &dyn Transport, timeout: Duration) -> Result<()> {
    let result = disable(transport, timeout);
    if !matches!(result, Err(Error::Timeout { .. })) {
        return result;
    }
    match transport.function_reset() {
        Ok(()) => {
            ::log::warn!("{}: the controller stayed ready; function-level reset", transport.name());
            wait_ready(transport, false, timeout)
        }
        Err(error) => {
            ::log::warn!("{}: the controller stayed ready and has no function-level reset ({error})", transport.name());
            result
        }
    }
}

/// Clears CC.EN and waits for CSTS.RDY = 0 within CAP.TO. CC.EN is
/// written again while RDY is still set, as after a disable that timed out.
pub(super) fn disable(transport: &dyn Transport, timeout: Duration) -> Result<()> {
    let cc = Cc(transport.read32(registers::CC));
    if cc.enable() || Csts(transport.read32(registers::CSTS)).rdy() {
        transport.write32(registers::CC, cc.with_enable(false).0);
    }
    wait_ready(transport, false, timeout)
}

pub(super) fn wait_ready(transport: &dyn Transport, ready: bool, timeout: Duration) -> Result<()> {
    if ready {
        // A fatal status while enabling will never turn into ready.
        wait_for(transport, "controller ready (CSTS.RDY=1)", timeout, |csts| {
            if csts.cfs() {
                Err(Error::ControllerFatal)
            } else {
                Ok(csts.rdy())
            }
        })
    } else {
        wait_for(transport, "controller disabled (CSTS.RDY=0)", timeout, |csts| Ok(!csts.rdy()))
    }
}

/// Polls CSTS until `done` says so (or fails) or `timeout` passes; all
/// ones means the device is gone.
pub(super) fn wait_for(
    transport: &dyn Transport,
    what: &'static str,
    timeout: Duration,
    done: impl Fn(Csts) -> Result<bool>,
) -> Result<()> {
    let started = Instant::now();
    loop {
        let raw = transport.read32(registers::CSTS);
        if raw == u32::MAX {
            return Err(Error::DeviceGone);
        }
        if done(Csts(raw))? {
            return Ok(());
        }
        if started.elapsed() >= timeout {
            return Err(Error::Timeout { what, waited_ms: started.elapsed().as_millis() as u64 });
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

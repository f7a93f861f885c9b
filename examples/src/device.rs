//! Opening a controller the way every tool does.

use nvme_driver::vfio::{self, Vfio};
use nvme_driver::{Controller, ControllerOptions, Transport};
use std::sync::Arc;

/// Opens and brings up the controller at `pci`, or the first NVMe function
/// bound to vfio-pci.
pub fn open_controller(pci: Option<&str>, options: ControllerOptions) -> Result<Controller, String> {
    let bdf = match pci {
        Some(bdf) => bdf.to_string(),
        None => vfio::vfio_nvme_functions()
            .into_iter()
            .next()
            .ok_or_else(|| nvme_driver::Error::NoVfioDevice.to_string())?,
    };
    let device = Vfio::new().and_then(|container| container.open(&bdf)).map_err(|e| e.to_string())?;
    let transport: Arc<dyn Transport> = device;
    Controller::init(transport, options).map_err(|e| format!("{bdf}: {e}"))
}

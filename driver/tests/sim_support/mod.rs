//! Helpers shared by the simulator tests: bring-up with short timeouts,
//! blocking I/O through a real queue pair, data patterns.
#![allow(dead_code)]

use nvme_driver::dma::{DmaMemory, DmaPool};
use nvme_driver::sim::{SimConfig, Simulator};
use nvme_driver::spec::status::{Status, StatusCode};
use nvme_driver::{
    Controller, ControllerOptions, IoBuffer, IoCompletion, IoError, Namespace, QueuePair, Request, Transport,
};
use std::sync::Arc;
use std::time::Duration;

/// Short bounds: the simulator answers at once, and a test that waits is
/// waiting for something that will not come.
pub fn options() -> ControllerOptions {
    ControllerOptions {
        admin_timeout: Duration::from_secs(2),
        shutdown_timeout: Duration::from_secs(1),
        io_queue_pairs: 8,
        ..ControllerOptions::default()
    }
}

pub fn transport(sim: &Arc<Simulator>) -> Arc<dyn Transport> {
    sim.clone()
}

pub fn init(sim: &Arc<Simulator>) -> Controller {
    Controller::init(transport(sim), options()).expect("bring-up over the simulator")
}

/// A controller, namespace 1, a queue pair and a pool of 128 KiB buffers.
pub struct Rig {
    pub sim: Arc<Simulator>,
    pub controller: Controller,
    pub ns: Namespace,
    pub pair: QueuePair,
    pub pool: DmaPool,
}

impl Rig {
    pub fn new(config: SimConfig) -> Self {
        Self::on(Simulator::new(config))
    }

    pub fn on(sim: Arc<Simulator>) -> Self {
        let controller = init(&sim);
        Self::on_controller(sim, controller)
    }

    /// A rig around a controller already brought up on `sim`.
    pub fn on_controller(sim: Arc<Simulator>, controller: Controller) -> Self {
        let ns = controller.namespace(1).unwrap();
        let pair = controller.create_queue_pair(64).unwrap();
        let pool = DmaPool::new(controller.transport(), 128 * 1024, 48).unwrap();
        Rig { sim, controller, ns, pair, pool }
    }

    /// Tears the rig down in the order that leaves the controller shut
    /// down, and returns the simulator for another bring-up.
    pub fn finish(self) -> Arc<Simulator> {
        let Rig { sim, controller, ns: _, pair, pool } = self;
        drop(pair);
        drop(pool);
        drop(controller);
        sim
    }

    /// Tears the rig down as a power cut would find it: no shutdown
    /// notification, the cache still dirty. The queue pair is deleted
    /// first so its memory can go.
    pub fn finish_without_shutdown(self) -> Arc<Simulator> {
        let Rig { sim, controller, ns: _, pair, pool } = self;
        drop(pair);
        drop(pool);
        // Dropping the controller would shut it down (and flush the cache).
        std::mem::forget(controller);
        sim
    }

    pub fn buffer(&self, len: usize) -> IoBuffer {
        IoBuffer::range(self.pool.get().expect("a free buffer"), 0, len)
    }

    pub fn buffer_with(&self, data: &[u8]) -> IoBuffer {
        let buffer = self.buffer(data.len());
        buffer.buffer().copy_in(0, data);
        buffer
    }

    pub fn run(&mut self, request: Request) -> IoCompletion {
        self.pair.execute(request, Duration::from_secs(2)).expect("a completion")
    }

    /// Runs a request and returns its status; anything but the device's
    /// own status (a timeout, a reset) fails the test.
    pub fn status(&mut self, request: Request) -> Result<(), Status> {
        device(self.run(request).status)
    }

    pub fn write(&mut self, lba: u64, data: &[u8], fua: bool) -> Result<(), Status> {
        let request = self.ns.write(lba, self.buffer_with(data), fua, 0).unwrap();
        self.status(request)
    }

    pub fn read(&mut self, lba: u64, len: usize) -> Result<Vec<u8>, Status> {
        let request = self.ns.read(lba, self.buffer(len), 0).unwrap();
        let completion = self.run(request);
        device(completion.status)?;
        let buffer = completion.buffer.unwrap();
        let mut data = vec![0u8; len];
        buffer.buffer().copy_out(buffer.offset(), &mut data);
        Ok(data)
    }

    /// [`Rig::write`] on another namespace of the controller.
    pub fn write_on(&mut self, ns: &Namespace, lba: u64, data: &[u8]) -> Result<(), Status> {
        let request = ns.write(lba, self.buffer_with(data), false, 0).unwrap();
        self.status(request)
    }

    /// [`Rig::read`] on another namespace of the controller.
    pub fn read_on(&mut self, ns: &Namespace, lba: u64, len: usize) -> Result<Vec<u8>, Status> {
        let request = ns.read(lba, self.buffer(len), 0).unwrap();
        let completion = self.run(request);
        device(completion.status)?;
        let buffer = completion.buffer.unwrap();
        let mut data = vec![0u8; len];
        buffer.buffer().copy_out(buffer.offset(), &mut data);
        Ok(data)
    }

    pub fn flush(&mut self) {
        let request = self.ns.flush(0);
        self.status(request).unwrap();
    }
}

/// `len` bytes of a pattern that differs per seed and per position.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut data = vec![0u8; len];
    nvme_driver::prng::Prng::new(seed).fill(&mut data);
    data
}

/// The device's status of a completion; panics on any other failure.
pub fn device(status: Result<(), IoError>) -> Result<(), Status> {
    status.map_err(|error| error.device_status().unwrap_or_else(|| panic!("not a device status: {error}")))
}

pub fn code(status: Result<(), Status>) -> StatusCode {
    status.expect_err("an error status").code()
}

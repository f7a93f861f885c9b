//! Pure command builders: each returns a [`Command`](crate::spec::command::Command)
//! with the Command Identifier left 0 for the queue to assign. No I/O.
//!
//! One module per command set, as the spec splits them: [`admin`] (NVMe
//! Base 2.0 §5), [`nvm`] (NVM Command Set 1.0 §3.2) and [`zns`] (ZNS
//! Command Set 1.1 §3.4). Builders take required fields as arguments, use
//! spec names for the dwords they fill, and are unit-tested byte for byte;
//! they do not validate user input (the [`Namespace`](crate::Namespace)
//! layer does, against the device's limits) and leave PRP1/PRP2 to the
//! queue pair, which owns the data buffer. Keeping them pure is what lets
//! the same command bytes go to a real controller, QEMU or the simulator.

pub mod admin;
pub mod nvm;
pub mod zns;

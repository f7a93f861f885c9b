//! Pure command builders: each returns a [`Command`](crate::spec::command::Command)
//! with the Command Identifier left 0 for the queue to assign. No I/O.

pub mod admin;
pub mod nvm;
pub mod zns;

//! The metadata journal: its wire format ([`format`]) and where it lies on
//! the namespace ([`layout`]).

pub(crate) mod format;
pub(crate) mod layout;

pub(crate) use format::*;

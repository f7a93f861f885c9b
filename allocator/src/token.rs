//! The completion token: the one place its 64 bits are laid out. Every
//! command the volume or an engine (scrub) submits on a namespace's queue
//! pair carries one, and every completion is routed by it.
//!
//! | bits | meaning |
//! | --- | --- |
//! | 63 set | a blocking command of the device's ([`Token::Sync`]); 62..0 count them |
//! | 63 clear, 62 set | an engine's read through [`crate::LaneReads`] ([`Token::Engine`]); 61..0 its tag |
//! | 63, 62 clear | an asynchronous data write ([`Token::Write`]); 61..8 the write's slot, 7..0 the copy (lane) |
//!
//! Firecracker's io_uring wrapper keeps `user_data` to one owner in the
//! same way; here the owners share a queue pair, so the layout says whose
//! each completion is.

const SYNC: u64 = 1 << 63;
const ENGINE: u64 = 1 << 62;
const LANE_BITS: u32 = 8;
/// The largest tag an engine may use, and the largest write slot.
pub const TAG_MAX: u64 = ENGINE - 1;
const SLOT_MAX: u64 = (ENGINE >> LANE_BITS) - 1;

/// Whose a completion is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Token {
    /// A blocking command (flush, zone management, metadata I/O).
    Sync(u64),
    /// An engine's read, with the engine's tag.
    Engine(u64),
    /// Copy `lane` of the asynchronous write in slot `slot`.
    Write {
        /// The write's slot in the volume's table of writes in flight.
        slot: usize,
        /// The copy.
        lane: usize,
    },
}

impl Token {
    /// The 64 bits a command carries.
    pub fn encode(self) -> u64 {
        match self {
            Token::Sync(count) => SYNC | (count & !SYNC),
            Token::Engine(tag) => {
                assert!(tag <= TAG_MAX, "engine tag {tag} too large");
                ENGINE | tag
            }
            Token::Write { slot, lane } => {
                assert!(slot as u64 <= SLOT_MAX && lane < 1 << LANE_BITS, "write slot {slot}, lane {lane}");
                (slot as u64) << LANE_BITS | lane as u64
            }
        }
    }

    /// Whose the completion carrying `bits` is.
    pub fn decode(bits: u64) -> Token {
        if bits & SYNC != 0 {
            Token::Sync(bits & !SYNC)
        } else if bits & ENGINE != 0 {
            Token::Engine(bits & TAG_MAX)
        } else {
            Token::Write { slot: (bits >> LANE_BITS) as usize, lane: (bits & ((1 << LANE_BITS) - 1)) as usize }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_and_they_never_collide() {
        for token in [
            Token::Sync(0),
            Token::Sync(12345),
            Token::Engine(0),
            Token::Engine(TAG_MAX),
            Token::Write { slot: 0, lane: 0 },
            Token::Write { slot: 77, lane: 1 },
            Token::Write { slot: SLOT_MAX as usize, lane: 255 },
        ] {
            assert_eq!(Token::decode(token.encode()), token);
        }
        assert_ne!(Token::Engine(5).encode(), Token::Write { slot: 0, lane: 5 }.encode());
        assert_ne!(Token::Sync(5).encode(), Token::Engine(5).encode());
    }

    #[test]
    #[should_panic(expected = "too large")]
    fn an_engine_tag_may_not_reach_the_kind_bits() {
        Token::Engine(ENGINE).encode();
    }
}

//! Which devices of a pool take an extent's copies (`docs/pool.md`,
//! decision 3): the `copies` distinct writable devices with the most room
//! left, in constant work whatever the fill.
//!
//! - Most room first, as btrfs allocates a chunk on the devices with the
//!   most free space (`gather_device_info`, `fs/btrfs/volumes.c`): equal
//!   devices take turns, a larger or emptier one takes more, and a pool
//!   fills to exactly what [`pool_rounds`] says it holds (taking the
//!   roomiest devices for each item in turn is what reaches that bound; a
//!   rule by proportion, as bcachefs's `bch2_dev_stripe_increment`, left a
//!   mirror over three devices one extent short of it).
//! - Among the devices within 1/64 of the most room, one is drawn by a
//!   hash of the choice's sequence number and the place, as CRUSH's
//!   `straw2` draws (`bucket_straw2_choose`, `src/crush/mapper.c`): every
//!   device then shares extents with every other, so that a lost device's
//!   copies are read back from all the survivors, not from the one or two
//!   a strict order paired it with. Near full, the slack is below a block
//!   and the choice is the strict order again.
//! - A device with [`Chooser::set_queue_target`] blocks or more in flight
//!   is passed over while enough others are below it, as OpenZFS moves on
//!   from a vdev whose queue reaches its target (`metaslab_class_rotate`,
//!   `module/zfs/metaslab.c`): a device slow to finish its writes (busy,
//!   or slower) takes them at the rate it completes them, and an empty
//!   device that joins takes its queue's worth, not every write, while
//!   the others go on taking theirs.
//! - A pool has at most [`MAX_DEVICES`]. The choice works on masks of
//!   them: the devices excluded (away, full, already holding a copy), those
//!   below their queue target, and those found within the slack of the
//!   most room the last time it was computed (`best`). Frees only fall
//!   between computations (a choice charges the device it takes; a rise
//!   empties `best`), and a device within the slack of an older, larger
//!   most is within it of today's, so a copy is drawn from `best` in
//!   constant work whatever the pool's size; the pass over the places
//!   runs only once `best` has none left to offer (for equal devices,
//!   once each has taken 1/64 of its room). No sort, no allocation.
//!
//! The chooser keeps no zones: the volume tells it each device's free
//! blocks ([`Chooser::set_free`]) and masks a device whose zones cannot
//! take an extent.

/// The most devices in a pool.
pub const MAX_DEVICES: usize = 16;

/// A set of device places, one bit each.
pub type DeviceMask = u16;

#[derive(Clone, Copy, Debug, Default)]
struct Member {
    /// Blocks it can still take.
    free_blocks: u64,
    /// Blocks of writes submitted and not completed.
    inflight_blocks: u64,
}

/// How many items of `copies` copies each, on distinct devices, devices
/// that take `room[i]` items each can hold: the largest `r` with
/// `sum(min(room[i], r)) >= copies * r` (no device takes two copies of an
/// item, so none gives more than `r`). Choosing the devices with the most
/// room left for each item in turn reaches it. With as many devices as
/// copies it is the smallest room; with fewer, none. O(N log(sum)): for
/// reports, never for placement.
pub fn pool_rounds(room: &[u64], copies: usize) -> u64 {
    if copies == 0 || room.len() < copies {
        return 0;
    }
    let holds = |r: u64| room.iter().map(|&x| u128::from(x.min(r))).sum::<u128>() >= u128::from(r) * copies as u128;
    let total: u128 = room.iter().map(|&x| u128::from(x)).sum();
    let (mut low, mut high) = (0u64, u64::try_from(total / copies as u128).unwrap_or(u64::MAX));
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        if holds(mid) {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    low
}

/// Why a choice failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Short {
    /// Copies asked for.
    pub wanted: usize,
    /// Devices writable and not excluded.
    pub available: DeviceMask,
}

/// The devices of a pool, by place, as placement sees them. See the
/// [module documentation](self).
#[derive(Clone, Debug)]
pub struct Chooser {
    members: [Member; MAX_DEVICES],
    /// Blocks in flight at which a device is passed over.
    queue_target_blocks: u64,
    /// Choices made: what the draws among near-equal devices hash.
    sequence: u64,
    /// The writable places (kept with `members`).
    writable: DeviceMask,
    /// The places below the queue target (kept with `members`).
    idle: DeviceMask,
    /// Writable places at or above `floor`: within the slack of the most
    /// room when it was last computed. Empty: compute again.
    best: DeviceMask,
    floor: u64,
}

impl Default for Chooser {
    fn default() -> Self {
        Chooser {
            members: [Member::default(); MAX_DEVICES],
            queue_target_blocks: u64::MAX,
            sequence: 0,
            writable: 0,
            idle: DeviceMask::MAX,
            best: 0,
            floor: 0,
        }
    }
}

/// Room within this fraction of the most is as good as the most: the
/// device is drawn among them.
const SLACK_SHIFT: u32 = 6;

/// The draw for copy `copy` of choice `sequence` (SplitMix64's finaliser).
fn draw(sequence: u64, copy: usize) -> u64 {
    let mut z = sequence.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (copy as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `SELECT[byte][n]`: the position of the `n`th set bit of `byte`.
const SELECT: [[u8; 8]; 256] = {
    let mut table = [[0u8; 8]; 256];
    let mut byte = 0;
    while byte < 256 {
        let (mut bit, mut n) = (0, 0);
        while bit < 8 {
            if byte & (1 << bit) != 0 {
                table[byte][n] = bit as u8;
                n += 1;
            }
            bit += 1;
        }
        byte += 1;
    }
    table
};

/// The place of the `n`th set bit of `mask` (`n` below its count).
/// Written to select, not branch: which byte holds the bit is a coin toss
/// in a pool of equal devices, which a branch would mispredict half the
/// time.
fn nth_place(mask: DeviceMask, n: u32) -> usize {
    let below = u32::from(ONES[usize::from(mask & 0xff)]);
    let high = n >= below;
    let byte = if high { mask >> 8 } else { mask & 0xff };
    let index = if high { n - below } else { n };
    usize::from(SELECT[usize::from(byte)][(index & 7) as usize]) + if high { 8 } else { 0 }
}

/// `ONES[byte]`: the bits set in `byte`.
const ONES: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut byte = 0;
    while byte < 256 {
        table[byte] = (byte as u32).count_ones() as u8;
        byte += 1;
    }
    table
};

/// The places in `mask`: two table lookups, where `count_ones` without
/// the `popcnt` instruction (the x86-64 baseline the tools build for) is a
/// dozen and more.
fn ones(mask: DeviceMask) -> u32 {
    u32::from(ONES[usize::from(mask & 0xff)]) + u32::from(ONES[usize::from(mask >> 8)])
}

/// `draw` scaled to `0..count` (multiply-high: no division).
fn scaled(draw: u64, count: u32) -> u32 {
    ((u128::from(draw) * u128::from(count)) >> 64) as u32
}

impl Chooser {
    /// A pool with no device writable yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Device `place` takes writes (it joined, or came back), with
    /// `free_blocks` free. Panics if `place` is out of range.
    pub fn add(&mut self, place: usize, free_blocks: u64) {
        self.members[place] = Member { free_blocks, inflight_blocks: 0 };
        self.writable |= 1 << place;
        self.idle |= 1 << place;
        self.best = 0;
    }

    /// Device `place` takes no more writes (away, failed, being removed).
    pub fn remove(&mut self, place: usize) {
        self.writable &= !(1 << place);
        self.best &= !(1 << place);
    }

    /// Device `place` can now take `free_blocks` (after an allocation, a
    /// reset, a reclaim).
    pub fn set_free(&mut self, place: usize, free_blocks: u64) {
        let member = &mut self.members[place];
        if free_blocks > member.free_blocks {
            // The most room may have risen: `best` no longer knows.
            self.best = 0;
        } else if free_blocks < self.floor {
            self.best &= !(1 << place);
        }
        member.free_blocks = free_blocks;
    }

    /// A device with `blocks` or more in flight is passed over while enough
    /// others are below it (no limit until set).
    pub fn set_queue_target(&mut self, blocks: u64) {
        self.queue_target_blocks = blocks.max(1);
        for place in 0..MAX_DEVICES {
            self.update_idle(place);
        }
    }

    /// The writable devices.
    pub fn writable(&self) -> DeviceMask {
        self.writable
    }

    fn update_idle(&mut self, place: usize) {
        if self.members[place].inflight_blocks < self.queue_target_blocks {
            self.idle |= 1 << place;
        } else {
            self.idle &= !(1 << place);
        }
    }

    /// The places of `among` with the most free blocks, within the slack:
    /// `(mask, floor)`. One pass over the places.
    fn within_slack(&self, among: DeviceMask) -> (DeviceMask, u64) {
        let places = || (0..MAX_DEVICES).filter(move |&p| among & (1 << p) != 0);
        let most = places().map(|p| self.members[p].free_blocks).max().unwrap_or(0);
        let floor = most - (most >> SLACK_SHIFT);
        (places().filter(|&p| self.members[p].free_blocks >= floor).fold(0, |mask, p| mask | 1 << p), floor)
    }

    /// Chooses `out.len()` distinct writable devices outside `exclude` for
    /// an extent of `blocks`: below the queue target first, then among
    /// those the most free blocks, a device drawn among those within 1/64
    /// of the most; each chosen one is charged the blocks (until the
    /// volume's next [`Chooser::set_free`]). Constant work while `best`
    /// offers a device (see the module documentation); a pass over the
    /// places when it does not.
    pub fn choose(&mut self, blocks: u32, exclude: DeviceMask, out: &mut [u8]) -> Result<(), Short> {
        let available = self.writable & !exclude;
        if (ones(available) as usize) < out.len() {
            return Err(Short { wanted: out.len(), available });
        }
        self.sequence = self.sequence.wrapping_add(1);
        let mut open = available;
        for (copy, slot) in out.iter_mut().enumerate() {
            let idle = open & self.idle;
            let candidates = if idle != 0 { idle } else { open };
            let mut pick = candidates & self.best;
            if pick == 0 {
                (self.best, self.floor) = self.within_slack(self.writable);
                pick = candidates & self.best;
                if pick == 0 {
                    // The pool's roomiest are taken, excluded or busy:
                    // the roomiest of the candidates, within the slack.
                    pick = self.within_slack(candidates).0;
                }
            }
            let place = nth_place(pick, scaled(draw(self.sequence, copy), ones(pick)));
            open &= !(1 << place);
            *slot = place as u8;
            let member = &mut self.members[place];
            member.free_blocks = member.free_blocks.saturating_sub(u64::from(blocks));
            if member.free_blocks < self.floor {
                self.best &= !(1 << place);
            }
        }
        Ok(())
    }

    /// A write of `blocks` to `place` was submitted.
    pub fn submitted(&mut self, place: usize, blocks: u32) {
        self.members[place].inflight_blocks += u64::from(blocks);
        self.update_idle(place);
    }

    /// A write of `blocks` to `place` completed (`Ok` or not).
    pub fn completed(&mut self, place: usize, blocks: u32) {
        let member = &mut self.members[place];
        member.inflight_blocks = member.inflight_blocks.saturating_sub(u64::from(blocks));
        self.update_idle(place);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(capacities: &[u64]) -> Chooser {
        let mut chooser = Chooser::new();
        for (place, &capacity) in capacities.iter().enumerate() {
            chooser.add(place, capacity);
        }
        chooser
    }

    /// Allocates `count` extents of `blocks` with `copies` copies, each
    /// completing at once; the blocks placed on each device.
    fn fill(chooser: &mut Chooser, free: &mut [u64], count: usize, blocks: u32, copies: usize) -> Vec<u64> {
        let mut placed = vec![0u64; free.len()];
        let mut out = vec![0u8; copies];
        for _ in 0..count {
            chooser.choose(blocks, 0, &mut out).unwrap();
            for &place in &out {
                let place = usize::from(place);
                free[place] -= u64::from(blocks);
                placed[place] += u64::from(blocks);
                chooser.set_free(place, free[place]);
            }
        }
        placed
    }

    #[test]
    fn copies_go_to_distinct_writable_devices_outside_the_mask() {
        let mut chooser = pool(&[100; 6]);
        chooser.remove(2);
        let mut out = [0u8; 3];
        for round in 0..200 {
            chooser.choose(1, 1 << 4, &mut out).unwrap();
            let mut seen = 0u16;
            for &place in &out {
                assert!(place != 2 && place != 4, "round {round}: {out:?}");
                assert_eq!(seen & 1 << place, 0, "round {round}: {out:?} repeats a device");
                seen |= 1 << place;
            }
        }
    }

    #[test]
    fn too_few_devices_is_short_and_names_those_left() {
        let mut chooser = pool(&[100; 3]);
        chooser.remove(0);
        let mut out = [0u8; 3];
        assert_eq!(chooser.choose(1, 0, &mut out), Err(Short { wanted: 3, available: 0b110 }));
        let mut two = [0u8; 2];
        assert_eq!(chooser.choose(1, 1 << 1, &mut two), Err(Short { wanted: 2, available: 0b100 }));
        assert!(chooser.choose(1, 0, &mut two).is_ok());
    }

    #[test]
    fn equal_devices_take_equal_shares() {
        for (devices, copies) in [(4, 1), (4, 2), (5, 3), (16, 3)] {
            let mut free = vec![100_000u64; devices];
            let mut chooser = pool(&free);
            let placed = fill(&mut chooser, &mut free, 3000, 8, copies);
            // Within the slack of each other (1/64 of the room) and an
            // extent.
            let (low, high) = (placed.iter().min().unwrap(), placed.iter().max().unwrap());
            let slack = free.iter().max().unwrap() >> SLACK_SHIFT;
            assert!(high - low <= slack + 8, "{devices} devices, {copies} copies: {placed:?}");
            // Every device shares extents with every other: a lost one's
            // copies come back from all the rest.
            if copies > 1 {
                let mut shared = vec![vec![0u32; devices]; devices];
                let mut out = vec![0u8; copies];
                for _ in 0..200 {
                    chooser.choose(8, 0, &mut out).unwrap();
                    for &a in &out {
                        for &b in &out {
                            shared[usize::from(a)][usize::from(b)] += 1;
                        }
                    }
                }
                let pairs = (0..devices).flat_map(|a| (0..devices).map(move |b| (a, b))).filter(|(a, b)| a != b);
                let never: Vec<(usize, usize)> = pairs.filter(|&(a, b)| shared[a][b] == 0).collect();
                assert!(devices > 5 || never.is_empty(), "{devices} devices: pairs never together {never:?}");
            }
        }
    }

    #[test]
    fn the_device_with_the_most_room_takes_the_copy() {
        // 2:1:1 by size: the large one alone until it has no more room
        // than the others, then all in turn; they end with equal room.
        let mut free = vec![40_000u64, 20_000, 20_000];
        let mut chooser = pool(&free);
        let placed = fill(&mut chooser, &mut free, 4000, 8, 1);
        // 20,000 blocks to the large one alone (but for the last 1/64 of
        // its room), then turns.
        assert!(placed[0] >= 24_000 - 400 && placed[0] <= 24_000 + 400, "{placed:?}");
        let spread = free.iter().max().unwrap() - free.iter().min().unwrap();
        assert!(spread <= (free[0] >> SLACK_SHIFT) + 8, "room left {free:?}");
        // And a second copy never doubles up on the large one.
        let mut out = [0u8; 2];
        chooser.choose(8, 0, &mut out).unwrap();
        assert_ne!(out[0], out[1]);
    }

    #[test]
    fn a_device_slow_to_complete_is_chosen_less() {
        let mut chooser = pool(&[1_000_000; 2]);
        chooser.set_queue_target(4 * 64);
        let mut out = [0u8; 1];
        let mut chosen = [0u32; 2];
        for _ in 0..100 {
            chooser.choose(64, 0, &mut out).unwrap();
            let place = usize::from(out[0]);
            chosen[place] += 1;
            chooser.submitted(place, 64);
            // Device 1's writes complete at once; device 0's never do.
            if place == 1 {
                chooser.completed(1, 64);
            }
        }
        // Device 0 takes writes until its queue is at the target, then
        // none; device 1 the rest.
        assert_eq!(chosen, [4, 96]);
        // With no device below the target, the roomiest is taken.
        let mut stuck = pool(&[1_000_000; 2]);
        stuck.set_queue_target(64);
        for _ in 0..10 {
            stuck.choose(64, 0, &mut out).unwrap();
            stuck.submitted(usize::from(out[0]), 64);
        }
        assert!(stuck.members[0].inflight_blocks >= 4 * 64 && stuck.members[1].inflight_blocks >= 4 * 64);
    }

    #[test]
    fn a_device_that_joins_takes_its_queue_not_every_write() {
        // Three devices half full and a fourth, empty, joins; writes are
        // in flight 8 at a time, completing oldest first. The newcomer
        // takes more than its quarter (it has the most room), but never
        // more than its queue target in flight: the others go on taking
        // writes, so the pool's bandwidth is not one device's.
        let mut free = vec![50_000u64, 50_000, 50_000, 100_000];
        let mut chooser = pool(&free);
        chooser.set_queue_target(4 * 8);
        let mut inflight = std::collections::VecDeque::new();
        let mut placed = [0u64; 4];
        let mut out = [0u8; 1];
        for _ in 0..400 {
            if inflight.len() == 8 {
                let (place, blocks) = inflight.pop_front().unwrap();
                chooser.completed(place, blocks);
            }
            chooser.choose(8, 0, &mut out).unwrap();
            let place = usize::from(out[0]);
            free[place] -= 8;
            placed[place] += 8;
            chooser.set_free(place, free[place]);
            chooser.submitted(place, 8);
            inflight.push_back((place, 8));
        }
        assert!(placed[3] > 100 * 8 && placed[3] < 400 * 8, "{placed:?}");
        assert!(placed[..3].iter().all(|&p| p > 0), "{placed:?}");
    }

    #[test]
    fn ones_counts_every_mask_as_count_ones_does() {
        for mask in 0..=DeviceMask::MAX {
            assert_eq!(ones(mask), mask.count_ones(), "mask {mask:#06x}");
        }
    }

    #[test]
    fn nth_place_finds_each_set_bit_in_order() {
        for mask in 0..=DeviceMask::MAX {
            let places: Vec<usize> = (0..MAX_DEVICES).filter(|&p| mask & (1 << p) != 0).collect();
            for (n, &place) in places.iter().enumerate() {
                assert_eq!(nth_place(mask, n as u32), place, "mask {mask:#06x}, n {n}");
            }
        }
    }

    #[test]
    fn every_copy_goes_to_a_candidate_within_the_slack_of_the_roomiest() {
        // The rule, checked against the chooser's state before each choice
        // (frees rising and falling, devices leaving and joining, queues
        // filling), whatever `best` remembers.
        let mut random = xorshift(11);
        for round in 0..200 {
            let devices = 1 + (random() % 16) as usize;
            let mut chooser = Chooser::new();
            chooser.set_queue_target(64);
            for place in 0..devices {
                chooser.add(place, 1_000 + random() % 100_000);
            }
            for step in 0..300 {
                match random() % 10 {
                    0 => {
                        let place = (random() % devices as u64) as usize;
                        chooser.set_free(place, random() % 120_000);
                    }
                    1 if devices > 1 => chooser.remove((random() % devices as u64) as usize),
                    2 => {
                        let place = (random() % devices as u64) as usize;
                        chooser.add(place, random() % 120_000);
                    }
                    3 => chooser.submitted((random() % devices as u64) as usize, 32),
                    4 => chooser.completed((random() % devices as u64) as usize, 32),
                    _ => {}
                }
                let copies = 1 + (random() % 3) as usize;
                let exclude = (random() & u64::from(DeviceMask::MAX)) as DeviceMask & (random() as DeviceMask);
                let before = chooser.clone();
                let mut out = vec![0u8; copies];
                let blocks = 1 + (random() % 64) as u32;
                if chooser.choose(blocks, exclude, &mut out).is_err() {
                    assert!(((before.writable & !exclude).count_ones() as usize) < copies);
                    continue;
                }
                // Replay the rule on the state before, copy by copy.
                let mut state = before.clone();
                let mut open = state.writable & !exclude;
                for &place in &out {
                    let place = usize::from(place);
                    assert!(open & (1 << place) != 0, "round {round} step {step}: {out:?} outside {open:#06x}");
                    let idle = open & state.idle;
                    let candidates = if idle != 0 { idle } else { open };
                    assert!(candidates & (1 << place) != 0, "round {round} step {step}: a busy device taken");
                    let most = (0..MAX_DEVICES)
                        .filter(|&p| candidates & (1 << p) != 0)
                        .map(|p| state.members[p].free_blocks)
                        .max()
                        .unwrap();
                    let free = state.members[place].free_blocks;
                    assert!(free >= most - (most >> SLACK_SHIFT), "round {round} step {step}: {free} of {most}");
                    open &= !(1 << place);
                    state.members[place].free_blocks = free.saturating_sub(u64::from(blocks));
                }
            }
        }
    }

    #[test]
    fn pool_rounds_is_what_distinct_copies_can_fill() {
        assert_eq!(pool_rounds(&[10, 10, 10], 2), 15);
        assert_eq!(pool_rounds(&[10, 10, 40], 2), 20, "the large device takes one copy of each, no more");
        assert_eq!(pool_rounds(&[7, 9], 2), 7, "a mirror of two: the smaller");
        assert_eq!(pool_rounds(&[7, 9, 100], 1), 116);
        assert_eq!(pool_rounds(&[2, 2, 1], 2), 2, "whole items only");
        assert_eq!(pool_rounds(&[5, 5], 3), 0, "fewer devices than copies");
        assert_eq!(pool_rounds(&[u64::MAX, u64::MAX], 1), u64::MAX);
        // Against filling greedily, the most room first, over random pools.
        let mut random = xorshift(7);
        for _ in 0..500 {
            let devices = 1 + (random() % 8) as usize;
            let copies = 1 + (random() % 3) as usize;
            let mut room: Vec<u64> = (0..devices).map(|_| random() % 40).collect();
            let expected = pool_rounds(&room, copies);
            let mut rounds = 0;
            loop {
                room.sort_unstable_by(|a, b| b.cmp(a));
                if room.len() < copies || room[copies - 1] == 0 {
                    break;
                }
                room[..copies].iter_mut().for_each(|r| *r -= 1);
                rounds += 1;
            }
            assert_eq!(rounds, expected, "{devices} devices, {copies} copies");
        }
    }

    /// A small PRNG for the tests of this pure module (xorshift).
    fn xorshift(seed: u64) -> impl FnMut() -> u64 {
        let mut state = seed.max(1);
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }
}

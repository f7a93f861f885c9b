//! Extent owners, kept on the device rather than in memory: the last word
//! per extent the table would otherwise hold (`allocator/METADATA.md`,
//! step 4).
//!
//! Every page of the extent table has its owners' blob in the journal: in
//! each checkpoint's image of the page, and in any delta that wrote it
//! since (a blob has its own checksum, so that it can be read alone:
//! [`crate::journal::decode_owner_blob`]). In memory are only:
//!
//! - per page, its *home*: where its newest blob lies;
//! - the *recent* owners: those of extents added since their page's blob
//!   was last written, until a commit writes it again;
//! - a few pages' blobs, as read.
//!
//! An owner is the recent one if there is one, else its page's blob's.
//! Commits keep the recent owners under a bound: past it, a commit writes
//! the blobs of the pages holding them (read from their homes where the
//! recent owners do not fill them), round robin. A checkpoint writes
//! every page's blob, so once it seals every home lies in its segment,
//! and the segment it retires holds none.
//!
//! Open sets the homes from the blobs of the records it replays, in order,
//! and the recent owners from the additions between them.

use crate::hash::IdMap;
use crate::table::PAGE_SLOTS;
use std::collections::VecDeque;

/// Where a page's owners were last written: the blob at byte `byte` of
/// metadata segment `segment`, in record `seq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Home {
    pub segment: u32,
    pub byte: u64,
    pub seq: u64,
}

/// Pages' blobs kept as read.
const CACHED_PAGES: usize = 16;

/// The owner a page's blob holds for a live extent whose owner could not be
/// read back (every copy of the blob bad when a commit rewrote the page):
/// [`crate::Volume::owner`] reports it as [`crate::Error::OwnerLost`], and
/// no write may use it.
pub const OWNER_LOST: u64 = u64::MAX;

/// See the [module documentation](self).
#[derive(Debug, Default)]
pub(crate) struct Owners {
    homes: Vec<Option<Home>>,
    recent: IdMap<u64, u64>,
    /// Recent owners per page.
    per_page: Vec<u32>,
    /// Blobs as read from their homes, newest last.
    cache: VecDeque<(u64, Box<[u64]>)>,
    /// Where the next round of page writes begins.
    cursor: u64,
}

fn page_of(slot: u64) -> usize {
    (slot / PAGE_SLOTS as u64) as usize
}

impl Owners {
    /// Extent slot `slot` was given `owner`.
    pub fn set(&mut self, slot: u64, owner: u64) {
        let page = page_of(slot);
        if self.per_page.len() <= page {
            self.per_page.resize(page + 1, 0);
        }
        if self.recent.insert(slot, owner).is_none() {
            self.per_page[page] += 1;
        }
    }

    /// Slot `slot` holds no extent any more.
    pub fn clear(&mut self, slot: u64) {
        if self.recent.remove(&slot).is_some() {
            self.per_page[page_of(slot)] -= 1;
        }
    }

    /// The recent owner of slot `slot`, if it has one.
    pub fn recent(&self, slot: u64) -> Option<u64> {
        self.recent.get(&slot).copied()
    }

    /// Recent owners in all.
    pub fn recent_count(&self) -> usize {
        self.recent.len()
    }

    /// Recent owners on page `page`.
    pub fn recent_on(&self, page: u64) -> usize {
        self.per_page.get(page as usize).map_or(0, |&n| n as usize)
    }

    /// Where page `page`'s newest blob lies, if one was written.
    pub fn home(&self, page: u64) -> Option<Home> {
        self.homes.get(page as usize).copied().flatten()
    }

    /// Page `page`'s blob, when it is kept as read.
    pub fn cached(&self, page: u64) -> Option<&[u64]> {
        self.cache.iter().rev().find(|(p, _)| *p == page).map(|(_, owners)| &owners[..])
    }

    /// Keeps page `page`'s blob as read from its home.
    pub fn keep(&mut self, page: u64, owners: Box<[u64]>) {
        debug_assert_eq!(owners.len(), PAGE_SLOTS);
        self.cache.retain(|(p, _)| *p != page);
        if self.cache.len() == CACHED_PAGES {
            self.cache.pop_front();
        }
        self.cache.push_back((page, owners));
    }

    /// Puts page `page`'s recent owners over `owners` (its blob).
    pub fn overlay(&self, page: u64, owners: &mut [u64]) {
        if self.recent_on(page) == 0 {
            return;
        }
        let first = page * PAGE_SLOTS as u64;
        for (at, owner) in owners.iter_mut().enumerate() {
            if let Some(&recent) = self.recent.get(&(first + at as u64)) {
                *owner = recent;
            }
        }
    }

    /// Page `page`'s blob, with every owner kept for it, is now at `home`:
    /// its recent owners are dropped.
    pub fn written(&mut self, page: u64, home: Home) {
        let index = page as usize;
        if self.homes.len() <= index {
            self.homes.resize(index + 1, None);
        }
        self.homes[index] = Some(home);
        if !self.cache.is_empty() {
            self.cache.retain(|(p, _)| *p != page);
        }
        // Open replays a blob per page after its additions: stop at the
        // last of the page's recent owners rather than look up every slot.
        let mut left = self.recent_on(page);
        let first = page * PAGE_SLOTS as u64;
        for slot in first..first + PAGE_SLOTS as u64 {
            if left == 0 {
                break;
            }
            if self.recent.remove(&slot).is_some() {
                left -= 1;
            }
        }
        debug_assert_eq!(left, 0, "page {page}'s recent owners all lie in it");
        if let Some(count) = self.per_page.get_mut(index) {
            *count = 0;
        }
    }

    /// Pages whose blobs, written, bring the recent owners down to
    /// `target`: round robin over the pages holding some, at most `most`.
    pub fn pages_to_write(&mut self, target: usize, most: usize) -> Vec<u64> {
        let mut pages = Vec::new();
        let mut left = self.recent.len();
        let count = self.per_page.len() as u64;
        for step in 0..count {
            if left <= target || pages.len() >= most {
                break;
            }
            let page = (self.cursor + step) % count;
            let here = self.per_page[page as usize] as usize;
            if here > 0 {
                pages.push(page);
                left -= here;
            }
        }
        if let Some(&last) = pages.last() {
            self.cursor = (last + 1) % count.max(1);
        }
        pages
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = PAGE_SLOTS as u64;

    #[test]
    fn recent_owners_win_until_their_page_is_written() {
        let mut owners = Owners::default();
        owners.set(3, 30);
        owners.set(P + 1, 41);
        owners.set(P + 2, 42);
        assert_eq!((owners.recent(3), owners.recent_count(), owners.recent_on(1)), (Some(30), 3, 2));
        let mut blob = vec![7; PAGE_SLOTS];
        owners.overlay(1, &mut blob);
        assert_eq!((blob[0], blob[1], blob[2]), (7, 41, 42));
        owners.keep(1, vec![1; PAGE_SLOTS].into_boxed_slice());
        let home = Home { segment: 1, byte: 8192, seq: 9 };
        owners.written(1, home);
        assert_eq!((owners.home(1), owners.home(0), owners.cached(1)), (Some(home), None, None));
        assert_eq!((owners.recent(P + 1), owners.recent(3), owners.recent_count()), (None, Some(30), 1));
        owners.clear(3);
        owners.clear(3);
        assert_eq!((owners.recent_count(), owners.recent_on(0)), (0, 0));
    }

    #[test]
    fn pages_to_write_go_round_robin_until_the_target() {
        let mut owners = Owners::default();
        for page in [0, 2, 3, 5] {
            for at in 0..4 {
                owners.set(page * P + at, page);
            }
        }
        assert_eq!(owners.pages_to_write(16, 10), Vec::<u64>::new(), "at the target already");
        assert_eq!(owners.pages_to_write(9, 10), vec![0, 2]);
        assert_eq!(owners.pages_to_write(0, 1), vec![3], "from where the last round stopped");
        assert_eq!(owners.pages_to_write(0, 10), vec![5, 0, 2, 3], "wrapping around");
    }

    #[test]
    fn the_cache_keeps_the_newest_pages() {
        let mut owners = Owners::default();
        for page in 0..CACHED_PAGES as u64 + 2 {
            owners.keep(page, vec![page; PAGE_SLOTS].into_boxed_slice());
        }
        assert_eq!(owners.cached(0), None);
        assert_eq!(owners.cached(1), None);
        assert_eq!(owners.cached(2).map(|o| o[0]), Some(2));
        assert_eq!(owners.cached(CACHED_PAGES as u64 + 1).map(|o| o[5]), Some(CACHED_PAGES as u64 + 1));
    }
}

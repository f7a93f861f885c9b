//! Ring index and phase arithmetic, exhaustively over small queues: every
//! depth from 2 to 9, every sequence of batch sizes up to a length, with
//! completions in order and reversed. Every token completes exactly once,
//! the in-flight count is exact, and a completion the host did not expect
//! (an unknown or already-completed command identifier) is counted and
//! ignored, never delivered.

use nvme_driver::cmd::nvm;
use nvme_driver::loopback;
use nvme_driver::spec::status::Status;
use nvme_driver::Request;

fn flush(token: u64) -> Request {
    Request { command: nvm::flush(1), buffer: None, metadata: None, token }
}

/// All sequences of `len` batch sizes, each in `1..=max`.
fn sequences(len: usize, max: usize) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new()];
    for _ in 0..len {
        out = out.into_iter().flat_map(|s| (1..=max).map(move |b| [s.clone(), vec![b]].concat())).collect();
    }
    out
}

#[test]
fn every_depth_and_batch_sequence() {
    let mut checked = 0u64;
    for depth in 2u16..=9 {
        let capacity = usize::from(depth) - 1;
        // Enough batches to wrap the rings several times at every depth.
        let length = if capacity <= 3 { 6 } else { 4 };
        for sequence in sequences(length, capacity) {
            for reverse in [false, true] {
                let (mut pair, mut device, _) = loopback::queue_pair(depth).unwrap();
                let mut next_token = 0u64;
                // The sequence twice, so the indices wrap past the ring size.
                let mut seen = vec![false; 2 * sequence.iter().sum::<usize>()];
                for &batch in sequence.iter().chain(sequence.iter()) {
                    let first = next_token;
                    for _ in 0..batch {
                        pair.submit(flush(next_token)).unwrap();
                        next_token += 1;
                    }
                    assert_eq!(pair.in_flight(), batch);
                    pair.ring();
                    let mut fetched = Vec::new();
                    while let Some(command) = device.fetch() {
                        fetched.push(command);
                    }
                    assert_eq!(fetched.len(), batch);
                    if reverse {
                        fetched.reverse();
                    }
                    for command in fetched {
                        assert!(device.post(command.cid, Status::SUCCESS, 0));
                    }
                    let mut got = 0;
                    pair.poll(|c| {
                        assert!(c.token >= first && c.token < next_token, "token from this batch");
                        assert!(!seen[c.token as usize], "token {} completed twice", c.token);
                        seen[c.token as usize] = true;
                        got += 1;
                    });
                    assert_eq!(got, batch, "depth {depth} sequence {sequence:?}");
                    assert_eq!(pair.in_flight(), 0);
                }
                assert!(seen.iter().all(|&s| s), "every token completed");
                assert_eq!(pair.stats().spurious_completions, 0);
                checked += 1;
            }
        }
    }
    assert!(checked > 10_000, "{checked} runs");
}

#[test]
fn unexpected_completions_are_counted_and_ignored() {
    let (mut pair, mut device, _) = loopback::queue_pair(8).unwrap();
    pair.submit(flush(1)).unwrap();
    pair.submit(flush(2)).unwrap();
    pair.ring();
    let first = device.fetch().unwrap();
    let second = device.fetch().unwrap();
    // An identifier far outside the tracker table, then a real completion,
    // then the same completion again, then the other one.
    assert!(device.post(999, Status::SUCCESS, 0));
    assert!(device.post(first.cid, Status::SUCCESS, 0));
    assert!(device.post(first.cid, Status::SUCCESS, 0));
    assert!(device.post(second.cid, Status::SUCCESS, 0));
    let mut tokens = Vec::new();
    pair.poll(|c| tokens.push(c.token));
    assert_eq!(tokens, vec![1, 2], "each command once, nothing for the bogus entries");
    assert_eq!(pair.stats().spurious_completions, 2);
    assert_eq!(pair.in_flight(), 0);
    // A completion for a free slot, with nothing in flight at all.
    assert!(device.post(0, Status::SUCCESS, 0));
    assert_eq!(pair.poll(|_| panic!("nothing was in flight")), 0);
    assert_eq!(pair.stats().spurious_completions, 3);
    // The pair still works.
    pair.submit(flush(3)).unwrap();
    pair.ring();
    device.complete_all();
    let mut again = Vec::new();
    pair.poll(|c| again.push(c.token));
    assert_eq!(again, vec![3]);
}

//! 10,000 requests over a link that flips bits, drops bytes and cuts writes short (1e-3 per
//! byte in all, both directions): every reply must be exactly right. CRCs catch the damage,
//! deadlines and retries recover, and the device's reply cache keeps retried requests from
//! running twice (a FIFO push that ran twice would show up as an extra item).

use std::collections::VecDeque;
use std::time::Duration;

use tessera_core::wire::{Request, Response};
use tessera_host::transport::{Channel, FaultConfig};

const REQUESTS: usize = 10_000;
const SLOT_BYTES: usize = 512;

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn ten_thousand_requests_over_a_damaging_link() {
    let faults = FaultConfig {
        seed: 99,
        flip_rate: 4e-4,
        drop_rate: 3e-4,
        truncate_rate: 3e-4,
        ..FaultConfig::NONE
    };
    let mut channel =
        Channel::in_process(0, 1 << 16, Some(faults)).expect("hello gets through eventually");
    channel.set_deadline(Duration::from_millis(15));
    channel
        .request(&Request::AllocSlot {
            slot: 1,
            bytes: SLOT_BYTES as u32,
        })
        .unwrap();
    channel
        .request(&Request::CreateFifo {
            fifo: 2,
            item_bytes: 8,
            depth: 4,
        })
        .unwrap();

    // What the device must hold, tracked on the host.
    let mut slot = vec![0u8; SLOT_BYTES];
    let mut fifo: VecDeque<[u8; 8]> = VecDeque::new();
    let mut rng = Lcg(5);
    let mut checked = 0;
    for i in 0..REQUESTS {
        match rng.below(4) {
            0 => {
                let len = 1 + rng.below(48);
                let at = rng.below(SLOT_BYTES - len);
                let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                channel
                    .request(&Request::WriteSlot {
                        slot: 1,
                        offset: at as u32,
                        data: &data,
                    })
                    .unwrap();
                slot[at..at + len].copy_from_slice(&data);
            }
            1 => {
                let len = 1 + rng.below(48);
                let at = rng.below(SLOT_BYTES - len);
                let reply = channel
                    .request(&Request::ReadSlot {
                        slot: 1,
                        offset: at as u32,
                        len: len as u32,
                    })
                    .unwrap();
                let Response::Data { data } = reply.response() else {
                    panic!("request {i}: not data")
                };
                assert_eq!(
                    data,
                    &slot[at..at + len],
                    "request {i}: slot read back wrong"
                );
                checked += 1;
            }
            2 if fifo.len() < 4 => {
                let item = (rng.next() ^ i as u64).to_le_bytes();
                channel
                    .request(&Request::PushFifo {
                        fifo: 2,
                        data: &item,
                    })
                    .unwrap();
                fifo.push_back(item);
            }
            _ => match fifo.pop_front() {
                Some(want) => {
                    let reply = channel.request(&Request::PopFifo { fifo: 2 }).unwrap();
                    let Response::Data { data } = reply.response() else {
                        panic!("request {i}: not data")
                    };
                    assert_eq!(
                        data, want,
                        "request {i}: FIFO item wrong (a push or pop ran twice?)"
                    );
                    checked += 1;
                }
                None => {
                    let err = channel.request(&Request::PopFifo { fifo: 2 }).unwrap_err();
                    assert!(err.to_string().contains("empty"), "request {i}: {err}");
                }
            },
        }
    }
    assert!(
        checked > REQUESTS / 3,
        "most requests must be checked reads ({checked})"
    );
    let retries = channel.retries();
    eprintln!("{REQUESTS} requests, {checked} checked replies, {retries} retries");
    assert!(
        retries > 50,
        "the link must actually have been damaged ({retries} retries)"
    );
}

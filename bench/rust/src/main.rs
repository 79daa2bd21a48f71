//! Allocation-heavy Rust workloads for comparing global allocators.
//!
//! The binary is built once per allocator (cargo features `alloc-hakmem`, `alloc-mimalloc`,
//! `alloc-jemalloc`, `alloc-system`) by `bench/harness/rust_bench.py`, which runs the builds
//! interleaved and compares their CPU time and peak RSS. Every workload is deterministic and
//! prints a checksum line, so the harness can check that each allocator gave the same answer.
//!
//! - `json N ROUNDS`: a serde_json document of N records (objects, arrays, strings, numbers),
//!   serialised, parsed back and compared, ROUNDS times, with a tenth of the records replaced
//!   between rounds.
//! - `maps N THREADS`: THREADS producers build batches of `HashMap<String, Vec<u64>>` and send
//!   them over channels to one consumer that merges them into a bounded `BTreeMap<String,
//!   u64>`, so most blocks are freed by a thread other than the one that allocated them.

use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc;
use std::thread;

#[cfg(feature = "alloc-hakmem")]
#[global_allocator]
static GLOBAL: hakmem::HakMem = hakmem::HakMem;

#[cfg(feature = "alloc-mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(feature = "alloc-jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[cfg(feature = "alloc-system")]
#[global_allocator]
static GLOBAL: std::alloc::System = std::alloc::System;

#[cfg(not(any(
    feature = "alloc-hakmem",
    feature = "alloc-mimalloc",
    feature = "alloc-jemalloc",
    feature = "alloc-system"
)))]
compile_error!("select the global allocator with one alloc-* feature");

/// The name of the allocator this binary was built with.
fn allocator_name() -> &'static str {
    if cfg!(feature = "alloc-hakmem") {
        "hakmem"
    } else if cfg!(feature = "alloc-mimalloc") {
        "mimalloc"
    } else if cfg!(feature = "alloc-jemalloc") {
        "jemalloc"
    } else {
        "system"
    }
}

/// xorshift64*: deterministic, so every allocator sees the same sizes and the same answer.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn word(&mut self, min: u64, max: u64) -> String {
        let len = min + self.below(max - min + 1);
        (0..len).map(|_| (b'a' + self.below(26) as u8) as char).collect()
    }
}

/// FNV-1a over bytes, folded into a running checksum.
fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn record(rng: &mut Rng, id: u64) -> Value {
    let mut obj = Map::new();
    obj.insert("id".into(), Value::from(id));
    obj.insert("name".into(), Value::from(rng.word(5, 40)));
    let tags: Vec<Value> = (0..rng.below(9)).map(|_| Value::from(rng.word(2, 12))).collect();
    obj.insert("tags".into(), Value::from(tags));
    obj.insert("score".into(), Value::from(rng.below(1_000_000) as f64 / 1000.0));
    let mut attrs = Map::new();
    for _ in 0..rng.below(7) {
        attrs.insert(rng.word(3, 10), Value::from(rng.below(1 << 20)));
    }
    obj.insert("attrs".into(), Value::Object(attrs));
    let children: Vec<Value> = (0..rng.below(4))
        .map(|k| {
            let mut c = Map::new();
            c.insert("k".into(), Value::from(k));
            c.insert("text".into(), Value::from(rng.word(10, 120)));
            Value::Object(c)
        })
        .collect();
    obj.insert("children".into(), Value::from(children));
    Value::Object(obj)
}

fn json(n: u64, rounds: u64) -> String {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut records: Vec<Value> = (0..n).map(|i| record(&mut rng, i)).collect();
    let mut next_id = n;
    let mut checksum = 0xcbf2_9ce4_8422_2325u64;
    let mut bytes = 0u64;
    for round in 0..rounds {
        let doc = Value::from(std::mem::take(&mut records));
        let text = if round % 2 == 0 {
            serde_json::to_string(&doc).expect("serialise")
        } else {
            serde_json::to_string_pretty(&doc).expect("serialise")
        };
        bytes += text.len() as u64;
        checksum = fnv(checksum, text.as_bytes());
        let back: Value = serde_json::from_str(&text).expect("parse");
        drop(text);
        assert!(back == doc, "round {round}: the parsed document differs");
        drop(back);
        let Value::Array(mut recs) = doc else { unreachable!() };
        // Replace a tenth of the records, at random places, so the heap ages between rounds.
        for _ in 0..n / 10 {
            let at = rng.below(n) as usize;
            recs[at] = record(&mut rng, next_id);
            next_id += 1;
        }
        records = recs;
    }
    format!("json records={n} rounds={rounds} bytes={bytes} checksum={checksum:016x}")
}

fn maps(n: u64, threads: u64) -> String {
    const BATCH: u64 = 256;
    const KEYS: u64 = 50_000;
    const KEEP: usize = 20_000;
    let (tx, rx) = mpsc::sync_channel::<HashMap<String, Vec<u64>>>(64);
    let producers: Vec<_> = (0..threads)
        .map(|t| {
            let tx = tx.clone();
            thread::spawn(move || {
                let mut rng = Rng(0x1234_5678_9abc_def1 ^ (t + 1).wrapping_mul(0x9e37_79b9));
                let mut sent = 0;
                while sent < n {
                    let mut batch = HashMap::new();
                    for _ in 0..BATCH.min(n - sent) {
                        let key = format!("key-{}-{}", rng.below(KEYS), rng.word(0, 24));
                        let vals: Vec<u64> = (0..1 + rng.below(32)).map(|_| rng.below(1000)).collect();
                        batch.entry(key).or_insert_with(Vec::new).extend(vals);
                        sent += 1;
                    }
                    tx.send(batch).expect("send");
                }
            })
        })
        .collect();
    drop(tx);
    let mut map: BTreeMap<String, u64> = BTreeMap::new();
    let mut evicted = 0u64;
    let mut batches = 0u64;
    for batch in rx {
        batches += 1;
        for (key, vals) in batch {
            *map.entry(key).or_insert(0) += vals.iter().sum::<u64>();
        }
        while map.len() > KEEP {
            let (_, v) = map.pop_first().expect("non-empty");
            evicted += v;
        }
    }
    for p in producers {
        p.join().expect("producer");
    }
    let total = evicted + map.values().sum::<u64>();
    let expected_batches = threads * n.div_ceil(BATCH);
    assert_eq!(batches, expected_batches, "batches lost");
    format!("maps items={n} threads={threads} batches={batches} total={total}")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let num = |i: usize, default: u64| -> u64 {
        args.get(i).map_or(default, |s| s.parse().expect("a number"))
    };
    let out = match args.get(1).map(String::as_str) {
        Some("json") => json(num(2, 100_000), num(3, 4)),
        Some("maps") => maps(num(2, 500_000), num(3, 4)),
        Some("which") => String::new(),
        _ => {
            eprintln!("usage: {} json [RECORDS [ROUNDS]] | maps [ITEMS [THREADS]] | which", args[0]);
            std::process::exit(2);
        }
    };
    if out.is_empty() {
        println!("{}", allocator_name());
    } else {
        println!("{out}");
    }
}

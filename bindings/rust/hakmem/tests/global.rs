//! HakMem as the global allocator of a program that uses the standard library's
//! collections, threads and channels: the results are right, the memory went through
//! hakmem (its figures move with the program's allocations), and C's malloc stays the
//! C library's without the `override` feature.
use std::alloc::{GlobalAlloc, Layout};
use std::collections::HashMap;
use std::sync::mpsc;

#[global_allocator]
static GLOBAL: hakmem::HakMem = hakmem::HakMem;

extern "C" {
    fn malloc(size: usize) -> *mut u8;
    fn free(p: *mut u8);
}

// The tests measure hakmem's process-wide figures: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn in_use() -> u64 {
    hakmem::stat("total.in_use").unwrap()
}

#[test]
fn collections_threads_and_channels() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let base = in_use();
    // 64 MiB in one Vec and 100000 small Strings in a HashMap, held while measuring.
    let big: Vec<u64> = (0..8u64 << 20).collect();
    let mut map: HashMap<String, usize> = HashMap::new();
    for i in 0..100_000usize {
        map.insert(format!("key-{i}"), i);
    }
    let held = in_use();
    assert!(held >= base + (64 << 20) + 100_000 * 16, "in_use {base} -> {held}");
    assert_eq!(big.iter().sum::<u64>(), (8u64 << 20) * ((8u64 << 20) - 1) / 2);
    assert_eq!(map["key-77777"], 77777);
    let small = hakmem::stat("tier.small.live_blocks").unwrap();
    assert!(small >= 100_000, "tier.small.live_blocks {small}");

    // Threads that allocate, and send their blocks to another thread, which frees them.
    let (tx, rx) = mpsc::channel::<Vec<String>>();
    let producers: Vec<_> = (0..4)
        .map(|t| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for round in 0..200 {
                    let v: Vec<String> = (0..50).map(|i| format!("{t}/{round}/{i}")).collect();
                    tx.send(v).unwrap();
                }
            })
        })
        .collect();
    drop(tx);
    let consumer = std::thread::spawn(move || {
        let mut n = 0usize;
        let mut bytes = 0usize;
        for v in rx {
            n += v.len();
            bytes += v.iter().map(|s| s.len()).sum::<usize>();
        }
        (n, bytes)
    });
    for p in producers {
        p.join().unwrap();
    }
    let (n, bytes) = consumer.join().unwrap();
    assert_eq!(n, 4 * 200 * 50);
    assert!(bytes > n * 5);
    // Blocks freed by a thread that did not allocate them went through hakmem's remote
    // frees: the producers' Strings, freed by the consumer.
    let remote = hakmem::stat("remote.pushes").unwrap() + hakmem::stat("remote.blocks").unwrap();
    assert!(remote > 0, "no remote frees counted");

    drop(big);
    drop(map);
    let after = in_use();
    assert!(after + (64 << 20) <= held, "in_use {held} -> {after} after the drops");
}

#[test]
fn alignment_zeroing_and_realloc() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for &align in &[8usize, 16, 32, 64, 4096, 1 << 16, 1 << 21] {
        for &size in &[1usize, 24, 1000, 70_000, 3 << 20] {
            let layout = Layout::from_size_align(size, align).unwrap();
            unsafe {
                let p = GLOBAL.alloc_zeroed(layout);
                assert!(!p.is_null());
                assert_eq!(p as usize % align, 0, "align {align} size {size}");
                assert!(std::slice::from_raw_parts(p, size).iter().all(|&b| b == 0));
                std::ptr::write_bytes(p, 0xa5, size);
                let grown = size * 3 + 5;
                let q = GLOBAL.realloc(p, layout, grown);
                assert!(!q.is_null());
                assert_eq!(q as usize % align, 0, "realloc lost align {align} (size {size})");
                assert!(std::slice::from_raw_parts(q, size).iter().all(|&b| b == 0xa5));
                let shrunk = (size / 2).max(1);
                let r = GLOBAL.realloc(q, Layout::from_size_align(grown, align).unwrap(), shrunk);
                assert_eq!(r as usize % align, 0);
                assert!(std::slice::from_raw_parts(r, shrunk).iter().all(|&b| b == 0xa5));
                GLOBAL.dealloc(r, Layout::from_size_align(shrunk, align).unwrap());
            }
        }
    }
}

#[cfg(not(feature = "override"))]
#[test]
fn c_malloc_stays_the_c_librarys() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let base = hakmem::stat("tier.large.live_bytes").unwrap() + hakmem::stat("tier.huge.mapped_bytes").unwrap();
    let p = unsafe { malloc(32 << 20) };
    assert!(!p.is_null());
    let with = hakmem::stat("tier.large.live_bytes").unwrap() + hakmem::stat("tier.huge.mapped_bytes").unwrap();
    unsafe { free(p) };
    assert!(with < base + (32 << 20), "C malloc went to hakmem: {base} -> {with}");
}

#[cfg(feature = "override")]
#[test]
fn c_malloc_is_hakmems() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let base = in_use();
    let p = unsafe { malloc(32 << 20) };
    assert!(!p.is_null());
    let with = in_use();
    unsafe { free(p) };
    assert!(with >= base + (32 << 20), "C malloc did not go to hakmem: {base} -> {with}");
}

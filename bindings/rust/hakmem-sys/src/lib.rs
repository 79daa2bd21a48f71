//! Raw bindings to the hakmem C library (include/hakmem.h), which this crate builds from
//! its C sources with the cc crate. The safe layer is the `hakmem` crate.
//!
//! Features: `secure` builds the hardened library; `override` also exports the standard
//! names (malloc, free, ..., operator new/delete), so that C code in the process
//! allocates from hakmem too. Without it only the `hak_` functions below exist.
#![no_std]
#![allow(non_camel_case_types)]

use core::ffi::{c_char, c_int, c_void};

/// The process-wide figures of `hak_get_info`, in bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hak_info_t {
    pub in_use: usize,
    pub peak_in_use: usize,
    pub mapped: usize,
    pub committed: usize,
    pub released: usize,
}

/// One entry of the table of names (`hak_ctl_describe`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hak_ctl_desc_t {
    pub name: *const c_char,
    pub unit: *const c_char,
    pub doc: *const c_char,
    pub is_signed: c_int,
    pub exact: c_int,
    pub writable: c_int,
}

/// The heap profiler's state (`hak_prof_get_info`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hak_prof_info_t {
    pub active: c_int,
    pub rate: usize,
    pub samples: u64,
    pub stacks: usize,
    pub live_samples: usize,
    pub dropped: u64,
    pub live_bytes_estimate: usize,
    pub table_bytes: usize,
}

/// A user heap (opaque).
#[repr(C)]
pub struct hak_heap_t {
    _private: [u8; 0],
}

/// A user heap's figures (`hak_heap_stats`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hak_heap_stats_t {
    pub in_use: usize,
    pub blocks: usize,
    pub reserved: usize,
    pub peak: usize,
    pub slabs: usize,
}

/// The C library's `FILE`, only ever handled by pointer.
#[repr(C)]
pub struct FILE {
    _private: [u8; 0],
}

extern "C" {
    pub fn hak_malloc(size: usize) -> *mut c_void;
    pub fn hak_calloc(count: usize, size: usize) -> *mut c_void;
    pub fn hak_realloc(p: *mut c_void, size: usize) -> *mut c_void;
    pub fn hak_reallocarray(p: *mut c_void, count: usize, size: usize) -> *mut c_void;
    pub fn hak_free(p: *mut c_void);
    pub fn hak_free_sized(p: *mut c_void, size: usize);
    pub fn hak_free_aligned_sized(p: *mut c_void, alignment: usize, size: usize);
    pub fn hak_posix_memalign(out: *mut *mut c_void, alignment: usize, size: usize) -> c_int;
    pub fn hak_aligned_alloc(alignment: usize, size: usize) -> *mut c_void;
    pub fn hak_memalign(alignment: usize, size: usize) -> *mut c_void;
    pub fn hak_valloc(size: usize) -> *mut c_void;
    pub fn hak_pvalloc(size: usize) -> *mut c_void;
    pub fn hak_malloc_usable_size(p: *mut c_void) -> usize;
    pub fn hak_malloc_trim(pad: usize) -> c_int;
    pub fn hak_stats_print(out: *mut FILE);
    pub fn hak_malloc_stats();
    pub fn hak_get_info(info: *mut hak_info_t);
    pub fn hak_stats_get(name: *const c_char, value: *mut u64) -> c_int;
    pub fn hak_ctl_get(name: *const c_char, out: *mut c_void, len: *mut usize) -> c_int;
    pub fn hak_ctl_set(name: *const c_char, input: *const c_void, len: usize) -> c_int;
    pub fn hak_stats_json(out: *mut FILE) -> c_int;
    pub fn hak_stats_json_buf(buf: *mut c_char, len: usize, needed: *mut usize) -> c_int;
    pub fn hak_ctl_describe(index: usize) -> *const hak_ctl_desc_t;
    pub fn hak_prof_start(rate: usize) -> c_int;
    pub fn hak_prof_stop();
    pub fn hak_prof_dump(path: *const c_char) -> c_int;
    pub fn hak_prof_get_info(info: *mut hak_prof_info_t);
    pub fn hak_heap_new() -> *mut hak_heap_t;
    pub fn hak_heap_destroy(heap: *mut hak_heap_t);
    pub fn hak_heap_release(heap: *mut hak_heap_t);
    pub fn hak_heap_malloc(heap: *mut hak_heap_t, size: usize) -> *mut c_void;
    pub fn hak_heap_calloc(heap: *mut hak_heap_t, count: usize, size: usize) -> *mut c_void;
    pub fn hak_heap_realloc(heap: *mut hak_heap_t, p: *mut c_void, size: usize) -> *mut c_void;
    pub fn hak_heap_aligned_alloc(heap: *mut hak_heap_t, alignment: usize, size: usize) -> *mut c_void;
    pub fn hak_heap_set_default(heap: *mut hak_heap_t) -> *mut hak_heap_t;
    pub fn hak_heap_get_default() -> *mut hak_heap_t;
    pub fn hak_heap_stats(heap: *mut hak_heap_t, stats: *mut hak_heap_stats_t);
}

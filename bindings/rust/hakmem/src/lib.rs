//! The hakmem memory allocator for Rust programs.
//!
//! ```no_run
//! #[global_allocator]
//! static GLOBAL: hakmem::HakMem = hakmem::HakMem;
//! ```
//!
//! With that line every allocation of the Rust program (Vec, String, Box, HashMap, the
//! standard library's own) comes from hakmem. The C code in the process keeps the C
//! library's `malloc` unless the `override` feature is on, which also exports `malloc`,
//! `free`, ... and the C++ operators. The `secure` feature builds the hardened library
//! (size words, guard pages, a quarantine; an invalid or double free aborts with one line
//! on stderr).
//!
//! At run time: [`stat`] and [`ctl_get`] read any figure or option by its dotted name
//! (`"total.in_use"`, `"opt.purge_delay_ms"`, `"build.secure"`; [`names`] lists them),
//! [`stats_json`] gives the whole report in JSON, [`set_option`] changes the writable
//! options, [`prof`] drives the sampling heap profiler, [`trim`] returns free memory to
//! the OS. `HAKMEM_STATS=1` in the environment prints the report at exit, as for a C
//! program.
//!
//! # Heaps
//!
//! hakmem's user heaps are in [`heap`] as an unsafe API, not as an `Allocator` type.
//! `Allocator` is unstable (nightly only), and a heap breaks what a safe allocator type
//! would promise: a heap belongs to the thread that made it (allocating from another
//! thread aborts), and destroying it frees every block at once, which no borrow of the
//! collections that hold those blocks can follow. Dropping a [`heap::Heap`] is safe: its
//! blocks stay valid and move to the thread's own heap; destroying it is `unsafe`.

#![no_std]

extern crate alloc;

use alloc::string::String;
use alloc::vec::Vec;
use core::alloc::{GlobalAlloc, Layout};
use core::ffi::{c_char, c_void, CStr};
use core::fmt;
use core::ptr;

pub use hakmem_sys as sys;

/// The alignment every hakmem block has.
const MIN_ALIGN: usize = 16;

/// hakmem as the global allocator: `#[global_allocator] static A: HakMem = HakMem;`
///
/// Alignments up to 16 bytes take the plain calls; larger ones `hak_aligned_alloc`, and
/// `realloc` of such a block moves it to a block of the same alignment. Nothing here
/// allocates.
#[derive(Clone, Copy, Debug, Default)]
pub struct HakMem;

unsafe impl GlobalAlloc for HakMem {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= MIN_ALIGN {
            sys::hak_malloc(layout.size()) as *mut u8
        } else {
            sys::hak_aligned_alloc(layout.align(), layout.size()) as *mut u8
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= MIN_ALIGN {
            sys::hak_calloc(1, layout.size()) as *mut u8
        } else {
            let p = sys::hak_aligned_alloc(layout.align(), layout.size()) as *mut u8;
            if !p.is_null() {
                ptr::write_bytes(p, 0, layout.size());
            }
            p
        }
    }

    #[inline]
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        if layout.align() <= MIN_ALIGN {
            sys::hak_free_sized(p as *mut c_void, layout.size())
        } else {
            sys::hak_free_aligned_sized(p as *mut c_void, layout.align(), layout.size())
        }
    }

    #[inline]
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.align() <= MIN_ALIGN {
            return sys::hak_realloc(p as *mut c_void, new_size) as *mut u8;
        }
        // hak_realloc keeps 16 bytes of alignment only: a larger one needs a new block.
        let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
        let q = self.alloc(new_layout);
        if !q.is_null() {
            ptr::copy_nonoverlapping(p, q, layout.size().min(new_size));
            self.dealloc(p, layout);
        }
        q
    }
}

/// An error of the statistics and control calls: the negative errno value hakmem
/// returned (`-ENOENT` for an unknown name, `-EINVAL` for a bad value, `-EPERM` for a
/// read-only name), or the positive one of the profiler calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Error(pub i32);

pub const ENOENT: i32 = 2;
pub const EPERM: i32 = 1;
pub const EINVAL: i32 = 22;
pub const ERANGE: i32 = 34;

impl Error {
    /// The errno value, positive.
    pub fn errno(self) -> i32 {
        self.0.abs()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.errno() {
            ENOENT => "no such name",
            EPERM => "cannot change at run time",
            EINVAL => "invalid argument or value",
            ERANGE => "buffer too small",
            12 => "out of memory",
            95 => "not supported by this build",
            _ => "error",
        };
        write!(f, "hakmem: {} (errno {})", what, self.errno())
    }
}

pub type Result<T> = core::result::Result<T, Error>;

fn check(rc: i32) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Error(rc))
    }
}

/// A name as a NUL-terminated string, on the stack for the names hakmem has (all short).
struct CName {
    buf: [u8; 96],
}

impl CName {
    fn new(name: &str) -> Result<CName> {
        let bytes = name.as_bytes();
        if bytes.len() >= 96 || bytes.contains(&0) {
            return Err(Error(-ENOENT));
        }
        let mut buf = [0u8; 96];
        buf[..bytes.len()].copy_from_slice(bytes);
        Ok(CName { buf })
    }
    fn as_ptr(&self) -> *const c_char {
        self.buf.as_ptr() as *const c_char
    }
}

/// The figure `name` of the statistics report (an unsigned one): `"total.in_use"`,
/// `"class.5.live_blocks"`, `"remote.pushes"`, ...
pub fn stat(name: &str) -> Result<u64> {
    let n = CName::new(name)?;
    let mut v = 0u64;
    check(unsafe { sys::hak_stats_get(n.as_ptr(), &mut v) })?;
    Ok(v)
}

/// Any name, signed ones included (`"opt.purge_delay_ms"`, whose -1 means never). An
/// unsigned value above `i64::MAX` comes back as its bit pattern; use [`stat`] for those.
pub fn ctl_get(name: &str) -> Result<i64> {
    let n = CName::new(name)?;
    let mut v = 0i64;
    let mut len = 8usize;
    check(unsafe { sys::hak_ctl_get(n.as_ptr(), &mut v as *mut i64 as *mut c_void, &mut len) })?;
    Ok(v)
}

/// Changes a writable option at run time: `"opt.purge_delay_ms"` (-1, or 0 .. 2^31-1),
/// `"opt.region_cache"` (0 .. 2^20), `"opt.stats"` (0 off, 1 text, 2 JSON at exit).
pub fn set_option(name: &str, value: i64) -> Result<()> {
    let n = CName::new(name)?;
    check(unsafe { sys::hak_ctl_set(n.as_ptr(), &value as *const i64 as *const c_void, 8) })
}

/// The statistics report in JSON (docs/stats.md, schema docs/stats-schema.json).
pub fn stats_json() -> String {
    let mut need = 0usize;
    unsafe { sys::hak_stats_json_buf(ptr::null_mut(), 0, &mut need) };
    loop {
        // The report can grow between the two calls (a new size class in use): room to spare.
        let mut buf: Vec<u8> = Vec::with_capacity(need + 4096);
        let cap = buf.capacity();
        let rc = unsafe { sys::hak_stats_json_buf(buf.as_mut_ptr() as *mut c_char, cap, &mut need) };
        if rc == 0 {
            let len = unsafe { CStr::from_ptr(buf.as_ptr() as *const c_char) }.to_bytes().len();
            unsafe { buf.set_len(len) };
            return String::from_utf8(buf).expect("hakmem: the JSON report is UTF-8");
        }
    }
}

/// Process-wide figures in bytes (`hak_get_info`).
pub fn info() -> sys::hak_info_t {
    let mut i = sys::hak_info_t::default();
    unsafe { sys::hak_get_info(&mut i) };
    i
}

/// Returns free memory to the OS, keeping `pad` bytes; true if any was returned.
pub fn trim(pad: usize) -> bool {
    unsafe { sys::hak_malloc_trim(pad) != 0 }
}

/// One name of the table: what [`stat`], [`ctl_get`] and [`set_option`] take.
#[derive(Clone, Copy, Debug)]
pub struct Name {
    pub name: &'static str,
    pub unit: &'static str,
    pub doc: &'static str,
    pub is_signed: bool,
    pub exact: bool,
    pub writable: bool,
}

/// The table of names (`"class.<n>.…"` stands for one name per size class).
pub fn names() -> impl Iterator<Item = Name> {
    fn s(p: *const c_char) -> &'static str {
        unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("")
    }
    (0..).map_while(|i| {
        let d = unsafe { sys::hak_ctl_describe(i) };
        if d.is_null() {
            return None;
        }
        let d = unsafe { &*d };
        Some(Name {
            name: s(d.name),
            unit: s(d.unit),
            doc: s(d.doc),
            is_signed: d.is_signed != 0,
            exact: d.exact != 0,
            writable: d.writable != 0,
        })
    })
}

/// The sampling heap profiler (docs/profiling.md), which writes pprof heap profiles.
pub mod prof {
    use super::{sys, Error, Result};
    use core::ffi::c_char;

    /// Starts sampling one allocation per `rate` bytes on average (0: HAKMEM_PROF_RATE,
    /// default 512 KiB; 1: every allocation). ENOTSUP in the hardened library.
    pub fn start(rate: usize) -> Result<()> {
        match unsafe { sys::hak_prof_start(rate) } {
            0 => Ok(()),
            e => Err(Error(e)),
        }
    }

    /// No new samples; frees of sampled blocks are still followed.
    pub fn stop() {
        unsafe { sys::hak_prof_stop() }
    }

    /// Writes the profile to `path` (None: HAKMEM_PROF_PREFIX.<pid>.<n>.heap).
    pub fn dump(path: Option<&str>) -> Result<()> {
        let rc = match path {
            None => unsafe { sys::hak_prof_dump(core::ptr::null()) },
            Some(p) => {
                let mut v = alloc::vec::Vec::with_capacity(p.len() + 1);
                v.extend_from_slice(p.as_bytes());
                if v.contains(&0) {
                    return Err(Error(super::EINVAL));
                }
                v.push(0);
                unsafe { sys::hak_prof_dump(v.as_ptr() as *const c_char) }
            }
        };
        match rc {
            0 => Ok(()),
            e => Err(Error(e)),
        }
    }

    /// The profiler's state.
    pub fn info() -> sys::hak_prof_info_t {
        let mut i = sys::hak_prof_info_t::default();
        unsafe { sys::hak_prof_get_info(&mut i) };
        i
    }
}

/// User heaps: an unsafe API (the crate documentation says why).
pub mod heap {
    use super::sys;
    use core::ffi::c_void;
    use core::marker::PhantomData;

    /// A heap of the calling thread. It is neither `Send` nor `Sync`: only its thread may
    /// allocate from it or destroy it (any thread may free its blocks, with [`free`]).
    /// Dropping it releases it: its blocks stay valid and move to the thread's own heap.
    pub struct Heap {
        raw: *mut sys::hak_heap_t,
        _not_send: PhantomData<*mut ()>,
    }

    impl Heap {
        /// A new, empty heap; None when memory is exhausted.
        pub fn new() -> Option<Heap> {
            let raw = unsafe { sys::hak_heap_new() };
            if raw.is_null() {
                None
            } else {
                Some(Heap { raw, _not_send: PhantomData })
            }
        }

        /// The C handle, for `hak_heap_*` calls of [`sys`].
        pub fn as_raw(&self) -> *mut sys::hak_heap_t {
            self.raw
        }

        /// A block of `size` bytes (16-byte aligned), or null.
        pub fn malloc(&self, size: usize) -> *mut u8 {
            unsafe { sys::hak_heap_malloc(self.raw, size) as *mut u8 }
        }

        /// A zeroed block of `count * size` bytes, or null.
        pub fn calloc(&self, count: usize, size: usize) -> *mut u8 {
            unsafe { sys::hak_heap_calloc(self.raw, count, size) as *mut u8 }
        }

        /// A block aligned to `alignment` (a power of two), or null.
        pub fn aligned_alloc(&self, alignment: usize, size: usize) -> *mut u8 {
            unsafe { sys::hak_heap_aligned_alloc(self.raw, alignment, size) as *mut u8 }
        }

        /// # Safety
        /// `p` is null or a live hakmem block; on success it is no longer valid.
        pub unsafe fn realloc(&self, p: *mut u8, size: usize) -> *mut u8 {
            sys::hak_heap_realloc(self.raw, p as *mut c_void, size) as *mut u8
        }

        /// The heap's figures.
        pub fn stats(&self) -> sys::hak_heap_stats_t {
            let mut s = sys::hak_heap_stats_t::default();
            unsafe { sys::hak_heap_stats(self.raw, &mut s) };
            s
        }

        /// Makes this heap the one the global allocator (and malloc) takes from on this
        /// thread; returns the previous default's handle.
        ///
        /// # Safety
        /// The heap must be set back (`set_default(null)` via [`sys`], or another heap)
        /// before it is destroyed, and no block allocated meanwhile may outlive its
        /// destruction.
        pub unsafe fn set_default(&self) -> *mut sys::hak_heap_t {
            sys::hak_heap_set_default(self.raw)
        }

        /// Frees every block of the heap, and the heap.
        ///
        /// # Safety
        /// No block of the heap may be used afterwards (a `Vec` or `Box` holding one
        /// included).
        pub unsafe fn destroy(self) {
            let raw = self.raw;
            core::mem::forget(self);
            sys::hak_heap_destroy(raw)
        }
    }

    impl Drop for Heap {
        fn drop(&mut self) {
            unsafe { sys::hak_heap_release(self.raw) }
        }
    }

    /// Frees a block of any heap, from any thread.
    ///
    /// # Safety
    /// `p` is null or a live hakmem block, freed once.
    pub unsafe fn free(p: *mut u8) {
        sys::hak_free(p as *mut c_void)
    }
}

//! The hardened library (feature `secure`) catches a double free through the global
//! allocator: the child process that does it dies of SIGABRT with hakmem's one line.
#![cfg(feature = "secure")]
use std::alloc::{GlobalAlloc, Layout};
use std::os::unix::process::ExitStatusExt;

#[global_allocator]
static GLOBAL: hakmem::HakMem = hakmem::HakMem;

#[test]
fn double_free_aborts_the_child() {
    assert_eq!(hakmem::ctl_get("build.secure").unwrap(), 1);
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "double_free_child", "--nocapture"])
        .env("HAK_RS_TEST_CHILD", "double_free")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(6), "status {:?}, stderr {err}", out.status);
    // The block is in the quarantine, or its slab's size words mark it free: "double
    // free" or "invalid pointer", the one line hakmem prints before it aborts.
    assert!(
        err.contains("hakmem: free(): double free") || err.contains("hakmem: free(): invalid pointer"),
        "{err}"
    );
    assert!(!err.contains("double free not caught"), "{err}");
}

#[test]
fn double_free_child() {
    if std::env::var("HAK_RS_TEST_CHILD").as_deref() != Ok("double_free") {
        return;
    }
    let layout = Layout::from_size_align(48, 8).unwrap();
    unsafe {
        let p = GLOBAL.alloc(layout);
        p.write_bytes(1, 48);
        GLOBAL.dealloc(p, layout);
        GLOBAL.dealloc(p, layout); // the second free: hakmem aborts here
    }
    eprintln!("double free not caught");
}

//! The library links and serves hak_ calls, and the crate `cargo package` makes builds
//! alone (hakmem/tests/package.rs checks what both crates' packages name).
use hakmem_sys::*;

#[test]
fn hak_calls_go_to_hakmem() {
    unsafe {
        let mut before = hak_info_t::default();
        hak_get_info(&mut before);
        let p = hak_malloc(1 << 20);
        assert!(!p.is_null());
        let mut after = hak_info_t::default();
        hak_get_info(&mut after);
        assert!(after.in_use >= before.in_use + (1 << 20));
        assert!(hak_malloc_usable_size(p) >= 1 << 20);
        hak_free(p);
    }
}

/// The .crate file `cargo package` writes holds plain files only (the links c/src and
/// c/include are followed), and builds alone, outside the repository.
#[test]
fn packaged_crate_builds_alone() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let tmp = std::env::temp_dir().join(format!("hakmem-sys-pkg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let cargo = |args: &[&str], cwd: &std::path::Path| {
        let out = std::process::Command::new(env!("CARGO"))
            .args(args)
            .current_dir(cwd)
            .env("CARGO_TARGET_DIR", tmp.join("target"))
            .output()
            .expect("cargo");
        assert!(out.status.success(), "cargo {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    cargo(&["package", "--no-verify", "--allow-dirty"], dir.as_ref());
    let crate_file = tmp.join(format!("target/package/hakmem-sys-{}.crate", env!("CARGO_PKG_VERSION")));
    let out = std::process::Command::new("tar")
        .args(["-tvzf", crate_file.to_str().unwrap()])
        .output()
        .expect("tar");
    let listing = String::from_utf8(out.stdout).unwrap();
    assert!(listing.lines().count() > 20, "{listing}");
    assert!(listing.lines().all(|l| l.starts_with('-')), "not plain files:\n{listing}");
    let st = std::process::Command::new("tar")
        .args(["-xzf", crate_file.to_str().unwrap(), "-C", tmp.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(st.success());
    let unpacked = tmp.join(format!("hakmem-sys-{}", env!("CARGO_PKG_VERSION")));
    // The unpacked crate is not a workspace member of the repository: its own workspace.
    cargo(&["build", "--quiet"], &unpacked);
    std::fs::remove_dir_all(&tmp).unwrap();
}

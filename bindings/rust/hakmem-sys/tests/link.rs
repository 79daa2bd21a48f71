//! The library links and serves hak_ calls; without `override`, malloc stays the C
//! library's, and `cargo package --list` names the C sources inside the crate only.
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

#[test]
fn package_is_self_contained() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let out = std::process::Command::new(env!("CARGO"))
        .args(["package", "--list", "--allow-dirty"])
        .current_dir(dir)
        .output()
        .expect("cargo package --list");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let list = String::from_utf8(out.stdout).unwrap();
    assert!(list.lines().all(|l| !l.starts_with("..") && !l.starts_with('/')), "{list}");
    assert!(list.lines().any(|l| l == "c/include/hakmem.h"), "{list}");
    // every C file of the repository's src/ tree is in the package
    fn walk(d: &std::path::Path, base: &std::path::Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, base, out);
            } else if p.extension().is_some_and(|x| x == "c") {
                out.push(format!("c/src/{}", p.strip_prefix(base).unwrap().display()));
            }
        }
    }
    let src = std::path::Path::new(dir).join("c/src");
    let mut want = Vec::new();
    walk(&src, &src, &mut want);
    assert!(want.len() > 10);
    for w in want {
        assert!(list.lines().any(|l| l == w), "{w} missing from the package");
    }
}

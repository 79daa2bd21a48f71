//! `cargo package --list` of both crates names their own files only: nothing outside
//! their folders, and for hakmem-sys every C file of the library, under c/.
use std::path::{Path, PathBuf};

fn package_list(dir: &Path) -> Vec<String> {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["package", "--list", "--allow-dirty"])
        .current_dir(dir)
        .output()
        .expect("cargo package --list");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let list: Vec<String> = String::from_utf8(out.stdout).unwrap().lines().map(String::from).collect();
    for l in &list {
        assert!(!l.starts_with('/') && !l.split('/').any(|c| c == ".."), "{}: {l}", dir.display());
    }
    list
}

#[test]
fn hakmem_names_only_its_own_files() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let list = package_list(dir);
    assert!(list.iter().any(|l| l == "src/lib.rs"), "{list:?}");
    let root = dir.canonicalize().unwrap();
    // Files cargo makes itself (Cargo.toml.orig, .cargo_vcs_info.json, Cargo.lock) aside,
    // each is a file of the crate's folder, not a link out of it.
    for l in &list {
        let p = dir.join(l);
        if p.exists() {
            let real = p.canonicalize().unwrap();
            assert!(real.starts_with(&root), "{l} is {}", real.display());
        }
    }
}

#[test]
fn hakmem_sys_carries_every_c_file() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../hakmem-sys");
    let list = package_list(&dir);
    assert!(list.iter().any(|l| l == "c/include/hakmem.h"), "{list:?}");
    fn walk(d: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().map_or(false, |x| x == "c" || x == "h") {
                out.push(p);
            }
        }
    }
    let src = dir.join("c/src");
    let mut want = Vec::new();
    walk(&src, &mut want);
    assert!(want.len() > 20);
    for w in want {
        let name = format!("c/src/{}", w.strip_prefix(&src).unwrap().display());
        assert!(list.contains(&name), "{name} missing from the package");
    }
}

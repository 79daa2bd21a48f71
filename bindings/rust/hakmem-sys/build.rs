//! Builds the hakmem C library with the cc crate alone, from c/src (every .c file below
//! it, whatever the folders are) and c/include, with the flags the CMake build uses.
//! Without the `override` feature the files that define the standard names (override.c,
//! new_delete.c) are left out, as in the CMake build's ThreadSanitizer core.

use std::path::{Path, PathBuf};

const OVERRIDE_FILES: [&str; 2] = ["override.c", "new_delete.c"];

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("hakmem-sys: cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("hakmem-sys: directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|x| x == "c" || x == "h") {
            out.push(path);
        }
    }
}

fn main() {
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap()).join("c");
    let src = root.join("src");
    let include = root.join("include");
    let with_override = std::env::var_os("CARGO_FEATURE_OVERRIDE").is_some();
    let secure = std::env::var_os("CARGO_FEATURE_SECURE").is_some();

    let mut files = Vec::new();
    walk(&src, &mut files);
    let mut build = cc::Build::new();
    let mut dirs: Vec<PathBuf> = Vec::new();
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
        let dir = f.parent().unwrap().to_path_buf();
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
        let name = f.file_name().unwrap().to_str().unwrap();
        let is_c = f.extension().is_some_and(|x| x == "c");
        if is_c && (with_override || !OVERRIDE_FILES.contains(&name)) {
            build.file(f);
        }
    }
    assert!(
        files.iter().any(|f| f.ends_with("alloc.c")),
        "hakmem-sys: no C sources under {}",
        src.display()
    );
    println!("cargo:rerun-if-changed={}", include.join("hakmem.h").display());
    println!("cargo:include={}", include.display());

    build
        .include(&include)
        .include(&src) // "api/api.h": the layer headers by folder, as in the CMake build
        .includes(&dirs)
        .define("_GNU_SOURCE", None)
        .define("HAKMEM_DEBUG", "0")
        .define("HAKMEM_VALGRIND", "0")
        .flag("-std=gnu11")
        .opt_level(3) // the allocator is built optimised in a debug Rust build too
        .debug(false)
        .pic(true)
        .warnings(false)
        .flag("-fno-semantic-interposition")
        .flag("-ftls-model=initial-exec")
        .flag("-fvisibility=hidden")
        .flag("-fno-builtin-malloc")
        .flag("-fno-builtin-free")
        .flag("-fno-plt");
    if secure {
        build.define("HAKMEM_SECURE", "1");
    }
    build.compile(if secure { "hakmem_secure" } else { "hakmem" });
    println!("cargo:rustc-link-lib=pthread");
    println!("cargo:rustc-link-lib=dl");
}

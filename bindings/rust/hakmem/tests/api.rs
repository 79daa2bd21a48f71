//! The run-time wrappers: names, options, JSON, the profiler, trim, heaps.
use hakmem::heap::Heap;

#[test]
fn names_and_options() {
    let names: Vec<_> = hakmem::names().collect();
    assert!(names.iter().any(|n| n.name == "total.in_use"));
    let writable: Vec<_> = names.iter().filter(|n| n.writable).map(|n| n.name).collect();
    assert!(writable.contains(&"opt.purge_delay_ms"), "{writable:?}");
    assert_eq!(hakmem::stat("no.such.name"), Err(hakmem::Error(-hakmem::ENOENT)));
    assert_eq!(hakmem::ctl_get("build.secure").unwrap(), cfg!(feature = "secure") as i64);

    let old = hakmem::ctl_get("opt.purge_delay_ms").unwrap();
    hakmem::set_option("opt.purge_delay_ms", -1).unwrap();
    assert_eq!(hakmem::ctl_get("opt.purge_delay_ms").unwrap(), -1);
    hakmem::set_option("opt.purge_delay_ms", 1234).unwrap();
    assert_eq!(hakmem::ctl_get("opt.purge_delay_ms").unwrap(), 1234);
    assert_eq!(hakmem::set_option("opt.purge_delay_ms", -2).unwrap_err().errno(), hakmem::EINVAL);
    assert_eq!(hakmem::set_option("total.in_use", 1).unwrap_err().errno(), hakmem::EPERM);
    hakmem::set_option("opt.purge_delay_ms", old).unwrap();
}

#[test]
fn json_report() {
    let j = hakmem::stats_json();
    assert!(j.starts_with('{') && j.trim_end().ends_with('}'), "{j}");
    assert!(j.contains("\"in_use\""), "{j}");
}

#[test]
fn trim_returns_memory() {
    let v: Vec<Box<[u8; 4096]>> = (0..4096).map(|_| Box::new([1u8; 4096])).collect();
    drop(v);
    hakmem::trim(0);
    assert!(hakmem::info().released > 0);
}

/// Runs the test `name` of this binary alone in a child process, with `env`.
fn run_child(name: &str, env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"]).env("HAK_RS_TEST_CHILD", name);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

// In a child process: the profiler also writes a profile at exit, to HAKMEM_PROF_PREFIX.
#[cfg(not(feature = "secure"))]
#[test]
fn profiler_dump() {
    let dir = std::env::temp_dir().join(format!("hakmem-rs-prof-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = dir.join("p");
    let out = run_child("profiler_child", &[("HAKMEM_PROF_PREFIX", prefix.to_str().unwrap())]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dumped = dir.join("dump.heap");
    let len = std::fs::metadata(&dumped).map(|m| m.len()).unwrap_or(0);
    let at_exit = std::fs::read_dir(&dir).unwrap().count();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(len > 100, "profile of {len} bytes");
    assert!(at_exit >= 2, "no profile at exit");
}

#[cfg(not(feature = "secure"))]
#[test]
fn profiler_child() {
    let Ok(prefix) = std::env::var("HAKMEM_PROF_PREFIX") else { return };
    if std::env::var("HAK_RS_TEST_CHILD").as_deref() != Ok("profiler_child") {
        return;
    }
    let path = std::path::Path::new(&prefix).with_file_name("dump.heap");
    hakmem::prof::start(1).unwrap();
    assert_eq!(hakmem::prof::info().active, 1);
    let keep: Vec<_> = (0..1000).map(|i| unsafe { hakmem::sys::hak_malloc(1000 + i) }).collect();
    assert!(hakmem::prof::info().samples >= 1000);
    hakmem::prof::dump(Some(path.to_str().unwrap())).unwrap();
    hakmem::prof::stop();
    assert_eq!(hakmem::prof::info().active, 0);
    for p in keep {
        unsafe { hakmem::sys::hak_free(p) };
    }
}

#[cfg(feature = "secure")]
#[test]
fn profiler_not_in_hardened_build() {
    assert_eq!(hakmem::prof::start(1).unwrap_err().errno(), 95);
}

#[test]
fn heaps() {
    let h = Heap::new().unwrap();
    let blocks: Vec<*mut u8> = (0..1000).map(|i| h.malloc(16 + i)).collect();
    assert!(blocks.iter().all(|p| !p.is_null()));
    let s = h.stats();
    assert_eq!(s.blocks, 1000);
    let a = h.aligned_alloc(4096, 100);
    assert_eq!(a as usize % 4096, 0);
    unsafe { hakmem::heap::free(a) };
    // Released, not destroyed: the blocks stay valid and can be freed afterwards.
    drop(h);
    for p in blocks {
        unsafe {
            p.write(7);
            hakmem::heap::free(p);
        }
    }
    let h = Heap::new().unwrap();
    let z = h.calloc(100, 100);
    assert!(unsafe { std::slice::from_raw_parts(z, 10_000) }.iter().all(|&b| b == 0));
    unsafe { h.destroy() };
}

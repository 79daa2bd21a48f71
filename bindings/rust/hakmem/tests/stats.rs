//! Which allocator serves a Rust program on the crate, and HAKMEM_STATS=1 there, the same
//! as from C (tests/static/stats_at_exit.sh): the build.* names say the crate's build (the
//! library linked into the program, not the shared one), and a child run with
//! HAKMEM_STATS=1 prints hakmem's report at exit, with its pid and that build line.
use std::process::{Command, Stdio};

#[global_allocator]
static GLOBAL: hakmem::HakMem = hakmem::HakMem;

fn version() -> i64 {
    let part = |s: &str| s.parse::<i64>().unwrap();
    part(env!("CARGO_PKG_VERSION_MAJOR")) * 10000
        + part(env!("CARGO_PKG_VERSION_MINOR")) * 100
        + part(env!("CARGO_PKG_VERSION_PATCH"))
}

fn build_line() -> String {
    format!(
        "  build: hakmem {}, {}, release, {}, static",
        env!("CARGO_PKG_VERSION"),
        if cfg!(feature = "secure") { "hardened" } else { "default" },
        if cfg!(target_env = "musl") { "musl" } else { "glibc" }
    )
}

#[test]
fn build_names() {
    assert_eq!(hakmem::ctl_get("build.version").unwrap(), version());
    assert_eq!(hakmem::ctl_get("build.shared").unwrap(), 0);
    assert_eq!(hakmem::ctl_get("build.musl").unwrap(), cfg!(target_env = "musl") as i64);
    assert_eq!(hakmem::ctl_get("build.secure").unwrap(), cfg!(feature = "secure") as i64);
}

#[test]
fn report_at_exit() {
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "report_child", "--nocapture"])
        .env("HAK_RS_TEST_CHILD", "report")
        .env("HAKMEM_STATS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "status {:?}, stderr {err}", out.status);
    assert!(err.contains(&format!("hakmem stats (pid {pid})\n")), "no report from pid {pid}: {err}");
    assert!(err.contains(&format!("{}\n", build_line())), "no line {:?} in {err}", build_line());
}

#[test]
fn report_child() {
    if std::env::var("HAK_RS_TEST_CHILD").as_deref() != Ok("report") {
        return;
    }
    let words: Vec<String> = (0..10000).map(|i| i.to_string()).collect();
    assert_eq!(words.iter().map(|w| w.len()).sum::<usize>(), 38890);
}

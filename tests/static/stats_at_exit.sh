#!/bin/sh
# stats_at_exit.sh [--build TEXT] [--preload LIB] PROGRAM [ARG...]
# Runs PROGRAM with HAKMEM_STATS=1 (and whatever else the environment holds, LD_PRELOAD
# included): it must exit 0 and print hakmem's report at exit, with its own pid, to
# stderr, whose build line ("  build: hakmem 0.1.0, default, release, glibc, shared
# library") holds TEXT. The same check for every way of getting hakmem: a program linked
# with libhakmem.a, the shared library preloaded (musl's or an installed package's), and
# a Rust program on the crate (bindings/rust/hakmem/tests). --preload LIB: LD_PRELOAD=LIB
# for PROGRAM alone (a musl library cannot be preloaded into this shell or into env).
set -u
build=""
preload=""
if [ "${1:-}" = --build ]; then build=$2; shift 2; fi
if [ "${1:-}" = --preload ]; then preload=$2; shift 2; fi
err=${TMPDIR:-/tmp}/stats_at_exit.$$
trap 'rm -f "$err"' EXIT
if [ -n "$preload" ]; then
  LD_PRELOAD=$preload HAKMEM_STATS=1 "$@" >/dev/null 2>"$err" &
else
  HAKMEM_STATS=1 "$@" >/dev/null 2>"$err" &
fi
pid=$!
wait $pid
rc=$?
if [ $rc != 0 ]; then cat "$err" >&2; echo "FAIL: $1 exited with status $rc"; exit 1; fi
if ! grep -q "^hakmem stats (pid $pid)" "$err"; then
  cat "$err" >&2
  echo "FAIL: no hakmem report at exit from $1 (pid $pid)${preload:+ with LD_PRELOAD=$preload}${LD_PRELOAD:+ with LD_PRELOAD=$LD_PRELOAD}"
  exit 1
fi
line=$(grep "^  build: hakmem " "$err" | head -1)
case $line in
  *"$build"*) ;;
  *) cat "$err" >&2; echo "FAIL: the report's build line is not one of \"$build\": $line"; exit 1 ;;
esac
echo "PASS: $1 printed hakmem's report;$line"

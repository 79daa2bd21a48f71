#!/bin/sh
# Under a small address-space limit (ulimit -v, 64 MiB here) a program that runs on the
# C library's malloc runs with hakmem preloaded too, prints the same, and the stats
# report says that mappings were made short of 64 MiB. A program that fails under the
# limit without hakmem is left out, said so; none left: skipped (77).
# usage: small_address_space.sh LIBHAKMEM [KIB]
lib=$1
kib=${2:-65536}
dir=$(mktemp -d "${TMPDIR:-/tmp}/small_as.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
fail=0 ran=0

# check NAME COMMAND...: the same output and status with and without hakmem
check() {
  name=$1
  shift
  command -v "$1" >/dev/null 2>&1 || { echo "small_address_space: $name: no $1, left out"; return; }
  (ulimit -v "$kib" && exec env -u LD_PRELOAD "$@") >"$dir/want" 2>"$dir/want.err"
  want_rc=$?
  if [ $want_rc != 0 ]; then
    echo "small_address_space: $name fails under ulimit -v $kib without hakmem (rc $want_rc), left out"
    return
  fi
  ran=$((ran + 1))
  (ulimit -v "$kib" && HAKMEM_STATS=1 LD_PRELOAD=$lib exec "$@") >"$dir/got" 2>"$dir/got.err"
  rc=$?
  if [ $rc != 0 ] || ! cmp -s "$dir/want" "$dir/got"; then
    echo "FAIL: $name under ulimit -v $kib with hakmem: rc $rc, output differs:"
    head -c 2000 "$dir/got.err"
    fail=1
  elif ! grep -q '^  address space: .* mapped short of 64 MiB' "$dir/got.err"; then
    echo "FAIL: $name: the stats report does not say that mappings were made short:"
    head -c 3000 "$dir/got.err"
    fail=1
  else
    echo "small_address_space: $name ok ($(grep '^  address space:' "$dir/got.err" | sed 's/^  //'))"
  fi
}

check python python3 -c 'x = [str(i) * 3 for i in range(300000)]; y = bytearray(8 << 20); print(len(x), sum(map(len, x)))'
check ls ls -la /usr/lib /usr/bin
check perl perl -e 'my @a = map { "x" x ($_ % 100) } 1 .. 200000; my %h = map { $_ => 1 } 1 .. 50000; print scalar(@a), " ", scalar(keys %h), "\n"'
check sort sh -c 'seq 1 200000 | sort -r | head -3'

[ $ran = 0 ] && { echo "small_address_space: no program runs under ulimit -v $kib here"; exit 77; }
[ $fail = 0 ] && echo "small_address_space: all $ran programs passed"
exit $fail

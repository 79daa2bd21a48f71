#!/bin/sh
# static_names.sh NM LIBHAKMEM.a LIBHAKMEM.so
# The static archive defines, as global symbols, exactly the names the shared library
# exports (the public API and the standard names): every internal name is local, so a
# program's own globals cannot collide with it (CMakeLists.txt, docs/static.md).
set -eu
nm=$1 archive=$2 shared=$3
tmp=${TMPDIR:-/tmp}/static_names.$$
trap 'rm -f "$tmp".a "$tmp".so' EXIT
"$nm" -g --defined-only "$archive" | awk 'NF == 3 { print $3 }' | sort -u > "$tmp".a
# _init and _fini (musl's crti) and the linker's own symbols (_end, _edata, __bss_start,
# which some linkers, aarch64's among them, export): no name of the library's.
"$nm" -D --defined-only "$shared" |
  awk 'NF == 3 && $3 !~ /^(_init|_fini|_end|_edata|__bss_start)$/ { print $3 }' |
  sort -u > "$tmp".so
n_a=$(wc -l < "$tmp".a) n_so=$(wc -l < "$tmp".so)
echo "libhakmem.a: $n_a global names; libhakmem.so: $n_so exported"
if ! grep -qx malloc "$tmp".a || ! grep -qx hak_malloc "$tmp".a; then
  echo "FAIL: the archive does not define malloc and hak_malloc"; exit 1
fi
if ! cmp -s "$tmp".a "$tmp".so; then
  echo "FAIL: global in the archive, not exported by the shared library (<), or the other way (>):"
  diff "$tmp".a "$tmp".so | grep '^[<>]' | head -50
  exit 1
fi
echo "PASS"

#!/bin/sh
# The installed package, as a user builds against it: `cmake --install` into a scratch
# prefix (not the one configured), then the consumer program built with pkg-config and
# with CMake's find_package(hakmem), each run against the installed libraries.
# usage: install_consumers.sh BUILD_DIR CONSUMER_SOURCE_DIR WORK_DIR
set -eu
build=$1 src=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >"$work/install.log"
libdir=$(dirname "$(find "$prefix" -name 'libhakmem.so' | head -n 1)")
pcdir=$(dirname "$(find "$prefix" -name hakmem.pc | head -n 1)")

run() { # program: must print ok
  out=$(LD_LIBRARY_PATH=$libdir "$@")
  [ "$out" = ok ] || { echo "FAIL: $* printed '$out'"; exit 1; }
  echo "ok: $*"
}

if command -v pkg-config >/dev/null 2>&1; then
  flags=$(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs hakmem)
  echo "pkg-config: $flags"
  ${CC:-cc} "$src/consumer.c" -o "$work/pc_consumer" $flags
  run "$work/pc_consumer"
else
  echo "pkg-config not installed: the .pc file is not checked"
fi

cmake -S "$src" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure.log"
cmake --build "$work/cmake" >"$work/build.log"
run "$work/cmake/consumer"
if [ -x "$work/cmake/consumer_secure" ]; then run "$work/cmake/consumer_secure"; fi

# gdb's commands, installed where gdb auto-loads them for the library: under
# share/gdb/auto-load, the library's path plus -gdb.py (docs/debugging.md).
lib=$(readlink -f "$libdir/libhakmem.so")
autoload=$prefix/share/gdb/auto-load$libdir/$(basename "$lib")-gdb.py
[ -f "$autoload" ] || { echo "FAIL: no gdb script at $autoload"; exit 1; }
if command -v gdb >/dev/null 2>&1; then
  out=$(env -u DEBUGINFOD_URLS gdb -batch -nx -iex "add-auto-load-scripts-directory $prefix/share/gdb/auto-load" \
        -iex "add-auto-load-safe-path $prefix" -ex 'help hakmem heap' "$libdir/libhakmem.so.0" 2>&1)
  case $out in
    *"Live blocks"*) echo "ok: gdb auto-loads $autoload" ;;
    *) echo "FAIL: gdb did not auto-load $autoload:"; echo "$out"; exit 1 ;;
  esac
else
  echo "ok: $autoload (gdb not installed: auto-loading is not checked)"
fi

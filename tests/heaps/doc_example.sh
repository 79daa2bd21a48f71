#!/bin/sh
# docs/heaps.md's example, built and run as the page says: its C block is heaps.c, its
# `$ cc ...` line is run as written (pkg-config answering for this build's library),
# and `./heaps` must print the lines the page shows.
# usage: doc_example.sh SOURCE_DIR LIBRARY WORK_DIR
set -eu
src=$1 lib=$2 work=$3
page=$src/docs/heaps.md
rm -rf "$work"
mkdir -p "$work/bin"
cd "$work"
# The first ```c block, the `$ cc` line, and the lines after `$ ./heaps` up to the fence.
awk '/^```c$/ && !done { on = 1; next } on && /^```$/ { on = 0; done = 1 } on' "$page" >heaps.c
cc_line=$(sed -n 's/^\$ \(cc .*\)$/\1/p' "$page" | head -n 1)
awk '/^\$ \.\/heaps$/ { on = 1; next } on && /^```$/ { exit } on' "$page" >expected
[ -s heaps.c ] && [ -n "$cc_line" ] && [ -s expected ] ||
  { echo "FAIL: $page lacks the example, its cc line or its output"; exit 1; }
libdir=$(dirname "$lib")
cat >bin/pkg-config <<EOF
#!/bin/sh
case "\$*" in
  "--cflags --libs hakmem") echo "-I$src/include -L$libdir -lhakmem" ;;
  "--variable=libdir hakmem") echo "$libdir" ;;
  *) echo "pkg-config: unexpected query: \$*" >&2; exit 1 ;;
esac
EOF
chmod +x bin/pkg-config
echo "build: $cc_line"
PATH=$work/bin:$PATH sh -c "$cc_line"
env -u LD_LIBRARY_PATH -u LD_PRELOAD ./heaps >got
if ! cmp -s expected got; then
  echo "FAIL: ./heaps printed:"; cat got; echo "where $page shows:"; cat expected; exit 1
fi
echo "ok: the example prints what $page shows:"; cat got

#!/usr/bin/env bash
# Checks that the C and C++ sources follow .clang-format. The layout depends on the
# clang-format version, so the check uses the one the tree was formatted with (14,
# Debian 12's); without it, it says so and exits 77 (ctest's "skipped").
#   tools/check_format.sh          list the files that differ, exit 1 if any
#   tools/check_format.sh --fix    reformat them in place
set -euo pipefail
cd "$(dirname "$0")/.."
cf=""
for c in clang-format-14 clang-format; do
  if command -v "$c" >/dev/null 2>&1 && "$c" --version | grep -q 'version 14\.'; then cf="$c"; break; fi
done
if [ -z "$cf" ]; then
  echo "check_format: SKIPPED (clang-format 14 not installed: apt-get install clang-format-14)"
  exit 77
fi
mapfile -t files < <(git ls-files -- 'src/*.c' 'src/*.h' 'include/*.h' 'tests/*.c' 'tests/*.h' \
  'tests/*.cc' 'bench/*.c' 'bench/*.h' 'bench/*.cc' 'bindings/*.c' 'bindings/*.h' 2>/dev/null ||
  find src include tests bench bindings -name '*.[ch]' -o -name '*.cc')
if [ "${1:-}" = "--fix" ]; then
  "$cf" -i "${files[@]}"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! "$cf" "$f" | cmp -s - "$f"; then
    echo "check_format: $f differs from .clang-format (tools/check_format.sh --fix)"
    bad=1
  fi
done
[ "$bad" = 0 ] && echo "check_format: ${#files[@]} files follow .clang-format"
exit "$bad"

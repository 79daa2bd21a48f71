#!/bin/sh
# `make test`: every build's tests, each build tried even when an earlier one fails,
# then one summary of what failed where; non-zero exit if anything did.
# usage: MAKE=make BUILD=build test_all.sh BUILD_NAME...   (release debug ubsan)
# Each NAME is built with `$MAKE NAME` and tested with `$MAKE -o NAME test-NAME` (the
# Makefile's ctest line for it); the failed tests come from ctest's own list.
set -u
make=${MAKE:-make}
build=${BUILD:-build}
summary=""
for b in "$@"; do
  echo "== make test: $b build"
  if ! $make --no-print-directory "$b"; then
    summary="$summary
  $b: the build failed, its tests did not run"
    continue
  fi
  failed_log=$build/$b/Testing/Temporary/LastTestsFailed.log
  rm -f "$failed_log"
  if ! $make --no-print-directory -o "$b" "test-$b"; then
    tests=""
    [ -f "$failed_log" ] && tests=$(sed 's/^[0-9]*://' "$failed_log" | tr '\n' ' ' | sed 's/ $//')
    summary="$summary
  $b: tests failed: ${tests:-(ctest gave no list; see its output above)}"
  fi
done
echo "== make test: summary"
if [ -n "$summary" ]; then
  echo "FAILED:$summary"
  exit 1
fi
echo "every build passed: $*"

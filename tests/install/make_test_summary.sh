#!/bin/sh
# `make test`'s driver (tools/test_all.sh) against a stand-in make whose debug build fails
# and whose release tests fail: every build is still tried, the summary names both
# failures (the release tests by name, from ctest's list), and the exit status is 1;
# with nothing failing it is 0.
# usage: make_test_summary.sh SOURCE_DIR WORK_DIR
set -eu
src=$1 work=$2
rm -rf "$work"
mkdir -p "$work/build/release/Testing/Temporary"
cat >"$work/fake-make" <<EOF
#!/bin/sh
# The last argument is the target; record it, and fail where FAIL_TARGETS says.
for t; do :; done
echo "\$t" >>"$work/targets"
case " \$FAIL_TARGETS " in *" \$t "*) ;; *) exit 0 ;; esac
[ "\$t" = test-release ] && printf '12:api_sweep\n40:stress_x\n' >"$work/build/release/Testing/Temporary/LastTestsFailed.log"
exit 2
EOF
chmod +x "$work/fake-make"
cd "$work"
rc=0
MAKE=$work/fake-make BUILD=build FAIL_TARGETS="debug test-release" \
  sh "$src/tools/test_all.sh" release debug ubsan >out 2>&1 || rc=$?
cat out
fail() { echo "FAIL: $*"; exit 1; }
[ "$rc" = 1 ] || fail "exit status $rc, not 1"
[ "$(tr '\n' ' ' <targets)" = "release test-release debug ubsan test-ubsan " ] ||
  fail "targets run: $(tr '\n' ' ' <targets)"
grep -q "release: tests failed: api_sweep stress_x" out || fail "no release line naming the tests"
grep -q "debug: the build failed" out || fail "no debug line"
grep -q "ubsan" out && ! grep -q "ubsan:" out || fail "ubsan reported as failed"
rm -f targets
rc=0
MAKE=$work/fake-make BUILD=build FAIL_TARGETS="" sh "$src/tools/test_all.sh" release debug >out 2>&1 || rc=$?
[ "$rc" = 0 ] && grep -q "every build passed" out || { cat out; fail "a clean run gave $rc"; }
echo "ok: every build tried, one summary, exit 1 on failure and 0 without"

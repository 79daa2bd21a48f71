#!/bin/sh
# HAKMEM_* values: good ones take effect, unusable ones and unknown names are reported on
# stderr and leave the defaults in force. $1 is options_report (prints the options in force).
prog=$1
fail=0

# run NAME=VALUE... : runs the program with exactly these HAKMEM_* settings, stderr in $out
run() { run_program "$prog" "$@"; }
run_program() { # run_program PROGRAM NAME=VALUE...
  p=$1
  shift
  out=$(env -u HAKMEM_PURGE_DELAY_MS -u HAKMEM_REGION_CACHE -u HAKMEM_THP -u HAKMEM_STATS \
        "$@" "$p" 2>&1) || { echo "FAIL: $* exited with $?"; fail=1; }
}
expect() { # expect TEXT WHAT
  case $out in *"$1"*) ;; *) echo "FAIL: $2: no \"$1\" in:"; echo "$out"; fail=1 ;; esac
}
expect_not() {
  case $out in *"$1"*) echo "FAIL: $2: unexpected \"$1\" in:"; echo "$out"; fail=1 ;; esac
}

run
expect "options: purge_delay_ms=100 region_cache=2 thp=1" "defaults"
expect_not "hakmem: ignoring" "defaults"

run HAKMEM_PURGE_DELAY_MS=0 HAKMEM_REGION_CACHE=5 HAKMEM_THP=on
expect "options: purge_delay_ms=0 region_cache=5 thp=1" "good values"
expect_not "hakmem: ignoring" "good values"

run HAKMEM_THP=Collapse
expect "options: purge_delay_ms=100 region_cache=2 thp=collapse" "collapses only"
expect_not "hakmem: ignoring" "collapses only"

run HAKMEM_PURGE_DELAY_MS=-1 HAKMEM_THP=No
expect "options: purge_delay_ms=-1 region_cache=2 thp=0" "-1 means never"
expect_not "hakmem: ignoring" "negative delay"

run HAKMEM_PURGE_DELAY_MS=10ms HAKMEM_REGION_CACHE=-3 HAKMEM_THP=maybe HAKMEM_STATS=2
expect "hakmem: ignoring HAKMEM_PURGE_DELAY_MS=10ms" "delay with a unit"
expect "hakmem: ignoring HAKMEM_REGION_CACHE=-3" "negative region cache"
expect "hakmem: ignoring HAKMEM_THP=maybe" "THP not a switch value"
expect "hakmem: ignoring HAKMEM_STATS=2" "STATS not a switch value"
expect "options: purge_delay_ms=100 region_cache=2 thp=1" "defaults kept"

run HAKMEM_PURGE_DELAY_MS=99999999999999999999999
expect "hakmem: ignoring HAKMEM_PURGE_DELAY_MS=99999999999999999999999" "out of range"
expect "options: purge_delay_ms=100 " "default kept after out of range"

run HAKMEM_PURGE_DELAY_MS=-5 HAKMEM_REGION_CACHE=2000000 HAKMEM_THP= HAKMEM_STATS=xml
expect "hakmem: ignoring HAKMEM_PURGE_DELAY_MS=-5 (takes -1 or 0 .. 2^31-1)" "delay below -1"
expect "hakmem: ignoring HAKMEM_REGION_CACHE=2000000 (takes 0 .. 2^20)" "region cache above 2^20"
expect "hakmem: ignoring HAKMEM_THP= (empty; takes 1/0" "an empty value"
expect "hakmem: ignoring HAKMEM_STATS=xml (takes 1/0, true/false, yes/no, on/off or json)" "STATS lists json"
expect "options: purge_delay_ms=100 region_cache=2 thp=1" "defaults kept after range errors"

run HAKMEM_PURGE_DELAY=0 HAKMEM_Stats=1 HAKMEM_THP=1
expect "hakmem: ignoring unknown option HAKMEM_PURGE_DELAY (known: HAKMEM_PURGE_DELAY_MS " "misspelt name"
expect "hakmem: ignoring unknown option HAKMEM_Stats (known:" "name in the wrong case"
expect_not "unknown option HAKMEM_THP" "known name next to unknown ones"
expect "options: purge_delay_ms=100 region_cache=2 thp=1" "unknown names change nothing"

# A set-user-ID program ignores HAKMEM_*: a copy of the program owned by another user
# with the set-user-ID bit, started by root, runs in secure mode (AT_SECURE). Needs root
# and a file system that honours the bit; otherwise the case is skipped, said so.
if [ "$(id -u)" = 0 ]; then
  dir=$(mktemp -d "${TMPDIR:-/tmp}/options_env.XXXXXX")
  cp "$prog" "$dir/options_report" && chmod 755 "$dir" &&
    chown 65534 "$dir/options_report" && chmod 4755 "$dir/options_report"
  run_program "$dir/options_report" HAKMEM_PURGE_DELAY_MS=0 HAKMEM_STATS=1 HAKMEM_THP=maybe \
    HAKMEM_PURGE_DELAY=0
  case $out in
    *at_secure=1*)
      expect "options: purge_delay_ms=100 region_cache=2 thp=1" "set-user-ID keeps the defaults"
      expect_not "hakmem: ignoring" "set-user-ID reads no HAKMEM_* value"
      # exactly one report: the malloc_stats call's, none at exit for HAKMEM_STATS=1
      [ "$(printf '%s\n' "$out" | grep -c '^hakmem stats')" = 1 ] ||
        { echo "FAIL: set-user-ID printed a report at exit:"; echo "$out"; fail=1; } ;;
    *) echo "options_env: set-user-ID case skipped (no secure mode here: nosuid mount?)" ;;
  esac
  rm -rf "$dir"
else
  echo "options_env: set-user-ID case skipped (needs root)"
fi

[ $fail = 0 ] && echo "options_env: all cases passed"
exit $fail

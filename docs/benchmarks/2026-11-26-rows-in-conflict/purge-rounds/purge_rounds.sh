#!/bin/bash
# usage: purge_rounds.sh ROUNDS BIN_DIR HAKMEM_LIB MIMALLOC_LIB > raw.txt
# Each round runs bench_memory_behaviour 512 0 300 1 three times, the order rotating:
# hakmem at its default purge delay, hakmem with HAKMEM_PURGE_DELAY_MS=-1, mimalloc.
R=$1; BIN=$2/bench_memory_behaviour; H=$3; MI=$4
run() {
  case $1 in
    default) LD_PRELOAD=$H $BIN 512 0 300 1 ;;
    nopurge) HAKMEM_PURGE_DELAY_MS=-1 LD_PRELOAD=$H $BIN 512 0 300 1 ;;
    mimalloc) LD_PRELOAD=$MI $BIN 512 0 300 1 ;;
  esac | sed "s/^/round=$2 lib=$1 /"
}
for r in $(seq $R); do
  case $((r % 3)) in
    1) order="default nopurge mimalloc" ;;
    2) order="nopurge mimalloc default" ;;
    0) order="mimalloc default nopurge" ;;
  esac
  for l in $order; do run $l $r; done
done

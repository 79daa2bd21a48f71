#!/bin/bash
# usage: fs_rounds.sh ROUNDS BIN_DIR HAKMEM_LIB TCMALLOC_LIB > raw.txt
# Each round runs `bench_false_sharing passive 10000 10000 8 1` with hakmem, tcmalloc and
# glibc, in that order, and prints their ops/s on one line.
R=$1; BIN=$2/bench_false_sharing; H=$3; TC=$4
ops() { grep -o "ops_per_sec=[0-9.e+]*" | cut -d= -f2; }
for r in $(seq $R); do
  a=$(LD_PRELOAD=$H $BIN passive 10000 10000 8 1 | ops)
  b=$(LD_PRELOAD=$TC $BIN passive 10000 10000 8 1 | ops)
  c=$($BIN passive 10000 10000 8 1 | ops)
  echo "$a $b $c"
done

#!/bin/sh
# git_workload.sh — git on a generated repository (the harness's "git").
#
# usage: sh git_workload.sh WORKDIR STREAM HOTFILE
#
# WORKDIR must be empty or absent; STREAM is a `git fast-import` stream that the harness
# generated from a seed (program_inputs.git_fast_import); HOTFILE is the file most of its
# commits change. The script imports the history, checks it out, makes a few commits
# through the porcelain, packs everything with `git repack -a -d`, then reads the history
# back (rev-list, log -p, blame, diff, fsck) and prints checksums and counts of what git
# printed. Nothing depends on the machine: no system or user configuration, fixed
# identities and dates, one pack thread (so the pack is the same byte for byte).
set -eu

work=$1
stream=$2
hot=$3

export HOME="$work" XDG_CONFIG_HOME="$work/.config" GIT_CONFIG_NOSYSTEM=1 LC_ALL=C TZ=UTC
export GIT_AUTHOR_NAME="A U Thor" GIT_AUTHOR_EMAIL=author@example.invalid
export GIT_COMMITTER_NAME="C O Mitter" GIT_COMMITTER_EMAIL=committer@example.invalid
unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES
# Configuration for every git command: no fsync, no automatic gc or maintenance after a
# commit, no commit-graph or multi-pack index (each would start processes of its own, and
# the cachegrind pass pays valgrind's start-up for every process), one pack thread.
export GIT_CONFIG_COUNT=6
export GIT_CONFIG_KEY_0=core.fsync GIT_CONFIG_VALUE_0=none
export GIT_CONFIG_KEY_1=gc.auto GIT_CONFIG_VALUE_1=0
export GIT_CONFIG_KEY_2=maintenance.auto GIT_CONFIG_VALUE_2=false
export GIT_CONFIG_KEY_3=pack.threads GIT_CONFIG_VALUE_3=1
export GIT_CONFIG_KEY_4=core.commitGraph GIT_CONFIG_VALUE_4=false
export GIT_CONFIG_KEY_5=core.multiPackIndex GIT_CONFIG_VALUE_5=false

# "name cksum-of-output": the command's output goes to a file first, so that a git
# command that fails stops the script (set -e) instead of hiding in a pipeline.
sum() {
    name=$1
    shift
    "$@" > "$work/out"
    echo "$name $(cksum < "$work/out")"
}

mkdir -p "$work"
cd "$work"
git init -q -b main repo
cd repo
git fast-import --quiet < "$stream"
git reset -q --hard main

# Two commits through the porcelain, each appending to the hot file.
for i in 1 2; do
    export GIT_AUTHOR_DATE="$((1800000000 + i)) +0000" GIT_COMMITTER_DATE="$((1800000000 + i)) +0000"
    echo "porcelain line $i" >> "$hot"
    git commit -q -a -m "porcelain commit $i"
done

# Everything into one pack (what `git gc` does at its heart, in two processes instead of
# its eight), then the history read back.
git repack -a -d -q
ls .git/objects/pack/*.pack | wc -l | sed 's/^/packs /'
git log --format=%H > "$work/out"
commits=$(wc -l < "$work/out")
echo "commits $commits head $(head -n 1 "$work/out")"
sum objects git rev-list --objects --all
sum log-p git log -p --stat --no-color
sum blame git blame -s "$hot"
sum diff git diff --no-color "HEAD~$((commits / 3))" HEAD
sum log-follow git log --format=%h --follow -- "$hot"
git fsck --no-progress --no-dangling
echo "fsck ok"

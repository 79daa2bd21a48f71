#!/usr/bin/env python3
"""Runs real programs with and without LD_PRELOAD=<libhakmem.so> and requires the same
stdout and exit status from every step.

    run_preload.py --lib PATH CASE [--keep]

Each case prepares its inputs (deterministically, in this interpreter, which is never
preloaded) in a fresh directory for each of the two runs, then runs its steps there with
`sh -c`. Exit status: 0 pass, 1 fail, 77 skip (a program the case needs is missing).
"""

import argparse
import difflib
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
STEP_TIMEOUT = 60  # seconds; a case is meant to take well under 20 s for both runs

# Environment shared by both runs, so that output depends only on the inputs.
STABLE_ENV = {
    "LC_ALL": "C",
    "TZ": "UTC",
    "PYTHONHASHSEED": "0",
    "PERL_HASH_SEED": "0",
    "PERL_PERTURB_KEYS": "0",
}


class Case:
    """What one ctest runs: programs it needs, inputs, steps, files to compare."""

    def __init__(self, programs, steps, prepare=None, env=None, files=()):
        self.programs = programs
        self.steps = steps
        self.prepare = prepare or (lambda workdir: None)
        self.env = env or {}
        self.files = files


def write(path, text):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


# ---- python ---------------------------------------------------------------------------

PYTHON_CHURN = r"""
import hashlib, json, random

rng = random.Random(20240101)
table = {}
recent = []
for i in range(50000):
    key = "key%d" % rng.randrange(90000)
    table[key] = [i, str(i) * (i % 9), {"n": i, "s": key[::-1]}, (i, i * 0.5)]
    recent.append(bytearray(rng.randrange(1, 600)))
    if len(recent) > 40000:
        del recent[:20000]
    if i % 5 == 0:
        table.pop("key%d" % rng.randrange(90000), None)

words = ["".join(chr(97 + rng.randrange(26)) for _ in range(rng.randrange(1, 14)))
         for _ in range(30000)]
words.sort()
text = " ".join(words)
counts = {}
for w in text.split():
    counts[w[:3]] = counts.get(w[:3], 0) + 1

class Node:
    def __init__(self, parent):
        self.parent = parent
        self.children = []
        if parent is not None:
            parent.children.append(self)

roots = []
for r in range(150):
    root = Node(None)
    level = [root]
    for depth in range(6):
        level = [Node(p) for p in level for _ in range(2)]
    roots.append(root)
del roots

digest = hashlib.sha256()
for key in sorted(table):
    digest.update(key.encode())
    digest.update(json.dumps(table[key]).encode())
for prefix in sorted(counts):
    digest.update(b"%s=%d" % (prefix.encode(), counts[prefix]))
print(len(table), len(words), len(counts), sum(len(b) for b in recent))
print(digest.hexdigest())
"""


def python_case():
    py = shlex.quote(sys.executable)
    return Case(
        programs=[sys.executable],
        prepare=lambda d: write(os.path.join(d, "churn.py"), PYTHON_CHURN),
        steps=[
            f"{py} churn.py",
            # Every object through malloc, not only the large ones.
            f"PYTHONMALLOC=malloc {py} churn.py",
        ],
    )


# ---- gcc ------------------------------------------------------------------------------

GCC_PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct item { unsigned key; char name[24]; double weight; };

static unsigned next_random(unsigned *state) {
  *state = *state * 1103515245u + 12345u;
  return *state >> 8;
}

static int by_key(const void *a, const void *b) {
  const struct item *x = a, *y = b;
  return (x->key > y->key) - (x->key < y->key);
}

static struct item *make_items(size_t n, unsigned seed) {
  struct item *items = malloc(n * sizeof *items);
  for (size_t i = 0; i < n; i++) {
    items[i].key = next_random(&seed) % 100000;
    snprintf(items[i].name, sizeof items[i].name, "item-%zu", i);
    items[i].weight = (double)(next_random(&seed) % 1000) / 7.0;
  }
  return items;
}

static char *join_names(const struct item *items, size_t n) {
  size_t cap = 16, len = 0;
  char *out = malloc(cap);
  for (size_t i = 0; i < n; i += 97) {
    size_t add = strlen(items[i].name) + 1;
    while (len + add + 1 > cap) out = realloc(out, cap *= 2);
    memcpy(out + len, items[i].name, add - 1);
    len += add;
    out[len - 1] = ',';
  }
  out[len] = '\0';
  return out;
}

static double total_weight(const struct item *items, size_t n) {
  double sum = 0;
  for (size_t i = 0; i < n; i++) sum += items[i].weight;
  return sum;
}

int main(void) {
  for (unsigned round = 1; round <= 5; round++) {
    size_t n = 20000 * round;
    struct item *items = make_items(n, round);
    qsort(items, n, sizeof *items, by_key);
    char *names = join_names(items, n);
    printf("round %u: first %u last %u weight %.3f names %zu\n", round, items[0].key,
           items[n - 1].key, total_weight(items, n), strlen(names));
    free(names);
    free(items);
  }
  return 0;
}
"""


def gcc_big_source(functions=70):
    """A generated translation unit with enough code to keep cc1 busy for a while."""
    rng = random.Random(7)
    out = ["#include <stddef.h>\n#include <string.h>\n",
           "struct vec { double x, y, z; };\n"]
    for i in range(functions):
        a, b, c = rng.randrange(2, 50), rng.randrange(2, 50), rng.randrange(3, 17)
        out.append(f"""
static inline struct vec mix{i}(struct vec v, double t) {{
  struct vec r = {{ v.x * t + {a}, v.y - t * {b}, v.z + v.x * {c} }};
  return r;
}}
double work{i}(const double *data, size_t n, int mode) {{
  double acc = 0;
  struct vec v = {{ {a}.0, {b}.0, {c}.0 }};
  for (size_t k = 0; k < n; k++) {{
    switch ((mode + (int)k) % {c}) {{
      case 0: acc += data[k] * {a}; break;
      case 1: acc -= data[k] / ({b} + k); break;
      case 2: v = mix{i}(v, data[k]); acc += v.x - v.z; break;
      default: acc = acc * 0.5 + data[(k * {a}) % n];
    }}
  }}
  char buf[64];
  memset(buf, (int)acc & 0x7f, sizeof buf);
  return acc + buf[{c}] + v.y;
}}
""")
    calls = " + ".join(f"work{i}(d, n, m)" for i in range(functions))
    out.append(f"double work_all(const double *d, size_t n, int m) {{ return {calls}; }}\n")
    return "".join(out)


CXX_SOURCE = r"""
#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

template <typename K, typename V>
std::string summarize(const std::map<K, V> &m) {
  std::ostringstream out;
  for (const auto &[k, v] : m) out << k << '=' << v << ';';
  return out.str();
}

std::string run(int n) {
  std::unordered_map<std::string, std::vector<int>> groups;
  for (int i = 0; i < n; i++) groups[std::to_string(i % 97)].push_back(i);
  std::map<std::string, long> sums;
  for (auto &[k, v] : groups) sums[k] = std::accumulate(v.begin(), v.end(), 0L);
  std::vector<std::unique_ptr<std::string>> owned;
  for (auto &[k, v] : sums) owned.push_back(std::make_unique<std::string>(k));
  std::sort(owned.begin(), owned.end(), [](auto &a, auto &b) { return *a < *b; });
  return summarize(sums) + *owned.front();
}
"""


def gcc_prepare(workdir):
    write(os.path.join(workdir, "prog.c"), GCC_PROGRAM)
    write(os.path.join(workdir, "big.c"), gcc_big_source())
    write(os.path.join(workdir, "lib.cc"), CXX_SOURCE)


def gcc_case():
    steps = [
        "gcc -O2 -Wall -o prog prog.c",
        "./prog",
        "gcc -O2 -c big.c -o big.o",
        "gcc -O0 -g0 -S big.c -o - | wc -l",
    ]
    files = ["prog", "big.o"]
    if shutil.which("g++"):
        steps.append("g++ -std=c++17 -O2 -c lib.cc -o lib.o")
        files.append("lib.o")
    return Case(programs=["gcc"], prepare=gcc_prepare, steps=steps, files=files)


# ---- git ------------------------------------------------------------------------------

def git_prepare(workdir):
    """Twenty trees, each the next commit's content."""
    rng = random.Random(11)
    files = {f"src/file{i:02d}.txt": [f"line {j} of file {i}\n" for j in range(40)]
             for i in range(30)}
    for n in range(1, 21):
        for _ in range(8):
            name = rng.choice(sorted(files))
            lines = files[name]
            lines[rng.randrange(len(lines))] = f"edited in commit {n}: {rng.random():.6f}\n"
            lines.insert(rng.randrange(len(lines)), f"added in commit {n}\n")
        files[f"docs/note{n:02d}.md"] = [f"# note {n}\n", "text\n" * (n % 5 + 1)]
        for name, lines in files.items():
            write(os.path.join(workdir, "trees", f"{n:02d}", name), "".join(lines))


def git_case():
    git = "git -c gc.auto=0 -c init.defaultBranch=main -c core.pager=cat"
    return Case(
        programs=["git"],
        prepare=git_prepare,
        env={
            "GIT_AUTHOR_NAME": "Test Author", "GIT_AUTHOR_EMAIL": "author@example.invalid",
            "GIT_AUTHOR_DATE": "2024-01-02T03:04:05 +0000",
            "GIT_COMMITTER_NAME": "Test Committer",
            "GIT_COMMITTER_EMAIL": "committer@example.invalid",
            "GIT_COMMITTER_DATE": "2024-01-02T03:04:05 +0000",
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_TERMINAL_PROMPT": "0",
        },
        steps=[
            f"{git} init -q repo",
            f"cd repo && for n in $(ls ../trees); do cp -R ../trees/$n/. . && "
            f"{git} add -A && {git} commit -q -m \"commit $n\" || exit 1; done",
            f"cd repo && {git} log --stat",
            f"cd repo && {git} diff HEAD~12 HEAD | cksum",
            f"cd repo && {git} blame -s src/file07.txt | cksum",
            f"cd repo && {git} gc -q",
            f"cd repo && {git} count-objects -v | grep -v size",
            f"cd repo && {git} fsck --no-progress --full",
            f"cd repo && {git} log --stat --format='%H %s' | cksum",
            f"cd repo && {git} rev-list --all --objects | sort | cksum",
        ],
    )


# ---- sort -----------------------------------------------------------------------------

def sort_prepare(workdir):
    rng = random.Random(3)
    letters = "abcdefghijklmnopqrstuvwxyz"
    with open(os.path.join(workdir, "data.txt"), "w") as f:
        for i in range(200000):
            word = "".join(rng.choice(letters) for _ in range(rng.randrange(3, 16)))
            f.write(f"{word},{rng.randrange(1000000)},{rng.choice(letters) * 3}{i % 977}\n")


def sort_case():
    return Case(
        programs=["sort", "cksum"],
        prepare=sort_prepare,
        env={"TMPDIR": "."},
        steps=[
            "sort data.txt | cksum",
            "sort -t, -k2,2n -k1,1 data.txt | cksum",
            "sort -u -t, -k3,3 data.txt | cksum",
            "sort -r data.txt | head -20",
            "sort -S 256K --parallel=2 -t, -k1,1 -k2,2n data.txt | cksum",
        ],
    )


# ---- coreutils, awk, sed --------------------------------------------------------------

def coreutils_prepare(workdir):
    rng = random.Random(5)
    methods = ["GET", "POST", "PUT", "DELETE"]
    with open(os.path.join(workdir, "access.log"), "w") as f:
        for i in range(60000):
            f.write(f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(256)} "
                    f"{rng.choice(methods)} /page/{rng.randrange(500)} "
                    f"{rng.choice([200, 200, 200, 301, 404, 500])} {rng.randrange(100000)}\n")


def coreutils_case():
    return Case(
        programs=["ls", "awk", "sed", "cksum", "sort", "uniq", "tr", "cut"],
        prepare=coreutils_prepare,
        steps=[
            "ls -lR /usr/include >/dev/null",
            "ls -lR /usr/include | cksum",
            "awk '{n[$2]++; bytes[$2] += $5} END {for (m in n) print m, n[m], bytes[m]}' "
            "access.log | sort",
            "awk '$4 >= 400 {print $3}' access.log | sort | uniq -c | sort -k1,1nr -k2 | head",
            "sed -E 's/^([0-9]+)\\.([0-9]+)/\\2.\\1/; s/ (GET|PUT) / \\L\\1 /' access.log | cksum",
            "sed -n '/ 500 /p' access.log | cut -d' ' -f1 | tr . - | sort -u | wc -l",
            "cut -d' ' -f3 access.log | sort | uniq -c | sort -rn | head -5",
            "tr a-z A-Z < access.log | cksum",
        ],
    )


# ---- tar ------------------------------------------------------------------------------

def tar_prepare(workdir):
    rng = random.Random(13)
    for i in range(300):
        path = os.path.join(workdir, "tree", f"dir{i % 17}", f"sub{i % 5}", f"file{i}.dat")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            size = rng.choice([0, 10, 1000, 20000, 150000])
            f.write(rng.randbytes(size // 2) + b"compressible " * (size // 26))


def tar_case():
    create = "tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner"
    return Case(
        programs=["tar", "gzip", "cksum"],
        prepare=tar_prepare,
        steps=[
            f"{create} -czf out.tgz tree",
            "tar tzf out.tgz",
            "tar tzvf out.tgz",
            "gzip -dc out.tgz | cksum",
            "mkdir copy && tar xzf out.tgz -C copy && cd copy && find . -type f | sort | "
            "xargs cksum | cksum",
        ],
    )


# ---- perl -----------------------------------------------------------------------------

PERL_HASHES = r"""
my ($seed, %groups, %values) = (1);
sub rnd { $seed = ($seed * 1103515245 + 12345) % 2147483648; return $seed }
for my $i (1 .. 200000) {
  my $key = "k" . (rnd() % 50000);
  push @{$groups{$key}}, $i;
  $values{$i} = "v" x ($i % 29) . $key;
}
delete $values{$_} for grep { $_ % 3 } keys %values;
my $sum = 0;
for my $key (sort keys %groups) {
  $sum = ($sum * 31 + scalar(@{$groups{$key}}) + length $key) % 1000000007;
}
my %nested;
$nested{$_ % 100}{$_ % 7}{$_} = [($_) x ($_ % 5)] for 1 .. 100000;
my $leaves = 0;
for my $a (keys %nested) { for my $b (keys %{$nested{$a}}) { $leaves += keys %{$nested{$a}{$b}} } }
print scalar(keys %groups), " ", scalar(keys %values), " $sum $leaves\n";
"""

PERL_STRINGS = r"""
my @words = map { join "", map { chr(97 + ($_ * 7 + $_[0]) % 26) } 1 .. ($_ % 17 + 1) } 1 .. 100000;
my $text = join " ", @words;
(my $upper = $text) =~ s/([aeiou])/uc $1/ge;
my %count;
$count{$_}++ for split /\s+/, $upper;
my @top = (sort { $count{$b} <=> $count{$a} || $a cmp $b } keys %count)[0 .. 4];
printf "%d %d %s\n", length($upper), scalar(keys %count), join(",", @top);
"""


def perl_case():
    return Case(
        programs=["perl"],
        steps=[f"perl -e {shlex.quote(PERL_HASHES)}", f"perl -e {shlex.quote(PERL_STRINGS)}"],
    )


CASES = {
    "python": python_case,
    "gcc": gcc_case,
    "git": git_case,
    "sort": sort_case,
    "coreutils": coreutils_case,
    "tar": tar_case,
    "perl": perl_case,
}


# ---- running and comparing ------------------------------------------------------------

def run_step(command, cwd, env):
    try:
        return subprocess.run(["sh", "-c", command], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=STEP_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(e.cmd, "timeout", e.stdout or b"", e.stderr or b"")


def run_all(case, workdir, env):
    os.makedirs(workdir)
    case.prepare(workdir)
    results = [run_step(step, workdir, env) for step in case.steps]
    files = {}
    for name in case.files:
        path = os.path.join(workdir, name)
        files[name] = open(path, "rb").read() if os.path.exists(path) else None
    return results, files


def show_diff(what, plain, preloaded):
    a = plain.decode(errors="replace").splitlines()
    b = preloaded.decode(errors="replace").splitlines()
    diff = list(difflib.unified_diff(a, b, "plain", "preloaded", lineterm="", n=1))
    print(f"  {what} differs:")
    for line in diff[:40]:
        print("    " + line)
    if len(diff) > 40:
        print(f"    ... {len(diff) - 40} more diff lines")


def tail(data, lines=15):
    return "\n".join("    " + l for l in data.decode(errors="replace").splitlines()[-lines:])


def compare(case, plain, preloaded, lib):
    ok = True
    for i, step in enumerate(case.steps):
        p, q = plain[0][i], preloaded[0][i]
        short = step if len(step) < 100 else step[:97] + "..."
        problems = []
        if p.returncode != 0:
            problems.append(f"the plain run failed (status {p.returncode}): the test is broken")
        if b"cannot be preloaded" in q.stderr:
            problems.append(f"{lib} was not preloaded")
        if q.returncode != p.returncode:
            problems.append(f"exit status {p.returncode} plain, {q.returncode} preloaded")
        if q.stdout != p.stdout:
            problems.append("stdout differs")
        print(f"step {i + 1}: {short}: {'ok' if not problems else 'FAILED'}")
        if problems:
            ok = False
            for problem in problems:
                print("  " + problem)
            if q.stdout != p.stdout:
                show_diff("stdout", p.stdout, q.stdout)
            print("  plain stderr:\n" + tail(p.stderr))
            print("  preloaded stderr:\n" + tail(q.stderr))
    for name in case.files:
        a, b = plain[1][name], preloaded[1][name]
        if a is None or a != b:
            ok = False
            print(f"file {name}: {'missing' if a is None else 'contents differ'}: FAILED")
        else:
            print(f"file {name}: identical ({len(a)} bytes)")
    return ok


def base_env():
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env.update(STABLE_ENV)
    return env


def missing_programs(case):
    return [p for p in case.programs if shutil.which(p) is None]


def run_case(name, lib, keep):
    case = CASES[name]()
    missing = missing_programs(case)
    if missing:
        print(f"SKIP: {', '.join(missing)} not found")
        return SKIP
    env = base_env()
    env.update(case.env)
    preload_env = dict(env, LD_PRELOAD=lib)
    top = tempfile.mkdtemp(prefix=f"hakmem-preload-{name}-")
    try:
        plain = run_all(case, os.path.join(top, "plain"), env)
        preloaded = run_all(case, os.path.join(top, "preloaded"), preload_env)
        ok = compare(case, plain, preloaded, lib)
    finally:
        if keep:
            print(f"kept {top}")
        else:
            shutil.rmtree(top, ignore_errors=True)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def check_active(lib):
    """The preloaded process must really be using hakmem: HAKMEM_STATS=1 makes it
    print its statistics report on stderr at exit."""
    command = [sys.executable, "-c", "pass"]
    env = dict(base_env(), HAKMEM_STATS="1")
    plain = subprocess.run(command, env=env, capture_output=True, timeout=STEP_TIMEOUT)
    env["LD_PRELOAD"] = lib
    loaded = subprocess.run(command, env=env, capture_output=True, timeout=STEP_TIMEOUT)
    print("preloaded stderr:\n" + tail(loaded.stderr, 40))
    ok = True
    if b"hakmem" in plain.stderr:
        print("FAIL: the run without the library already mentions hakmem")
        ok = False
    if loaded.returncode != 0:
        print(f"FAIL: exit status {loaded.returncode}")
        ok = False
    if b"hakmem" not in loaded.stderr:
        print("FAIL: no statistics report mentioning hakmem on stderr")
        ok = False
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", required=True, help="the library to preload")
    parser.add_argument("--keep", action="store_true", help="keep the work directories")
    parser.add_argument("case", choices=sorted(CASES) + ["is_active"])
    args = parser.parse_args()
    lib = os.path.abspath(args.lib)
    if not os.path.isfile(lib):
        print(f"FAIL: {lib} does not exist")
        return 1
    if args.case == "is_active":
        return check_active(lib)
    return run_case(args.case, lib, args.keep)


if __name__ == "__main__":
    sys.exit(main())

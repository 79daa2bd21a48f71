#!/usr/bin/env python3
"""Where the statistics report at exit (HAKMEM_STATS) lands, whatever the program does
with fd 2 and however many processes share a stream.

usage: stats_report.py STATS_EXIT LIBHAKMEM

  sort          coreutils close stderr before exit: the report still reaches it
  close2        a program closes fd 2 and opens a file of its own there: the report goes
                to the stderr the process started with, not into the program's file
  closed        a program started with fd 2 closed: it runs, and no report lands in the
                file its open() gets as fd 2; HAKMEM_STATS_FILE still gets the report
  launch/forks  N children (exec'd, or forked alone) and their parent, exiting together
                onto one stream: one whole report per process, JSON one line each (JSON
                Lines), text reports one after another, no two mixed, none twice
  own files     HAKMEM_STATS_FILE=DIR/r.%p: one indented JSON file per process, named by
                its pid
"""
import json
import os
import re
import subprocess
import sys
import tempfile

PROG, LIB = sys.argv[1], sys.argv[2]
CHILDREN = 16
failures = []


def check(ok, what, detail=""):
    if not ok:
        failures.append(what)
        print("FAIL: %s%s" % (what, ("\n" + detail) if detail else ""))


def env(**kw):
    e = {k: v for k, v in os.environ.items() if not k.startswith("HAKMEM_")}
    e.update(kw)
    return e


def run(args, stderr, **kw):
    """Runs args with the given HAKMEM_ settings; returns (rc, stdout)."""
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=stderr, env=env(**kw), timeout=120)
    return p.returncode, p.stdout.decode()


def pids_of(stdout):
    return sorted(int(x) for x in re.findall(r"^pid (\d+)$", stdout, re.M))


def json_lines(text, what):
    """Each line of text must be one whole report; returns them parsed."""
    docs = []
    for i, line in enumerate(text.splitlines()):
        try:
            doc = json.loads(line)
        except ValueError as e:
            check(False, "%s: line %d is not one JSON document (%s)" % (what, i + 1, e), line[:300])
            continue
        check(doc.get("schema") == 1, "%s: line %d has no schema" % (what, i + 1))
        docs.append(doc)
    return docs


def text_reports(text, what):
    """Text reports back to back: each from its header to its options line, none cut."""
    blocks = re.split(r"(?m)^(?=hakmem stats \(pid)", text)
    pids = []
    for b in blocks:
        if not b:
            continue
        m = re.match(r"hakmem stats \(pid (\d+)\)\n", b)
        check(m is not None, "%s: text outside a report" % what, b[:300])
        if m is None:
            continue
        pids.append(int(m.group(1)))
        lines = b.splitlines()
        check(lines[-1].startswith("  options: ") and b.count("\n  options: ") == 1,
              "%s: report of pid %s mixed with another or cut" % (what, m.group(1)), b[-600:])
    return sorted(pids)


with tempfile.TemporaryDirectory() as tmp:
    path = lambda name: os.path.join(tmp, name)
    read = lambda name: open(path(name)).read()

    # sort closes stderr before it exits (coreutils' close_stdout)
    for mode in ("1", "json"):
        p = subprocess.run(["sort"], input=b"b\na\n", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env=env(HAKMEM_STATS=mode, LD_PRELOAD=LIB), timeout=60)
        err = p.stderr.decode()
        check(p.returncode == 0 and p.stdout == b"a\nb\n", "sort HAKMEM_STATS=%s: rc %d" % (mode, p.returncode))
        if mode == "1":
            check(len(text_reports(err, "sort")) == 1, "sort HAKMEM_STATS=1: no report", err)
        else:
            check(len(json_lines(err, "sort json")) == 1, "sort HAKMEM_STATS=json: not one line", err)

    # fd 2 closed by the program, and a file of its own opened there
    with open(path("close2.err"), "w") as err:
        rc, _ = run([PROG, "close2", path("mine")], err, HAKMEM_STATS="1")
    check(rc == 0, "close2: rc %d" % rc)
    check(read("mine") == "mine\n", "close2: the report went into the program's file", read("mine")[:300])
    check(len(text_reports(read("close2.err"), "close2")) == 1, "close2: no report on stderr", read("close2.err"))

    # started with fd 2 closed: no crash, nothing written into the file that takes fd 2
    for mode in ("1", "json"):
        rc, _ = run(["sh", "-c", 'exec "$0" close2 "$1" 2>&-', PROG, path("mine")], None, HAKMEM_STATS=mode)
        check(rc == 0, "closed from the start, HAKMEM_STATS=%s: rc %d" % (mode, rc))
        check(read("mine") == "mine\n", "closed from the start, HAKMEM_STATS=%s: report in the program's file" % mode,
              read("mine")[:300])
    rc, _ = run(["sh", "-c", 'exec "$0" plain 2>&-', PROG], None, HAKMEM_STATS="1", HAKMEM_STATS_FILE=path("r.txt"))
    check(rc == 0 and len(text_reports(read("r.txt"), "closed, to a file")) == 1,
          "closed from the start: HAKMEM_STATS_FILE got no report (rc %d)" % rc)

    # a launcher: children exec'd or forked alone, all exiting at once onto one file
    for mode in ("launch", "forks"):
        with open(path(mode + ".err"), "w") as err:
            rc, out = run([PROG, mode, str(CHILDREN)], err, HAKMEM_STATS="json")
        check(rc == 0 and len(pids_of(out)) == CHILDREN + 1, "%s json: rc %d, %d pids" % (mode, rc, len(pids_of(out))))
        docs = json_lines(read(mode + ".err"), mode + " json")
        check(len(docs) == CHILDREN + 1, "%s json: %d reports for %d processes" % (mode, len(docs), CHILDREN + 1))

        # text reports appended to one shared file: one each, whole
        rc, out = run([PROG, mode, str(CHILDREN)], None, HAKMEM_STATS="1", HAKMEM_STATS_FILE=path(mode + ".txt"))
        got = text_reports(read(mode + ".txt"), mode + " text")
        check(rc == 0 and got == pids_of(out), "%s text: report pids %s, process pids %s" % (mode, got, pids_of(out)))

    # a file of its own per process
    os.mkdir(path("own"))
    rc, out = run([PROG, "launch", str(CHILDREN)], None, HAKMEM_STATS="json",
                  HAKMEM_STATS_FILE=path("own/r.%p"))
    names = sorted(os.listdir(path("own")))
    check(rc == 0 and names == sorted("r.%d" % p for p in pids_of(out)),
          "own files: %s for pids %s" % (names, pids_of(out)))
    for n in names:
        text = open(os.path.join(path("own"), n)).read()
        try:
            ok = json.loads(text).get("schema") == 1 and text.count("\n") > 10
        except ValueError:
            ok = False
        check(ok, "own files: %s is not one indented report" % n, text[:300])

if failures:
    print("stats_report: %d failed" % len(failures))
    sys.exit(1)
print("stats_report: all cases passed")

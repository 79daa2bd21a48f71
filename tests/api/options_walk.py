#!/usr/bin/env python3
"""Every row of the options table in src/base/options.c, walked through its values: read
from the table itself, so that a new option is covered the day it is added.

usage: options_walk.py OPTIONS_REPORT SOURCE_DIR BUILD_TYPE

For each row (name, what it takes, kind, -1 allowed, min, max, field):
  number   min, max (the boundaries) and -1 where allowed are taken and shown in the
           options line as field=value; min-1 (or -2), max+1, a value past long,
           "5x", "x", "0x10" and the empty value are each refused with
           "hakmem: ignoring NAME=VALUE (takes TAKES)" ("(empty; takes" for the empty
           one), and the field keeps its default
  switch   1/0, true/false, yes/no, on/off in two cases are taken; "maybe", "2" and the
           empty value are refused the same way (HAKMEM_STATS also takes json;
           HAKMEM_BACKGROUND also test-fail and HAKMEM_THP test-no-collapse, test hooks left out)
  text     a sample value (TEXT_SAMPLES below: a new text option must add one) is taken;
           the empty value is refused
And where a ctl name's description says what its option takes (src/stats/ctl_names.c: "HAKMEM_X
in force ...; takes ..."), the table's text is the same.
The options line is options_report's malloc_stats() report ("options: field=value ...").
"""
import os
import re
import subprocess
import sys
import tempfile

PROG, SRC, BUILD_TYPE = sys.argv[1], sys.argv[2], sys.argv[3]
DEBUG = BUILD_TYPE.lower() == "debug"

# A value each text option takes; %s is a fresh temporary directory.
TEXT_SAMPLES = {
    "HAKMEM_STATS_FILE": "%s/stats.txt",
    "HAKMEM_PROF_PREFIX": "%s/prof",
    "HAKMEM_FAULT": "wait,munmap:3+100",  # armed only once the program sets debug.faults
}
SWITCH_ON = ["1", "true", "yes", "on", "TRUE", "On"]
SWITCH_OFF = ["0", "false", "no", "off", "FALSE", "Off"]

failures = []


def fail(msg, out=""):
    failures.append(msg)
    print("FAIL: " + msg + ("\n" + out if out else ""))


def read_table():
    text = open(os.path.join(SRC, "src/base/options.c")).read()
    macros = dict(re.findall(r'^#define (\w+) ("[^"\n]*")$', text, re.M))
    body = re.search(r"static const option_t options\[\] = \{\n(.*?)\n\};", text, re.S)
    if body is None:
        sys.exit("options_walk: no options table in src/base/options.c")
    row = re.compile(r'\{("HAKMEM_\w+"), ("[^"]*"|\w+), (K_\w+), (true|false), ([^,]+), ([^,]+), &([\w.]+)\},')
    rows = []
    for line in body.group(1).splitlines():
        line = line.strip()
        if not line.startswith('{"HAKMEM_'):
            continue
        m = row.fullmatch(line)
        if m is None:
            sys.exit("options_walk: cannot read the row %r: update the pattern here" % line)
        name, takes, kind, minus_one, lo, hi, to = m.groups()
        value = lambda e: int(eval(re.sub(r"(\d)L\b", r"\1", e.replace("INT32_MAX", str(2**31 - 1)))))
        rows.append(dict(name=name.strip('"'), takes=macros.get(takes, takes).strip('"'), kind=kind,
                         minus_one=minus_one == "true", min=value(lo), max=value(hi),
                         field=to.split(".")[-1] if to.startswith("opt.") else None))
    if len(rows) < 10:
        sys.exit("options_walk: only %d rows read from the table" % len(rows))
    return rows


def run(tmp, setting):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKMEM_")}
    name, value = setting.split("=", 1) if setting else (None, None)
    if name:
        env[name] = value
    p = subprocess.run([PROG], env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    out = p.stdout.decode(errors="replace")
    if p.returncode != 0:
        fail("%s: exit status %d" % (setting, p.returncode), out)
    m = re.search(r"^  options: (.*)$", out, re.M)
    fields = dict(kv.split("=", 1) for kv in m.group(1).split()) if m else {}
    if not m:
        fail("%s: no options line" % setting, out)
    return out, fields


def expect_taken(tmp, o, value, shown=None):
    setting = "%s=%s" % (o["name"], value)
    out, fields = run(tmp, setting)
    if "hakmem: ignoring" in out:
        fail(setting + ": refused", out)
    if o["field"] and shown is not None and fields.get(o["field"]) != shown:
        fail("%s: the options line shows %s=%s, not %s" % (setting, o["field"], fields.get(o["field"]), shown), out)


def expect_refused(tmp, o, value, defaults):
    setting = "%s=%s" % (o["name"], value)
    out, fields = run(tmp, setting)
    want = "hakmem: ignoring %s (%stakes %s); the default stays" % (setting, "" if value else "empty; ", o["takes"])
    if want not in out:
        fail("%s: no \"%s\"" % (setting, want), out)
    if o["field"] and fields.get(o["field"]) != defaults.get(o["field"]):
        fail("%s: %s=%s, the default is %s" % (setting, o["field"], fields.get(o["field"]),
                                              defaults.get(o["field"])), out)


def walk(tmp, o, defaults):
    kind = o["kind"]
    if kind == "K_NUMBER":
        good = [o["min"], o["max"]] + ([-1] if o["minus_one"] else [])
        for v in good:
            expect_taken(tmp, o, str(v), str(v))
        below = o["min"] - 1 if not (o["minus_one"] and o["min"] - 1 == -1) else -2
        for v in [str(below), str(o["max"] + 1), "99999999999999999999999", "5x", "x", "0x10", ""]:
            expect_refused(tmp, o, v, defaults)
    elif kind == "K_BYTES":  # 0 or 1 MiB .. 2^50, with K/M/G/T (binary, either case)
        for v, shown in [("0", 0), ("1M", 1 << 20), ("1048576", 1 << 20), ("3g", 3 << 30),
                         ("1024T", 1 << 50), ("%dK" % (1 << 10), 1 << 20)]:
            expect_taken(tmp, o, v, str(shown))
        for v in ["1048575", "512K", "1025T", "-1", "1.5G", "1MB", "5x", "x", "", " 1G",
                  "99999999999999999999999"]:
            expect_refused(tmp, o, v, defaults)
    elif kind in ("K_SWITCH", "K_STATS", "K_BACKGROUND", "K_THP"):
        for v in SWITCH_ON:
            expect_taken(tmp, o, v, "1")
        for v in SWITCH_OFF:
            # HAKMEM_PROF_LEAKS=0 leaves prof as it is; STATS=0 still prints malloc_stats
            expect_taken(tmp, o, v, "0")
        if kind == "K_STATS":
            expect_taken(tmp, o, "json", "json")
        if kind == "K_THP":
            expect_taken(tmp, o, "collapse", "collapse")
        for v in ["maybe", "2", ""]:
            expect_refused(tmp, o, v, defaults)
    elif kind == "K_TEXT":
        if o["name"] not in TEXT_SAMPLES:
            fail("%s: no sample value in TEXT_SAMPLES (options_walk.py)" % o["name"])
            return
        sample = TEXT_SAMPLES[o["name"]].replace("%s", tmp)
        if o["name"] == "HAKMEM_FAULT" and not DEBUG:  # a release build injects no failures
            out, _ = run(tmp, "HAKMEM_FAULT=" + sample)
            if "hakmem: ignoring HAKMEM_FAULT=%s (takes a Debug build" % sample not in out:
                fail("HAKMEM_FAULT in a release build: not reported as ignored", out)
        else:
            expect_taken(tmp, o, sample, sample if o["field"] else None)
        expect_refused(tmp, o, "", defaults)
    else:
        fail("%s: kind %s unknown to options_walk.py" % (o["name"], kind))


def check_ctl_docs(rows):
    """Where a ctl name documents what its option takes, the table says the same."""
    ctl = open(os.path.join(SRC, "src/stats/ctl_names.c")).read()
    documented = dict(re.findall(r'"(HAKMEM_\w+) in force[^"]*?; takes ([^"]*)"', ctl))
    if not documented:
        fail("no \"HAKMEM_X in force ...; takes ...\" description read from src/stats/ctl_names.c")
    by_name = {o["name"]: o for o in rows}
    for name, takes in documented.items():
        if name not in by_name or by_name[name]["takes"] != takes:
            fail("%s: ctl_names.c says it takes %r, the options table %r" %
                 (name, takes, by_name.get(name, {}).get("takes")))


rows = read_table()
check_ctl_docs(rows)
with tempfile.TemporaryDirectory() as tmp:
    out, defaults = run(tmp, None)
    if "hakmem: ignoring" in out:
        fail("no options: something reported", out)
    for o in rows:
        if o["field"] and o["field"] not in defaults:
            fail("%s: its field %s is not in the options line" % (o["name"], o["field"]))
        walk(tmp, o, defaults)

if failures:
    print("options_walk: %d failed" % len(failures))
    sys.exit(1)
print("options_walk: %d options walked" % len(rows))

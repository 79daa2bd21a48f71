#!/usr/bin/env python3
"""Checks what src/prof_proto.c writes, through tests/prof/prof_writer.c.

  format   the profile is gzip (Python's gzip, and `gzip -t`), and decodes (with the small
           protobuf decoder below, no protobuf package) to the Profile the samples make:
           string table, sample and period types, every sample's values and stack, the
           mappings (the test program first, with its file's build ID), and each frame's
           address inside the function it was taken in (from the program's ELF symbols)
  many     20,000 random samples come back exactly
  gzip     prof_gzip_write round-trips edge cases and compresses repetition
  pprof    the real pprof names alloc_big with 4x alloc_small's in-use bytes and counts
           allocations exactly; skipped (77) when pprof is not installed
  symbols  the writer's object file calls nothing that may allocate (only a short list
           of system calls and string functions)
"""
import argparse
import gzip
import os
import random
import shutil
import struct
import subprocess
import sys

SKIP = 77

SAMPLE_TYPES = [("alloc_objects", "count"), ("alloc_space", "bytes"),
                ("inuse_objects", "count"), ("inuse_space", "bytes")]
PERIOD = 524288
TIME_NS = 1700000000123456789
DURATION_NS = 2500000000
# prof_writer.c's run_workload: function -> (allocations, bytes in use)
EXPECTED = {"alloc_small": (8, 4096), "alloc_big": (4, 16384), "ends_in_call": (1, 512)}
TOTAL_INUSE = sum(v[1] for v in EXPECTED.values())

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)
    return cond


def finish(what):
    if failures:
        print(f"{what}: {len(failures)} failure(s)")
        sys.exit(1)
    print(f"{what}: ok")
    sys.exit(0)


# ---- running the writer ----------------------------------------------------------

def run_writer(args, *argv):
    cmd = (args.emulator.split(",") if args.emulator else []) + [args.writer] + list(argv)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sys.stdout.write(r.stdout)
    sys.stdout.write(r.stderr)
    if r.returncode != 0:
        print(f"FAIL: {' '.join(cmd)} exited with {r.returncode}")
        sys.exit(1)


# ---- protobuf, just enough ---------------------------------------------------------

def varint(buf, i):
    shift = value = 0
    while True:
        if i >= len(buf):
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def fields(buf):
    """(field number, wire type, value) of each field of one message, in order."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ValueError("field number 0")
        if wire == 0:
            value, i = varint(buf, i)
        elif wire == 2:
            n, i = varint(buf, i)
            if i + n > len(buf):
                raise ValueError("length-delimited field past the end")
            value, i = bytes(buf[i:i + n]), i + n
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        yield number, wire, value


def signed(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def repeated_ints(wire, value):
    """A repeated integer field's entries, packed or not."""
    if wire == 0:
        return [value]
    out, i = [], 0
    while i < len(value):
        v, i = varint(value, i)
        out.append(v)
    return out


def message(buf, ints=(), repeated=()):
    """A message's integer fields as a dict; repeated ones as lists."""
    d = {n: [] for n in repeated}
    for number, wire, value in fields(buf):
        if number in repeated:
            d[number] += repeated_ints(wire, value)
        elif number in ints:
            if wire != 0:
                raise ValueError(f"field {number}: wire type {wire}")
            d[number] = value
    return d


def decode_profile(data):
    p = {"sample_type": [], "sample": [], "mapping": [], "location": [], "strings": [],
         "scalars": {}, "period_type": None}
    for number, wire, value in fields(data):
        if number == 1:
            m = message(value, ints=(1, 2))
            p["sample_type"].append((m.get(1, 0), m.get(2, 0)))
        elif number == 2:
            m = message(value, repeated=(1, 2))
            p["sample"].append((m[1], [signed(v) for v in m[2]]))
        elif number == 3:
            m = message(value, ints=range(1, 11))
            p["mapping"].append({"id": m.get(1, 0), "start": m.get(2, 0), "limit": m.get(3, 0),
                                 "offset": m.get(4, 0), "filename": m.get(5, 0),
                                 "build_id": m.get(6, 0), "has_functions": m.get(7, 0)})
        elif number == 4:
            m = message(value, ints=(1, 2, 3))
            p["location"].append({"id": m.get(1, 0), "mapping_id": m.get(2, 0),
                                  "address": m.get(3, 0)})
        elif number == 6:
            p["strings"].append(value.decode("utf-8"))
        elif number == 11:
            m = message(value, ints=(1, 2))
            p["period_type"] = (m.get(1, 0), m.get(2, 0))
        elif wire == 0:
            p["scalars"][number] = value
        else:
            raise ValueError(f"unexpected Profile field {number}")
    return p


def read_profile(path):
    raw = open(path, "rb").read()
    check(raw[:3] == b"\x1f\x8b\x08", f"{path}: gzip header {raw[:3]!r}")
    gz = shutil.which("gzip")
    if gz:
        r = subprocess.run([gz, "-t", path], stderr=subprocess.PIPE, text=True)
        check(r.returncode == 0, f"gzip -t {path}: {r.stderr.strip()}")
    data = gzip.decompress(raw)
    print(f"{path}: {len(raw)} bytes, {len(data)} decompressed")
    return decode_profile(data)


def read_expect(path):
    out = []
    for line in open(path):
        parts = line.split()
        out.append(([int(v) for v in parts[:4]], [int(a, 16) for a in parts[4:]]))
    return out


def check_common(p):
    s = p["strings"]
    check(s and s[0] == "", f"string_table[0] is {s[:1]!r}, not ''")
    check(len(set(s)) == len(s), "string_table has duplicates")
    name = lambda i: s[i] if 0 <= i < len(s) else f"<bad index {i}>"
    types = [(name(t), name(u)) for t, u in p["sample_type"]]
    check(types == SAMPLE_TYPES, f"sample types {types}")
    pt = p["period_type"]
    check(pt is not None and (name(pt[0]), name(pt[1])) == ("space", "bytes"),
          f"period type {pt}")
    check(name(p["scalars"].get(14, 0)) == "inuse_space",
          f"default sample type {p['scalars'].get(14)}")
    ids = [l["id"] for l in p["location"]]
    check(ids == list(range(1, len(ids) + 1)), "location ids are not 1..n in order")
    mids = [m["id"] for m in p["mapping"]]
    check(mids == list(range(1, len(mids) + 1)), f"mapping ids {mids}")
    for m in p["mapping"]:
        check(m["start"] < m["limit"], f"mapping {m}: empty")
        check(not m["has_functions"], f"mapping {m}: has_functions")
    by_id = {m["id"]: m for m in p["mapping"]}
    for l in p["location"]:
        m = by_id.get(l["mapping_id"])
        if l["mapping_id"]:
            check(m is not None and m["start"] <= l["address"] < m["limit"],
                  f"location {l} outside its mapping {m}")


def check_samples(p, expect):
    locs = {l["id"]: l["address"] for l in p["location"]}
    check(len(p["sample"]) == len(expect),
          f"{len(p['sample'])} samples, expected {len(expect)}")
    bad = 0
    for i, ((ids, values), (want_values, want_stack)) in enumerate(zip(p["sample"], expect)):
        # Each location's address is the return address - 1.
        stack = [locs.get(x, -2) + 1 for x in ids]
        want = [a for a in want_stack if a]
        if values != want_values or stack != want:
            bad += 1
            if bad <= 5:
                check(False, f"sample {i}: values {values} stack {[hex(a) for a in stack]}; "
                      f"expected {want_values} {[hex(a) for a in want]}")
    check(bad == 0, f"{bad} samples differ")
    distinct = {a for _, st in expect for a in st if a}
    check(len(p["location"]) == len(distinct),
          f"{len(p['location'])} locations for {len(distinct)} distinct addresses")


# ---- ELF, just enough: build ID, program headers, function symbols (64-bit LE) ------

class Elf:
    def __init__(self, path):
        self.data = d = open(path, "rb").read()
        if d[:4] != b"\x7fELF" or d[4] != 2 or d[5] != 1:
            raise ValueError(f"{path}: not a 64-bit little-endian ELF file")
        (self.phoff, self.shoff) = struct.unpack_from("<QQ", d, 0x20)
        (self.phentsize, self.phnum, self.shentsize, self.shnum) = struct.unpack_from(
            "<HHHH", d, 0x36)

    def segments(self):
        for i in range(self.phnum):
            yield struct.unpack_from("<IIQQQQQQ", self.data, self.phoff + i * self.phentsize)

    def build_id(self):
        for ptype, _, off, _, _, filesz, _, align in self.segments():
            if ptype != 4:  # PT_NOTE
                continue
            a = 8 if align == 8 else 4
            pos, end = off, off + filesz
            while pos + 12 <= end:
                namesz, descsz, ntype = struct.unpack_from("<III", self.data, pos)
                name_at = pos + 12
                desc_at = name_at + (namesz + a - 1) // a * a
                if ntype == 3 and self.data[name_at:name_at + namesz] == b"GNU\0":
                    return self.data[desc_at:desc_at + descsz].hex()
                pos = desc_at + (descsz + a - 1) // a * a
        return ""

    def vaddr_of_offset(self, file_offset):
        for ptype, _, off, vaddr, _, filesz, _, _ in self.segments():
            if ptype == 1 and off <= file_offset < off + filesz:
                return vaddr + file_offset - off
        return None

    def functions(self):
        """name -> (value, size) of every function symbol in .symtab."""
        d, out = self.data, {}
        sections = [struct.unpack_from("<IIQQQQIIQQ", d, self.shoff + i * self.shentsize)
                    for i in range(self.shnum)]
        for sh in sections:
            if sh[1] != 2:  # SHT_SYMTAB
                continue
            strtab = sections[sh[6]]
            for k in range(sh[5] // 24):
                st_name, st_info, _, _, st_value, st_size = struct.unpack_from(
                    "<IBBHQQ", d, sh[4] + k * 24)
                if st_info & 0xF == 2:  # STT_FUNC
                    s = strtab[4] + st_name
                    out[d[s:d.index(b"\0", s)].decode()] = (st_value, st_size)
        return out


def check_frames(p, args):
    """Each sample's frames lie in alloc_* or ends_in_call, run_workload, mode_write."""
    exe = os.path.realpath(args.writer)
    s = p["strings"]
    if not check(p["mapping"], "no mappings"):
        return
    first = p["mapping"][0]
    check(s[first["filename"]] == exe, f"mapping 1 is {s[first['filename']]}, not {exe}")
    elf = Elf(exe)
    want_id = elf.build_id()
    mine = [m for m in p["mapping"] if s[m["filename"]] == exe]
    for m in mine:
        if want_id:
            check(s[m["build_id"]] == want_id,
                  f"build ID {s[m['build_id']]!r}, the file has {want_id!r}")
    if not want_id:
        print("note: the test program has no GNU build ID; not compared")
    funcs = elf.functions()
    locs = {l["id"]: l for l in p["location"]}
    by_id = {m["id"]: m for m in mine}

    def function_at(addr):
        m = next((m for m in mine if m["start"] <= addr < m["limit"]), None)
        if m is None:
            return None
        v = elf.vaddr_of_offset(addr - m["start"] + m["offset"])
        return next((n for n, (start, size) in funcs.items() if start <= v < start + size), None)

    leaves = {}
    for ids, values in p["sample"]:
        names = [function_at(locs[x]["address"]) for x in ids]
        check(names[1:] == ["run_workload", "mode_write"] and names[0] in EXPECTED,
              f"sample {values}: frames in {names}")
        check(all(locs[x]["mapping_id"] in by_id for x in ids), f"sample {values}: mapping ids")
        leaves.setdefault(names[0], [0, 0])
        leaves[names[0]][0] += values[0]
        leaves[names[0]][1] += values[3]
    check(leaves == {k: list(v) for k, v in EXPECTED.items()},
          f"per function (allocations, bytes in use): {leaves}")
    # The reason for the - 1: ends_in_call's return address is past its end.
    for ids, _ in p["sample"]:
        if function_at(locs[ids[0]]["address"]) == "ends_in_call":
            ra = locs[ids[0]]["address"] + 1
            print(f"ends_in_call: return address {ra:#x} lies in "
                  f"{function_at(ra) or 'no function'}; address - 1 in ends_in_call")
            break


# ---- the checks ----------------------------------------------------------------------

def cmd_format(args):
    prof, expect = os.path.join(args.dir, "format.pb.gz"), os.path.join(args.dir, "format.expect")
    run_writer(args, "write", prof, expect)
    p = read_profile(prof)
    check_common(p)
    check(p["scalars"].get(12) == PERIOD, f"period {p['scalars'].get(12)}")
    check(p["scalars"].get(9) == TIME_NS, f"time_nanos {p['scalars'].get(9)}")
    check(p["scalars"].get(10) == DURATION_NS, f"duration_nanos {p['scalars'].get(10)}")
    check_samples(p, read_expect(expect))
    check_frames(p, args)
    finish("format")


def cmd_many(args):
    prof, expect = os.path.join(args.dir, "many.pb.gz"), os.path.join(args.dir, "many.expect")
    run_writer(args, "many", prof, expect, "12345")
    p = read_profile(prof)
    check_common(p)
    check_samples(p, read_expect(expect))
    finish("many")


def cmd_gzip(args):
    rnd = random.Random(7)
    block = bytes(rnd.getrandbits(8) for _ in range(32768))
    cases = {
        "empty": b"",
        "one": b"x",
        "two": b"xy",
        "three": b"abc",
        "zeros": bytes(300000),
        "random": bytes(rnd.getrandbits(8) for _ in range(100000)),
        "window": block * 3,  # matches exactly 32768 back
        "beyond_window": bytes(rnd.getrandbits(8) for _ in range(40000)) * 2,
        "short_period": b"abcdefg" * 5000 + b"abcdefh" * 5000,
        "all_lengths": b"".join(bytes([i % 251]) * i for i in range(1, 600)),
        "text": " ".join(f"word{rnd.randrange(500)}" for _ in range(30000)).encode(),
        # stored and Huffman blocks in turn, matches reaching back into stored ones
        "mixed": (block[:20000] + bytes(20000)) * 3 + block[:30000],
    }
    gz = shutil.which("gzip")
    for name, data in cases.items():
        src, out = os.path.join(args.dir, f"gz_{name}.in"), os.path.join(args.dir, f"gz_{name}.gz")
        with open(src, "wb") as f:
            f.write(data)
        run_writer(args, "gzip", src, out)
        raw = open(out, "rb").read()
        try:
            back = gzip.decompress(raw)
        except Exception as e:  # noqa: BLE001 - any decoding error is the failure
            check(False, f"{name}: gzip.decompress: {e}")
            continue
        check(back == data, f"{name}: round trip differs ({len(back)} bytes for {len(data)})")
        if gz:
            r = subprocess.run([gz, "-t", out], stderr=subprocess.PIPE, text=True)
            check(r.returncode == 0, f"{name}: gzip -t: {r.stderr.strip()}")
        print(f"{name}: {len(data)} -> {len(raw)} bytes")
        if name == "zeros":
            check(len(raw) < 3000, f"zeros: {len(raw)} bytes: no matches found?")
        if name in ("random", "beyond_window"):  # stored blocks: 5 bytes each, at most
            check(len(raw) <= len(data) + 5 * (len(data) // 32768 + 1) + 18,
                  f"{name}: {len(raw)} bytes for {len(data)} incompressible ones")
        if name == "window":
            check(len(raw) < 32768 * 1.2 + 2000, f"window: {len(raw)} bytes")
    finish("gzip")


def find_pprof():
    candidates = [os.environ.get("PPROF"), shutil.which("pprof")]
    go = shutil.which("go")
    if go is None and os.path.exists("/usr/local/go/bin/go"):
        go = "/usr/local/go/bin/go"
    gopath = os.environ.get("GOPATH")
    if not gopath and go:
        r = subprocess.run([go, "env", "GOPATH"], stdout=subprocess.PIPE, text=True)
        gopath = r.stdout.strip()
    for g in filter(None, [gopath, os.path.expanduser("~/go")]):
        candidates.append(os.path.join(g.split(os.pathsep)[0], "bin", "pprof"))
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def pprof_top(pprof, prof, index, env):
    unit = "-unit=B" if "space" in index else "-unit=count"
    cmd = [pprof, "-top", f"-sample_index={index}", unit, "-nodecount=1000", prof]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    print("$", " ".join(cmd))
    print(r.stdout, end="")
    if r.stderr.strip():
        print(r.stderr, end="")
    if not check(r.returncode == 0, f"pprof exited with {r.returncode}"):
        return {}
    rows, in_table = {}, False
    for line in r.stdout.splitlines():
        cols = line.split()
        if cols[:2] == ["flat", "flat%"]:
            in_table = True
            continue
        if in_table and len(cols) >= 6:
            num = lambda t: float(t.rstrip("B"))
            rows[" ".join(cols[5:])] = (num(cols[0]), num(cols[3]))
    return rows


def cmd_pprof(args):
    pprof = find_pprof()
    if pprof is None:
        print("SKIP: pprof not installed (go install github.com/google/pprof@latest)")
        sys.exit(SKIP)
    if args.emulator:
        print("SKIP: cross build; pprof here would symbolize another architecture's program")
        sys.exit(SKIP)
    prof, expect = os.path.join(args.dir, "pprof.pb.gz"), os.path.join(args.dir, "pprof.expect")
    run_writer(args, "write", prof, expect)
    # An empty search path: pprof must find the program by the mapping's file name.
    empty = os.path.join(args.dir, "pprof_binaries")
    os.makedirs(empty, exist_ok=True)
    env = dict(os.environ, PPROF_TMPDIR=args.dir, PPROF_BINARY_PATH=empty)
    inuse = pprof_top(pprof, prof, "inuse_space", env)
    for fn, (_, bytes_) in EXPECTED.items():
        check(inuse.get(fn, (None,))[0] == bytes_,
              f"inuse_space: {fn} flat {inuse.get(fn)}, expected {bytes_}")
    big, small = inuse.get("alloc_big", (0,))[0], inuse.get("alloc_small", (0,))[0]
    check(small and big == 4 * small, f"alloc_big {big} is not 4x alloc_small {small}")
    for fn in ("run_workload", "mode_write"):
        check(inuse.get(fn, (0, 0))[1] == TOTAL_INUSE, f"inuse_space: {fn} cum {inuse.get(fn)}")
    objects = pprof_top(pprof, prof, "alloc_objects", env)
    for fn, (count, _) in EXPECTED.items():
        check(objects.get(fn, (None,))[0] == count,
              f"alloc_objects: {fn} flat {objects.get(fn)}, expected {count}")
    total = sum(v[0] for v in EXPECTED.values())
    check(objects.get("run_workload", (0, 0))[1] == total,
          f"alloc_objects: run_workload cum {objects.get('run_workload')}")
    finish("pprof")


ALLOWED = {
    # the kernel, through the C library's plain system call wrappers
    "open", "open64", "read", "write", "close", "readlink", "__errno_location",
    # string functions the compiler may call for copies and compares
    "memcpy", "memmove", "memset", "memcmp", "memchr", "strlen",
    # hakmem's own mappings
    "os_map", "os_unmap", "os_remap",
    # the writer's compressor, prof_gzip.c, checked on its own (prof_gzip_no_libc_alloc)
    "prof_gzip_write",
    # its reading of /proc/self/maps and build IDs, prof_maps.c, checked on its own too
    "prof_maps_parse_line", "prof_maps_build_id",
    # hardening and position-independent code
    "__stack_chk_fail", "__stack_chk_guard", "_GLOBAL_OFFSET_TABLE_",
    "__open_2", "__open64_2", "__read_chk", "__readlink_chk", "__memcpy_chk", "__memset_chk",
}


def cmd_symbols(args):
    if not args.nm or not shutil.which(args.nm) and not os.access(args.nm, os.X_OK):
        print(f"SKIP: no nm ({args.nm!r})")
        sys.exit(SKIP)
    r = subprocess.run([args.nm, "-u", args.object], stdout=subprocess.PIPE, text=True, check=True)
    names = sorted({line.split()[-1].split("@")[0]
                    for line in r.stdout.splitlines() if line.strip()})
    print("undefined:", " ".join(names))
    bad = [n for n in names if n not in ALLOWED and not n.startswith("__ubsan_")]
    check(not bad, f"the writer calls {bad}: not on the list of functions that never allocate")
    if "prof_maps" not in os.path.basename(args.object):  # that one maps nothing
        check("os_map" in names, "the writer does not call os_map?")
    finish("symbols")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--writer", help="the prof_writer test program")
    ap.add_argument("--dir", help="where to put files")
    ap.add_argument("--emulator",
                    help="comma-separated command that runs the program (cross builds)")
    ap.add_argument("--nm")
    ap.add_argument("--object", help="prof_proto.c's object file")
    ap.add_argument("check", choices=["format", "many", "gzip", "pprof", "symbols"])
    args = ap.parse_args()
    {"format": cmd_format, "many": cmd_many, "gzip": cmd_gzip, "pprof": cmd_pprof,
     "symbols": cmd_symbols}[args.check](args)


if __name__ == "__main__":
    main()

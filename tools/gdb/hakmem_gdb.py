"""gdb commands that show hakmem's heap in a stopped process or a core file.

  hakmem heap [-v]      live blocks and slabs per size class over every heap, the
                        abandoned slabs, regions, large and huge blocks (-v: every region
                        and huge block, not only the first few)
  hakmem ptr EXPR       what an address is to hakmem: region or huge mapping, slab, class,
                        the block holding it, live or free (and on which list), the owner
  hakmem thread [HEAP]  the selected thread's heap (or the heap at HEAP): each class's
                        head slab and lists, the span cache, pending remote frees
  hakmem gcore [FILE]   gcore, leaving out the slab map's 16 GiB reservation

Load it with `source tools/gdb/hakmem_gdb.py`, or let gdb auto-load the installed copy
(docs/debugging.md). It needs the library's debug info for the layout of the structures
of src/space/space.h and src/block/block.h (the library is built with -g); the constants
below mirror src/base/base.h. The commands only read memory; `hakmem gcore` calls madvise
in the process only where the library has not marked the slab map MADV_DONTDUMP itself.
A bad pointer anywhere yields a line saying what could not be read, never a Python error.
"""

import struct

import gdb

# ---- src/base/base.h's constants (the structures' layout comes from the debug info) ----
UNIT_SHIFT = 16
REGION_SHIFT = 26
REGION_SIZE = 1 << REGION_SHIFT
ADDRESS_BITS = 47
REGION_HEADER_UNITS = 3
REMOTE_COUNT_SHIFT = 48
REMOTE_LIST_MASK = (1 << REMOTE_COUNT_SHIFT) - 1
SLAB_FULL = 0x1
OWNER_NONE, OWNER_ABANDONED, OWNER_LARGE, OWNER_CACHED = 0x0, 0x10, 0x20, 0x30
OWNER_NAMES = {OWNER_NONE: "OWNER_NONE (no block: free unit or unused span)",
               OWNER_ABANDONED: "OWNER_ABANDONED (its thread exited with blocks live)",
               OWNER_LARGE: "OWNER_LARGE (one large block)",
               OWNER_CACHED: "OWNER_CACHED (a free span in a span cache)"}
MAP_NONE, MAP_REGION, MAP_HUGE, MAP_HUGE_TAIL, MAP_ZERO = range(5)
MAP_NAMES = ["none", "region", "huge", "huge-tail", "zero"]
REGION_MAGIC = 0x68616B6D656D5247      # "hakmemRG" (region.c)
HUGE_MAGIC = 0x68616B6D656D4847        # "hakmemHG" (huge.c)
HUGE_FREED_MAGIC = 0x68616B6D656D4846  # "hakmemHF": freed, kept mapped for reuse
MADV_DONTDUMP, MADV_DODUMP = 16, 17

LIST_LIMIT = 1 << 17      # no slab holds more blocks (UNIT_SIZE * SLAB_MAX_UNITS / 16 is 32768)
HEAP_LIMIT = 1 << 20      # heaps on heaps_all before the walk calls the list broken
SHOWN_ROWS = 8            # regions and huge blocks listed without -v


class Fail(Exception):
    """A condition that ends the command with one line."""


def plural(n, what):
    return "%d %s%s" % (n, what, "" if n == 1 else "s")


def mib(n):
    return "%.2f MiB" % (n / 1048576.0)


def hexa(a):
    return "0x%x" % a


class Hakmem:
    """One command's view of the inferior: hakmem's types, symbols and memory readers."""

    def __init__(self):
        if gdb.selected_thread() is None:
            raise Fail("no process or core file: run the program or load a core first")
        self.inf = gdb.selected_inferior()
        try:
            self.slab_t = gdb.lookup_type("slab_t")
            self.heap_t = gdb.lookup_type("hak_heap_t")
            self.region_t = gdb.lookup_type("region_t")
        except gdb.error:
            try:
                gdb.parse_and_eval("(long)&hak_malloc")
            except gdb.error:
                raise Fail("libhakmem is not loaded in this program (yet): no symbol hak_malloc")
            raise Fail("libhakmem has no debug info (stripped?): its types are unknown "
                       "(build it with -g or install its debug symbols; docs/debugging.md)")
        try:
            self.huge_t = gdb.lookup_type("huge_header_t")
        except gdb.error:
            self.huge_t = None  # read as raw words below
        self.num_classes = self.array_len(self.heap_t, "queue")
        self.units_per_region = self.array_len(self.region_t, "unit_map")
        self.secure = self.array_len(self.heap_t, "quarantine") > 1
        self.slab_size = self.slab_t.sizeof
        self.off_unit_map = self.offset(self.region_t, "unit_map")
        self.off_slabs = self.offset(self.region_t, "slabs")
        self.region_map = self.address_of("region_map")
        self.region_map_len = self.global_value("region_map").type.range()[1] + 1
        if (self.region_map_len != 1 << (ADDRESS_BITS - REGION_SHIFT)
                or self.units_per_region != 1 << (REGION_SHIFT - UNIT_SHIFT)):
            print("hakmem: warning: this script's geometry (src/base/base.h) differs from the "
                  "library's: region_map has %d entries, a region %d units"
                  % (self.region_map_len, self.units_per_region))
        self.free_unit_slab = self.address_of("region_free_unit_slab")
        self.heap_empty = self.address_of("empty_heap")
        self.list_key = self.int_global("list_key") if self.secure else 0
        self.tag_key = self.int_global("tag_key") if self.secure else 0
        self.class_size = struct.unpack("<%dI" % self.num_classes,
                                        self.read(self.address_of("class_size"), 4 * self.num_classes))
        self._threads = None

    # ---- types and symbols -------------------------------------------------------------
    @staticmethod
    def array_len(t, field):
        r = t[field].type.strip_typedefs().range()
        return r[1] - r[0] + 1

    @staticmethod
    def offset(t, field):
        return t[field].bitpos // 8

    @staticmethod
    def global_value(name):
        """hakmem's global variable `name` (never a local of the selected frame's)."""
        sym = gdb.lookup_global_symbol(name)
        return sym.value() if sym is not None else gdb.parse_and_eval(name)

    @classmethod
    def address_of(cls, name):
        return int(cls.global_value(name).address.cast(gdb.lookup_type("unsigned long")))

    @staticmethod
    def tls_heap():
        """The selected thread's tls_heap (gdb.error where TLS cannot be read)."""
        sym = gdb.lookup_global_symbol("tls_heap")
        if sym is None:
            return int(gdb.parse_and_eval("tls_heap"))
        return int(sym.value(gdb.selected_frame()))

    def int_global(self, name):
        return self.u64(self.address_of(name))

    @staticmethod
    def find_static(name, type_name):
        """The address of a file-static variable whose type mentions type_name, or None.

        Looked up by name in any file (the functions are moving between .c files), then
        as 'file.c'::name for the file it lives in today."""
        candidates = []
        try:
            candidates = list(gdb.lookup_static_symbols(name))
        except (AttributeError, gdb.error):  # gdb < 10
            pass
        for sym in candidates:
            if type_name in str(sym.type):
                try:
                    return int(sym.value().address.cast(gdb.lookup_type("unsigned long")))
                except gdb.error:
                    pass
        for where in ("region.c", "heap_lifecycle.c", "purge.c", "huge.c"):
            try:
                v = gdb.parse_and_eval("&'%s'::%s" % (where, name))
            except gdb.error:
                continue
            if type_name in str(v.type):
                return int(v.cast(gdb.lookup_type("unsigned long")))
        return None

    # ---- memory --------------------------------------------------------------------------
    def read(self, addr, size):
        return bytes(self.inf.read_memory(addr, size))

    def u64(self, addr):
        return struct.unpack("<Q", self.read(addr, 8))[0]

    def words(self, addr, n):
        return struct.unpack("<%dQ" % n, self.read(addr, 8 * n))

    def fetch(self, addr, t):
        """A copy of the structure of type t at addr (one read; gdb.MemoryError if bad)."""
        return gdb.Value(self.read(addr, t.sizeof), t)

    def slab(self, addr):
        return self.fetch(addr, self.slab_t)

    def heap(self, addr):
        return self.fetch(addr, self.heap_t)

    def map_kind(self, addr):
        i = addr >> REGION_SHIFT
        if i >= self.region_map_len:
            return MAP_NONE
        return self.read(self.region_map + i, 1)[0]

    def unit_slab(self, region, unit):
        return self.u64(region + self.off_unit_map + 8 * unit)

    def walk_blocks(self, head):
        """The blocks on a free list from head (decoding the hardened build's links).
        Returns (addresses, problem or None)."""
        out, seen, b = [], set(), head
        while b:
            if b in seen:
                return out, "loops back to %s" % hexa(b)
            if len(out) >= LIST_LIMIT:
                return out, "longer than %d blocks" % LIST_LIMIT
            seen.add(b)
            out.append(b)
            try:
                link = self.u64(b)
            except gdb.MemoryError:
                return out, "link at %s unreadable" % hexa(b)
            b = link ^ self.list_key ^ b if self.secure else link
        return out, None

    def walk_heaps(self):
        """Addresses of the heaps on heaps_all, and a problem or None."""
        out, seen = [], set()
        h = self.int_global("heaps_all")
        off = self.offset(self.heap_t, "all_next")
        while h:
            if h in seen or len(out) >= HEAP_LIMIT:
                return out, "heaps_all loops back at %s" % hexa(h)
            seen.add(h)
            out.append(h)
            try:
                h = self.u64(h + off)
            except gdb.MemoryError:
                return out, "heaps_all: heap %s unreadable" % hexa(h)
        return out, None

    def walk_queue(self, q):
        """(slab address, slab) for each slab on a slab_queue_t value, and a problem."""
        out, seen, s = [], set(), int(q["head"])
        count = int(q["count"])
        while s:
            if s in seen or len(out) > count:
                return out, "list longer than its count %d" % count
            seen.add(s)
            try:
                v = self.slab(s)
            except gdb.MemoryError:
                return out, "slab %s unreadable" % hexa(s)
            out.append((s, v))
            s = int(v["next"])
        if len(out) != count:
            return out, "count says %d, list holds %d" % (count, len(out))
        return out, None

    # ---- threads -------------------------------------------------------------------------
    def heap_threads(self):
        """{heap address: [gdb thread]} from each thread's tls_heap."""
        if self._threads is not None:
            return self._threads
        self._threads = {}
        here = gdb.selected_thread()
        try:
            frame = gdb.selected_frame()
        except gdb.error:
            frame = None
        try:
            for th in self.inf.threads():
                try:
                    th.switch()
                    h = self.tls_heap()
                except gdb.error:
                    continue
                self._threads.setdefault(h, []).append(th)
        finally:
            here.switch()
            if frame is not None:
                try:
                    frame.select()
                except gdb.error:
                    pass
        return self._threads

    def heap_name(self, h):
        ths = self.heap_threads().get(h)
        if h == self.heap_empty:
            return "empty_heap (no heap yet)"
        if not ths:
            return "heap %s (no thread: parked, pooled or being handed over)" % hexa(h)
        return "heap %s (%s)" % (hexa(h), ", ".join(thread_name(t) for t in ths))

    def owner_text(self, owner):
        if owner in OWNER_NAMES:
            return OWNER_NAMES[owner]
        h = owner & ~SLAB_FULL
        text = self.heap_name(h)
        if owner & SLAB_FULL:
            text += ", SLAB_FULL (on its full list)"
        return text

    def pending_chains(self, heaps):
        """{slab: [(heap, chain index, count, head)]}: blocks other threads freed into the
        slab, still chained in their heap (counted in the slab's `used`)."""
        out = {}
        for h in heaps:
            try:
                hv = self.heap(h)
            except gdb.MemoryError:
                continue
            chains = hv["remote"]
            for i in range(self.array_len(self.heap_t, "remote")):
                rc = chains[i]
                s = int(rc["slab"])
                if s:
                    out.setdefault(s, []).append((h, i, int(rc["count"]), int(rc["head"])))
        return out

    def quarantined(self, heaps):
        """[(heap, slot, block)] of the hardened build's quarantine."""
        out = []
        if not self.secure:
            return out
        for h in heaps:
            try:
                q = self.heap(h)["quarantine"]
            except gdb.MemoryError:
                continue
            for i in range(self.array_len(self.heap_t, "quarantine")):
                b = int(q[i])
                if b:
                    out.append((h, i, b))
        return out

    def huge_header(self, base):
        """(magic, user, base, map_size, size) of the huge header at base."""
        if self.huge_t is not None:
            v = self.fetch(base, self.huge_t)
            return tuple(int(v[f]) for f in ("magic", "user", "base", "map_size", "size"))
        return self.words(base, 5)

    def find_huge(self, addr):
        """The header fields of the huge mapping holding addr, or None. The header is at the
        mapping's first region-sized chunk; the chunks from there to addr are all marked."""
        chunk = addr & ~(REGION_SIZE - 1)
        while chunk >= REGION_SIZE and self.map_kind(chunk) in (MAP_HUGE, MAP_HUGE_TAIL):
            try:
                hdr = self.huge_header(chunk)
            except gdb.MemoryError:
                hdr = None
            if (hdr and hdr[0] in (HUGE_MAGIC, HUGE_FREED_MAGIC) and hdr[2] == chunk
                    and chunk + hdr[3] > addr):
                return hdr
            chunk -= REGION_SIZE
        return None

    def region_map_scan(self):
        """{kind: [chunk addresses]} over the whole region map (regions, huge chunks)."""
        out = {}
        step = 1 << 16
        for first in range(0, self.region_map_len, step):
            try:
                data = self.read(self.region_map + first, step)
            except gdb.MemoryError:
                continue
            if not any(data):
                continue
            for i, k in enumerate(data):
                if k:
                    out.setdefault(k, []).append((first + i) << REGION_SHIFT)
        return out


def thread_name(th):
    return "thread %d, LWP %d" % (th.num, th.ptid[1])


def class_row(c, size, live, slabs, full, pending):
    return ("  %5s %10s %12d %8d %6d %14d %8s" % (c, size, live, slabs, full, live * size,
                                                pending if pending else "")).rstrip()


# ---- hakmem heap ---------------------------------------------------------------------------
def cmd_heap(hk, verbose):
    heaps, problem = hk.walk_heaps()
    threads = hk.heap_threads()
    pending = hk.pending_chains(heaps)
    nc = hk.num_classes
    live = [0] * nc
    slabs = [0] * nc
    full = [0] * nc
    waiting = [0] * nc  # in another thread's pending chain
    print("heaps: %d on heaps_all" % len(heaps))
    if problem:
        print("  (%s)" % problem)

    def count(slab_list, pinned, c):
        for s, v in slab_list:
            used = int(v["used"]) - (1 if s == pinned else 0)
            remote = int(v["remote"]) >> REMOTE_COUNT_SHIFT
            chained = sum(p[2] for p in pending.get(s, []))
            n = used - remote
            live[c] += max(n - chained, 0)
            waiting[c] += min(chained, max(n, 0))
            slabs[c] += 1

    for h in heaps:
        try:
            hv = hk.heap(h)
        except gdb.MemoryError:
            print("  heap %s: unreadable" % hexa(h))
            continue
        n_slabs = n_full = 0
        for c in range(nc):
            pinned = int(hv["pinned"][c])
            for which in ("queue", "full"):
                lst, bad = hk.walk_queue(hv[which][c])
                if bad:
                    print("  heap %s %s[%d]: %s" % (hexa(h), which, c, bad))
                count(lst, pinned, c)
                n_slabs += len(lst)
                if which == "full":
                    full[c] += len(lst)
                    n_full += len(lst)
        chains = sum(1 for s in pending for p in pending[s] if p[0] == h)
        print("  %s: %s (%d full), %s cached, %s" % (
            hk.heap_name(h), plural(n_slabs, "slab"), n_full,
            plural(int(hv["spans"]["count"]), "span"), plural(chains, "pending remote chain")))
    for th_heap, ths in threads.items():
        if th_heap not in heaps and th_heap != hk.heap_empty:
            print("  %s is not on heaps_all" % hk.heap_name(th_heap))

    try:  # a global since the heap files were split; a file static before
        abandoned = hk.address_of("heap_abandoned")
    except (gdb.error, AttributeError, TypeError):
        abandoned = hk.find_static("abandoned", "slab_queue_t")
    n_abandoned = 0
    if abandoned is None:
        abandoned_line = ("abandoned slabs: not visible (no static `abandoned` in the debug "
                          "info); the table leaves them out")
    else:
        qt = gdb.lookup_type("slab_queue_t")
        for c in range(nc):
            try:
                lst, bad = hk.walk_queue(hk.fetch(abandoned + c * qt.sizeof, qt))
            except gdb.MemoryError:
                lst, bad = [], "unreadable"
            if bad:
                print("  abandoned[%d]: %s" % (c, bad))
            count(lst, 0, c)
            n_abandoned += len(lst)
        abandoned_line = "abandoned slabs: %d (counted in the table)" % n_abandoned
    for h, slot, b in hk.quarantined(heaps):  # freed, not reusable yet: not live
        try:
            s = hk.unit_slab(b & ~(REGION_SIZE - 1), (b >> UNIT_SHIFT) % hk.units_per_region)
            live[int(hk.slab(s)["class_idx"])] -= 1
        except (gdb.MemoryError, IndexError):
            pass

    print("  %5s %10s %12s %8s %6s %14s %8s" % ("class", "size", "live blocks", "slabs", "full",
                                               "live bytes", "pending"))
    total_live = total_bytes = total_slabs = total_waiting = 0
    for c in range(nc):
        if slabs[c] == 0:
            continue
        print(class_row(c, hk.class_size[c], live[c], slabs[c], full[c], waiting[c]))
        total_live += live[c]
        total_bytes += live[c] * hk.class_size[c]
        total_slabs += slabs[c]
        total_waiting += waiting[c]
    print("  small+mid: %s, %s in %s" % (plural(total_live, "live block"), mib(total_bytes),
                                         plural(total_slabs, "slab")))
    if total_waiting:
        print("  pending: %d blocks freed by a thread that has not pushed them to their slab yet "
              "(its remote chain); the stats report still counts them live" % total_waiting)
    print("  " + abandoned_line)
    if hk.secure:
        print("  quarantine (hardened build): %d blocks, not counted live" % len(hk.quarantined(heaps)))

    cmd_heap_regions(hk, verbose)


def cmd_heap_regions(hk, verbose):
    scan = hk.region_map_scan()
    mapped = scan.get(MAP_REGION, [])
    regions = []
    head = hk.find_static("regions", "region_t")
    if head is None:
        print("regions: the static `regions` is not visible; %d regions found on the region map"
              % len(mapped))
        regions = mapped
    else:
        r, seen = hk.u64(head), set()
        off = hk.offset(hk.region_t, "next")
        while r and r not in seen:
            seen.add(r)
            regions.append(r)
            try:
                r = hk.u64(r + off)
            except gdb.MemoryError:
                print("  region list: %s unreadable" % hexa(r))
                break
        print("regions: %d (%s mapped)%s" % (len(regions), mib(len(regions) * REGION_SIZE),
              "" if sorted(regions) == sorted(mapped) else
              "; the region map marks %d" % len(mapped)))
    large_blocks = large_units = large_requested = 0
    for i, r in enumerate(regions):
        try:
            census = region_census(hk, r)
        except gdb.MemoryError:
            print("  region %s: unreadable" % hexa(r))
            continue
        large_blocks += census["large"]
        large_units += census["large units"]
        large_requested += census["requested"]
        if verbose or i < SHOWN_ROWS:
            print("  region %s: %s" % (hexa(r), census["text"]))
    if not verbose and len(regions) > SHOWN_ROWS:
        print("  ... %d more (hakmem heap -v lists them all)" % (len(regions) - SHOWN_ROWS))
    print("large: %s, %s requested, in %s of units"
          % (plural(large_blocks, "live block"), mib(large_requested), mib(large_units << UNIT_SHIFT)))

    huge_bytes = int(hk.global_value("gstats")["huge_mapped"])
    huge = []
    for chunk in scan.get(MAP_HUGE, []):
        hdr = hk.find_huge(chunk + REGION_SIZE - 1)
        if hdr and hdr[1] >> REGION_SHIFT == chunk >> REGION_SHIFT:
            huge.append(hdr)
    live_huge = [h for h in huge if h[0] == HUGE_MAGIC]
    print("huge: %s mapped (gstats.huge_mapped), %s"
          % (mib(huge_bytes), plural(len(live_huge), "live block")))
    for i, (magic, user, base, map_size, size) in enumerate(huge):
        if verbose or i < SHOWN_ROWS:
            print("  %s: %s requested, mapping %s + %s%s" % (
                hexa(user), mib(size), hexa(base), mib(map_size),
                "" if magic == HUGE_MAGIC else ", freed (kept mapped for reuse)"))
    if not verbose and len(huge) > SHOWN_ROWS:
        print("  ... %d more (hakmem heap -v lists them all)" % (len(huge) - SHOWN_ROWS))


def region_census(hk, r):
    """What a region's units hold, from its unit map and slab descriptors."""
    magic = hk.u64(r)
    unit_map = hk.words(r + hk.off_unit_map, hk.units_per_region)
    kinds = {"slab": [0, 0], "large": [0, 0], "cached": [0, 0], "abandoned": [0, 0], "other": [0, 0]}
    requested = 0
    free_units = 0
    u = REGION_HEADER_UNITS
    end = hk.units_per_region - (1 if hk.secure else 0)  # the hardened build's guard unit
    while u < end:
        s = unit_map[u]
        if s == hk.free_unit_slab:
            free_units += 1
            u += 1
            continue
        if s != r + hk.off_slabs + u * hk.slab_size:  # not a span's first unit
            kinds["other"][0] += 1
            kinds["other"][1] += 1
            u += 1
            continue
        v = hk.slab(s)
        owner, units = int(v["owner"]), max(int(v["units"]), 1)
        kind = ("large" if owner == OWNER_LARGE else "cached" if owner == OWNER_CACHED else
                "abandoned" if owner == OWNER_ABANDONED else "slab" if owner > OWNER_CACHED else
                "other")
        kinds[kind][0] += 1
        kinds[kind][1] += units
        if kind == "large":
            requested += int(v["aux"])
        u += units
    # Two fields of the 141 KiB header, read alone.
    free_field = struct.unpack("<I", hk.read(r + hk.offset(hk.region_t, "free_units"), 4))[0]
    dirty = struct.unpack("<I", hk.read(r + hk.offset(hk.region_t, "dirty_free_units"), 4))[0]
    def part(kind, what):
        return "%s in %s" % (plural(kinds[kind][0], what), plural(kinds[kind][1], "unit"))
    parts = [part("slab", "slab")]
    if kinds["abandoned"][0]:
        parts.append(part("abandoned", "abandoned slab"))
    parts.append(part("large", "large block"))
    parts.append(part("cached", "cached span"))
    if kinds["other"][0]:
        parts.append("%d units in no span's first unit map entry (inconsistent?)" % kinds["other"][0])
    parts.append("%s (%d may be resident)" % (plural(free_field, "free unit"), dirty))
    text = ", ".join(parts)
    if magic != REGION_MAGIC:
        text = "bad magic %s; " % hexa(magic) + text
    if free_units != free_field:
        text += " [unit map shows %d free]" % free_units
    return {"text": text, "large": kinds["large"][0], "large units": kinds["large"][1],
            "requested": requested}


# ---- hakmem ptr ---------------------------------------------------------------------------
def cmd_ptr(hk, addr):
    kind = hk.map_kind(addr)
    name = MAP_NAMES[kind] if kind < len(MAP_NAMES) else "unknown kind %d" % kind
    print("%s: region map: %s" % (hexa(addr), name))
    if kind == MAP_NONE:
        print("  not hakmem's (no region or huge mapping of hakmem's holds it)")
    elif kind == MAP_ZERO:
        print("  the hardened build's inaccessible home of malloc(0) blocks: "
              "a zero-size block, no byte of it may be read")
    elif kind in (MAP_HUGE, MAP_HUGE_TAIL):
        ptr_huge(hk, addr)
    elif kind == MAP_REGION:
        ptr_region(hk, addr)


def ptr_huge(hk, addr):
    hdr = hk.find_huge(addr)
    if hdr is None:
        print("  marked huge, but no huge header found in the chunks before it")
        return
    magic, user, base, map_size, size = hdr
    state = "live" if magic == HUGE_MAGIC else "freed, kept mapped for reuse (not live)"
    print("  huge block %s: %s; header at %s (magic %s, user %s, base %s, map_size %d, size %d)"
          % (hexa(user), state, hexa(base), hexa(magic), hexa(user), hexa(base), map_size, size))
    print("  requested %d bytes (%s), mapping %s + %s, usable %d bytes"
          % (size, mib(size), hexa(base), mib(map_size), base + map_size - user))
    if addr < user:
        print("  the address lies %d bytes before the block, in the header's part of the mapping"
              % (user - addr))
    elif addr < user + size:
        print("  the address is byte %d of the block" % (addr - user))
    else:
        print("  the address is byte %d of the block, past its requested size" % (addr - user))


def ptr_region(hk, addr):
    r = addr & ~(REGION_SIZE - 1)
    unit = (addr >> UNIT_SHIFT) % hk.units_per_region
    magic = hk.u64(r)
    if magic != REGION_MAGIC:
        print("  region %s has a bad magic %s" % (hexa(r), hexa(magic)))
    if unit < REGION_HEADER_UNITS:
        where = "region %s's header (unit %d)" % (hexa(r), unit)
        first = r + hk.off_slabs
        if first <= addr < first + hk.units_per_region * hk.slab_size:
            where += ", inside slab descriptor slabs[%d] (%s)" % (
                (addr - first) // hk.slab_size, hexa(first + (addr - first) // hk.slab_size * hk.slab_size))
        print("  in %s: hakmem's metadata, not a block" % where)
        return
    s = hk.unit_slab(r, unit)
    if s == hk.free_unit_slab:
        print("  region %s, unit %d: a free unit (in no span), not a block" % (hexa(r), unit))
        return
    v = hk.slab(s)
    owner = int(v["owner"])
    units, first_unit = int(v["units"]), int(v["unit_idx"])
    c = int(v["class_idx"])
    print("  region %s, unit %d; slab descriptor %s (unit_map[%d]): span of %s from unit %d"
          % (hexa(r), unit, hexa(s), unit, plural(units, "unit"), first_unit))
    if s != r + hk.off_slabs + first_unit * hk.slab_size:
        print("  (the descriptor is not slabs[unit_idx] of this region: the header is inconsistent)")
    print("  owner %s: %s" % (hexa(owner), hk.owner_text(owner)))
    ptr_slab_map_check(hk, addr, s)
    if c == hk.num_classes:
        ptr_large(v, owner, addr)
        return
    if owner in (OWNER_NONE, OWNER_CACHED, OWNER_LARGE):
        print("  no block of it is live: the span is %s" % (
            "unused" if owner == OWNER_NONE else "a free span cached for reuse"
            if owner == OWNER_CACHED else "marked large but its class is %d" % c))
        return
    ptr_block(hk, s, v, addr)


def ptr_slab_map_check(hk, addr, s):
    """free() reads the slab map, not the region header: say when the two disagree."""
    try:
        units = hk.int_global("slab_map_units")
        base = hk.int_global("slab_map")
        if not units or addr >> UNIT_SHIFT >= units:
            return
        entry = hk.u64(base + 8 * (addr >> UNIT_SHIFT))
    except gdb.MemoryError:
        print("  slab map: entry unreadable (left out of this core by `hakmem gcore`?)")
        return
    except gdb.error:
        return
    if base + entry != s:
        print("  slab map: entry points at %s, not at the region header's descriptor"
              % hexa(base + entry))


def ptr_large(v, owner, addr):
    start, usable, aux = int(v["start"]), int(v["block_size"]), int(v["aux"])
    if owner != OWNER_LARGE:
        state = ("freed, its span cached for reuse at %d ms (aux)" % aux
                 if owner == OWNER_CACHED else "owner word %s" % hexa(owner))
        print("  large block %s: not live (%s); it had %d usable bytes" % (hexa(start), state, usable))
        return
    print("  large block %s: live; requested %d bytes (aux), usable %d bytes"
          % (hexa(start), aux, usable))
    requested = aux
    if addr < start:
        print("  the address lies %d bytes before the block, in its span's head" % (start - addr))
    else:
        print("  the address is byte %d of the block%s" % (
            addr - start, ", past its requested size" if addr - start >= requested else ""))


def ptr_block(hk, s, v, addr):
    c = int(v["class_idx"])
    size = int(v["block_size"])
    start, carved, fits = int(v["start"]), int(v["capacity"]), int(v["reserved"])
    used, remote = int(v["used"]), int(v["remote"])
    print("  class %d, block size %d; %d of %d blocks carved, used %d, remote frees waiting %d"
          % (c, size, carved, fits, used, remote >> REMOTE_COUNT_SHIFT))
    if size == 0 or addr < start:
        print("  the address lies before block 0 (%s): not a block" % hexa(start))
        return
    index = (addr - start) // size
    block = start + index * size
    at = "block %s (index %d)%s" % (hexa(block), index,
                                    "" if addr == block else ", byte %d of it" % (addr - block))
    if index >= fits:
        print("  past the slab's last block (the span's slack): not a block")
        return
    if index >= carved:
        print("  %s: not carved yet, never handed out (not live)" % at)
        return
    where = find_free_block(hk, s, v, block)
    try:
        tag = hk.u64(block + 8) == s ^ hk.tag_key
    except gdb.MemoryError:
        print("  %s: unreadable" % at)
        return
    if where:
        print("  %s: free, %s" % (at, where))
    elif tag:
        print("  %s: free (its second word, the free tag, names this slab's descriptor), "
              "on no list this script walks" % at)
    else:
        print("  %s: live" % at)


def find_free_block(hk, s, v, block):
    """Where a free block waits, or None: the slab's lists, pending chains, quarantine."""
    lists = [("on the slab's free list", int(v["free"]))]
    if hk.secure:
        lists.append(("on the slab's local_free list", int(v["local_free"])))
    lists.append(("on the slab's remote list (freed by another thread, not collected yet)",
                  int(v["remote"]) & REMOTE_LIST_MASK))
    for what, head in lists:
        blocks, problem = hk.walk_blocks(head)
        if block in blocks:
            return "%s (%d of %d)" % (what, blocks.index(block) + 1, len(blocks))
        if problem:
            print("  (%s: %s)" % (what.replace("on ", ""), problem))
    heaps, _ = hk.walk_heaps()
    for h, i, n, head in hk.pending_chains(heaps).get(s, []):
        blocks, _ = hk.walk_blocks(head)
        if block in blocks:
            return ("in the pending remote chain %d of %s (%s, not pushed to the slab yet)"
                    % (i, hk.heap_name(h), plural(n, "block")))
    for h, i, b in hk.quarantined(heaps):
        if b == block:
            return "in the quarantine of %s, slot %d" % (hk.heap_name(h), i)
    return None


# ---- hakmem thread ------------------------------------------------------------------------
def cmd_thread(hk, arg):
    if arg:
        h = int(gdb.parse_and_eval(arg).cast(gdb.lookup_type("unsigned long")))
        print(hk.heap_name(h))
    else:
        try:
            h = hk.tls_heap()
        except gdb.error as e:
            raise Fail("cannot read this thread's tls_heap (%s); name a heap instead: "
                       "hakmem thread ADDRESS (hakmem heap lists them)" % e)
        print("%s: tls_heap = %s" % (thread_name(gdb.selected_thread()), hexa(h)))
    if h == hk.heap_empty:
        print("  empty_heap: this thread has no heap (it has not allocated yet)")
        return
    hv = hk.heap(h)
    print("  %5s %8s %16s %6s %6s %14s %6s %6s %5s" % (
        "class", "size", "head slab", "free", "remote", "carved/fits", "used", "queue", "full"))
    for c in range(hk.num_classes):
        q, f = hv["queue"][c], hv["full"][c]
        nq, nf = int(q["count"]), int(f["count"])
        if nq == 0 and nf == 0:
            continue
        head = int(q["head"])
        cols = ["-", "", "", "", ""]
        if head:
            try:
                sv = hk.slab(head)
                free, problem = hk.walk_blocks(int(sv["free"]))
                n_free = len(free) + (len(hk.walk_blocks(int(sv["local_free"]))[0]) if hk.secure else 0)
                pin = 1 if int(hv["pinned"][c]) == head else 0
                cols = [hexa(head), "%d%s" % (n_free, "?" if problem else ""),
                        str(int(sv["remote"]) >> REMOTE_COUNT_SHIFT),
                        "%d/%d" % (int(sv["capacity"]), int(sv["reserved"])),
                        str(int(sv["used"]) - pin)]
            except gdb.MemoryError:
                cols = [hexa(head), "?", "?", "unreadable", "?"]
        print("  %5d %8d %16s %6s %6s %14s %6s %6d %5d" % (
            c, hk.class_size[c], cols[0], cols[1], cols[2], cols[3], cols[4], nq, nf))
    print("  (free: blocks on the head slab's free list%s; used: blocks out, not counting the "
          "queue head's pin)" % (" and local_free" if hk.secure else ""))
    spans = hv["spans"]
    n = int(spans["count"])
    parts = []
    for i in range(min(n, hk.array_len(gdb.lookup_type("span_cache_t"), "spans"))):
        sp = int(spans["spans"][i])
        try:
            sv = hk.slab(sp)
            parts.append("%s (%d units, cached at %d ms)" % (
                hexa((sp & ~(REGION_SIZE - 1)) + (int(sv["unit_idx"]) << UNIT_SHIFT)),
                int(sv["units"]), int(sv["aux"])))
        except gdb.MemoryError:
            parts.append("%s (unreadable)" % hexa(sp))
    print("  span cache: %s, %s%s" % (plural(n, "span"), plural(int(spans["units"]), "unit"),
                                                ": " + ", ".join(parts) if parts else ""))
    chains = []
    for i in range(hk.array_len(hk.heap_t, "remote")):
        rc = hv["remote"][i]
        s = int(rc["slab"])
        if not s:
            continue
        try:
            sv = hk.slab(s)
            into = "class %d, %s" % (int(sv["class_idx"]), hk.owner_text(int(sv["owner"])))
        except gdb.MemoryError:
            into = "unreadable"
        chains.append("    chain %d: %s (pushed at %d) into slab %s (%s)"
                      % (i, plural(int(rc["count"]), "block"), int(rc["limit"]), hexa(s), into))
    print("  pending remote chains: %d%s" % (len(chains), "" if chains else
                                            " (no frees into other threads' slabs held back)"))
    for line in chains:
        print(line)
    line = "  slow calls %d, stale classes %s" % (int(hv["slow_calls"]), hexa(int(hv["stale_classes"])))
    if hk.secure:
        line += ", quarantine %d blocks" % sum(
            1 for i in range(hk.array_len(hk.heap_t, "quarantine")) if int(hv["quarantine"][i]))
    print(line)


# ---- hakmem gcore -------------------------------------------------------------------------
def one_line(e):
    text = str(e).strip().splitlines()
    return text[0].rstrip(".") if text else type(e).__name__


def marked_dontdump(pid, base, length):
    """True when /proc says the mapping holding [base, base+length) is VM_DONTDUMP ("dd"),
    None when /proc cannot tell (a remote target, another machine's pid)."""
    try:
        with open("/proc/%d/smaps" % pid) as f:
            inside = False
            for line in f:
                head = line.split(None, 1)[0]
                if "-" in head and not head.endswith(":"):
                    lo, hi = (int(x, 16) for x in head.split("-"))
                    inside = lo <= base < hi
                elif inside and head == "VmFlags:":
                    return "dd" in line.split()[1:]
    except (OSError, ValueError):
        return None
    return False


def cmd_gcore(hk, arg):
    """gcore, without the slab map's reservation: 16 GiB of address space that reads as
    zero, and gcore would write it all (a 17 GB file, a minute's work). The library marks
    it MADV_DONTDUMP when it maps it, and gdb (8 and later) skips such mappings; only where
    /proc does not show that mark is it set from gdb, for the dump's time, with an inferior
    call. The map only mirrors the region headers' unit maps, so hakmem's commands lose
    nothing (hakmem ptr says its entry is unreadable)."""
    connection = getattr(hk.inf, "connection", None)  # gdb 11 and later
    if connection is not None and connection.type == "core":
        raise Fail("hakmem gcore needs a live process; this is a core file already")
    base = hk.int_global("slab_map")
    length = hk.int_global("slab_map_units") * 8
    path = arg.strip() or "core.%d" % hk.inf.pid
    marked = bool(length == 0 or marked_dontdump(hk.inf.pid, base, length))
    lock = gdb.parameter("scheduler-locking")
    call = "((int (*)(void *, unsigned long, int))madvise)((void *)%d, %d, %%d)" % (base, length)
    called = False
    try:
        if not marked:
            gdb.execute("set scheduler-locking on", to_string=True)  # no other thread runs
            try:
                called = int(gdb.parse_and_eval(call % MADV_DONTDUMP)) == 0
            except gdb.error as e:
                raise Fail("gcore not written: gdb cannot call madvise in the process to leave "
                           "out the slab map's 16 GiB (%s); take the kernel's core instead: "
                           "ulimit -c unlimited, then kill -ABRT %d" % (one_line(e), hk.inf.pid))
            if not called:
                print("hakmem: madvise(MADV_DONTDUMP) failed: the core keeps the slab map")
        try:
            out = gdb.execute("gcore %s" % path, to_string=True)
        except gdb.error as e:
            raise Fail("gcore failed: %s; the kernel's core is another way: ulimit -c "
                       "unlimited, then kill -ABRT %d" % (one_line(e), hk.inf.pid))
        for line in out.splitlines():
            if line.startswith("Saved corefile"):
                print(line)
    finally:
        if called:
            try:
                gdb.parse_and_eval(call % MADV_DODUMP)
            except gdb.error:
                pass
        if not marked:
            gdb.execute("set scheduler-locking %s" % lock, to_string=True)


# ---- the commands -------------------------------------------------------------------------
def run(fn, *args):
    try:
        fn(Hakmem(), *args)
    except Fail as e:
        print("hakmem: %s" % e)
    except gdb.MemoryError as e:
        print("hakmem: cannot read memory: %s" % e)
    except gdb.error as e:
        print("hakmem: %s" % e)


def address_arg(arg):
    if not arg.strip():
        raise Fail("usage: hakmem ptr EXPRESSION")
    v = gdb.parse_and_eval(arg)
    if v.type.strip_typedefs().code == gdb.TYPE_CODE_ARRAY:
        v = v.address
    return int(v.cast(gdb.lookup_type("unsigned long")))


class HakmemCommand(gdb.Command):
    """Commands that show hakmem's heap: hakmem heap, ptr, thread, gcore."""

    def __init__(self):
        super().__init__("hakmem", gdb.COMMAND_DATA, gdb.COMPLETE_NONE, True)

    def invoke(self, arg, from_tty):
        gdb.execute("help hakmem")


class HakmemHeap(gdb.Command):
    """Live blocks per size class over all heaps; regions, large and huge blocks.

Per size class, summed over every heap on heaps_all and the abandoned lists: live blocks,
slabs, slabs on full lists, live bytes, and `pending`: blocks another thread freed and
still holds in its remote chain (the stats report counts them live). Then each heap with
its thread, the regions' units, large blocks and huge mappings.
Usage: hakmem heap [-v]   (-v: every region and huge block, not only the first few)"""

    def __init__(self):
        super().__init__("hakmem heap", gdb.COMMAND_DATA, gdb.COMPLETE_NONE)

    def invoke(self, arg, from_tty):
        run(cmd_heap, arg.strip() == "-v")


class HakmemPtr(gdb.Command):
    """What an address is to hakmem: its slab, class and block, live or free.

The region map's kind; for a region pointer the region, unit and slab descriptor, the
owner word decoded, the class and the block holding the address, and whether that block
is live or free (and on which list: the slab's free, local_free or remote list, another
thread's pending remote chain, a quarantine); a large block's requested size; a huge
block's header. Anything else is "not hakmem's".
Usage: hakmem ptr EXPRESSION"""

    def __init__(self):
        super().__init__("hakmem ptr", gdb.COMMAND_DATA, gdb.COMPLETE_EXPRESSION)

    def invoke(self, arg, from_tty):
        try:
            addr = address_arg(arg)
        except (Fail, gdb.error) as e:
            print("hakmem: %s" % e)
            return
        run(cmd_ptr, addr)


class HakmemThread(gdb.Command):
    """The selected thread's heap: class queues, span cache, pending remote frees.

The heap tls_heap points at (or the heap at address HEAP): per class the head slab,
the blocks on its free list, its remote frees, blocks carved and blocks that fit, blocks
out, the queue's and full list's lengths; the span cache; the remote chains of frees into
other threads' slabs that it has not pushed yet.
Usage: hakmem thread [HEAP]   (every thread: thread apply all hakmem thread)"""

    def __init__(self):
        super().__init__("hakmem thread", gdb.COMMAND_DATA, gdb.COMPLETE_EXPRESSION)

    def invoke(self, arg, from_tty):
        run(cmd_thread, arg.strip())


class HakmemGcore(gdb.Command):
    """gcore, leaving out the slab map's 16 GiB of zero-reading address space.

gdb's gcore writes every readable mapping in full, and the slab map's reservation would
make a 17 GB file. This marks it MADV_DONTDUMP (calling madvise in the process, with
scheduler-locking on), runs gcore, and unmarks it. hakmem's commands do not need it.
Usage: hakmem gcore [FILE]"""

    def __init__(self):
        super().__init__("hakmem gcore", gdb.COMMAND_DATA, gdb.COMPLETE_FILENAME)

    def invoke(self, arg, from_tty):
        run(cmd_gcore, arg.strip())


HakmemCommand()
HakmemHeap()
HakmemPtr()
HakmemThread()
HakmemGcore()

"""churn.py — a Python workload that churns objects (the harness's "python").

usage: python3 churn.py STEPS POPULATION SEED
       (with PYTHONMALLOC=malloc, so that every object goes through malloc, not through
       pymalloc's arenas)

Keeps a live population of POPULATION small objects (instances with a __dict__, lists,
dicts, tuples, strings and ints) and at every step replaces a random one; builds and
parses text lines; keeps a string-keyed inventory that grows and is pruned; every so
often sorts a snapshot, groups it into a dict of lists and serialises part of it. A
seeded LCG drives everything and the output is checksums that depend on no address, hash
seed or dict order, so every allocator must print the same lines.
"""

import sys
import zlib

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 200000
POPULATION = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
SEED = int(sys.argv[3]) if len(sys.argv) > 3 else 1

_state = (SEED * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF


def rand(n):
    """1..n from a 64-bit LCG (the same generator as churn.lua and churn.pl)."""
    global _state
    _state = (_state * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
    return (_state >> 33) % n + 1


SYLLABLES = ["ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "ze", "vu", "an", "or"]
# every word of two and of three syllables (1872 words)
VOCABULARY = [a + b + c for a in SYLLABLES for b in SYLLABLES for c in [""] + SYLLABLES]


def word():
    return VOCABULARY[rand(len(VOCABULARY)) - 1]


class Item:
    def __init__(self, ident):
        self.ident = ident
        self.name = "%s-%s" % (word(), word())
        self.tags = [word() for _ in range(rand(8))]
        self.attrs = {word(): rand(1000) for _ in range(rand(6))}
        self.pos = (rand(1000), rand(1000))
        self.line = "%08d %s [%s] %s" % (ident, self.name, ",".join(self.tags),
                                         " ".join("%s=%d" % kv for kv in sorted(self.attrs.items())))

    def weight(self):
        return sum(self.attrs.values()) + len(self.tags) * 7 + self.pos[0] - self.pos[1]


def parse(line):
    head, _, rest = line.partition(" [")
    ident, name = head.split(" ", 1)
    tags, _, attrs = rest.partition("] ")
    pairs = dict(p.split("=") for p in attrs.split()) if attrs else {}
    return int(ident), name, tags.split(",") if tags else [], {k: int(v) for k, v in pairs.items()}


def main():
    live = [Item(i) for i in range(POPULATION)]
    inventory = {}
    digest = 0
    made = POPULATION
    weight = 0
    for step in range(1, STEPS + 1):
        slot = rand(POPULATION) - 1
        old = live[slot]
        ident, name, tags, attrs = parse(old.line)
        if ident != old.ident or name != old.name or tags != old.tags or attrs != old.attrs:
            print("FAIL: line of item %d did not parse back" % old.ident)
            sys.exit(1)
        for t in tags:
            inventory[t] = inventory.get(t, 0) + 1
        weight += old.weight()
        live[slot] = Item(POPULATION + step)
        made += 1

        if step % 1000 == 0:
            # prune the inventory, then a sorted, grouped and serialised snapshot
            for key in [k for k, c in inventory.items() if c < 2]:
                del inventory[key]
            snapshot = sorted(live, key=lambda it: (it.name, it.ident))
            groups = {}
            for it in snapshot:
                groups.setdefault(it.name[:2], []).append((it.ident, it.weight()))
            text = ";".join("%s:%d" % (k, sum(w for _, w in v)) for k, v in sorted(groups.items()))
            digest = zlib.crc32(text.encode(), digest)

    ids = sum(it.ident for it in live)
    top = sorted(inventory.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    print("steps=%d made=%d" % (STEPS, made))
    print("weight=%d digest=%08x" % (weight, digest))
    print("inventory=%d top=%s" % (len(inventory), ",".join("%s:%d" % kv for kv in top)))
    print("live ids sum=%d" % ids)


main()

"""bighash.py — a multi-million-entry dict read at random keys (a large-heap program).

usage: python3 bighash.py KEYS LOOKUPS SEED   (with PYTHONMALLOC=malloc, so that every
                                               object goes through malloc)

Builds a dict of KEYS string keys ("key:<i>") to string values of 4..40 characters,
then makes LOOKUPS look-ups of keys drawn by a seeded LCG (the generator of churn.py),
one in sixteen of them rewriting the value; the heap is hundreds of MiB of small
objects spread by the random keys over all of it. The output is counts and checksums
that depend on no address or hash seed, so every allocator must print the same lines.
"""

import sys

KEYS = int(sys.argv[1]) if len(sys.argv) > 1 else 3000000
LOOKUPS = int(sys.argv[2]) if len(sys.argv) > 2 else 6000000
SEED = int(sys.argv[3]) if len(sys.argv) > 3 else 1
MASK = 0xFFFFFFFFFFFFFFFF
A, C = 6364136223846793005, 1442695040888963407
ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


def main():
    state = (SEED * A + C) & MASK
    table = {}
    for i in range(KEYS):
        state = (state * A + C) & MASK
        r = state >> 33
        n = 4 + r % 37
        table["key:%d" % i] = ALPHABET[r % 36] * n
    total = 0
    rewritten = 0
    for _ in range(LOOKUPS):
        state = (state * A + C) & MASK
        r = state >> 33
        key = "key:%d" % (r % KEYS)
        value = table[key]
        total += len(value) + ord(value[0])
        if r & 15 == 0:
            table[key] = value[1:] + value[0] if len(value) > 4 else value + "x"
            rewritten += 1
    print("keys=%d lookups=%d" % (len(table), LOOKUPS))
    print("checksum=%d rewritten=%d" % (total, rewritten))
    print("last=%s" % table["key:%d" % (KEYS - 1)])


main()

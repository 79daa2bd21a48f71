"""The generated inputs of the real programs: an SQL script, a git history, a Redis data set.

Each generator is a pure function of its size parameters and a seed, driven by the same
64-bit LCG as bench/programs/churn.{lua,py,pl} (not Python's `random`, whose methods may
change between versions), so the same arguments give byte-identical text on any machine.
"""

MASK64 = (1 << 64) - 1
SYLLABLES = ("ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "ze", "vu", "an", "or")


class Lcg:
    """The seeded generator: next(n) is 1..n, as in the churn scripts."""

    def __init__(self, seed):
        self.state = (seed * 6364136223846793005 + 1442695040888963407) & MASK64

    def next(self, n):
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) & MASK64
        return (self.state >> 33) % n + 1

    def word(self, max_syllables=4):
        return "".join(SYLLABLES[self.next(len(SYLLABLES)) - 1] for _ in range(self.next(max_syllables) + 1))


# ---- SQLite ----------------------------------------------------------------------------

CITIES = 23
CATEGORIES = 11


def sql_script(orders, seed=1):
    """A script for `sqlite3 :memory:`: three tables filled with multi-row INSERTs in one
    transaction (ORDERS orders, ORDERS/8 customers, ORDERS/40 products), indexes, joins
    with GROUP BY, an UPDATE of text, a temporary table joined with itself, DELETEs and a
    recursive CTE. Every SELECT orders its rows completely, so the output is unique."""
    rng = Lcg(seed)
    customers, products = max(8, orders // 8), max(4, orders // 40)
    out = ["PRAGMA cache_size = -16384;",
           "CREATE TABLE customer(id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL, "
           "segment TEXT NOT NULL, joined INTEGER NOT NULL);",
           "CREATE TABLE product(id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT NOT NULL, "
           "price INTEGER NOT NULL);",
           "CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL, "
           "product_id INTEGER NOT NULL, qty INTEGER NOT NULL, day INTEGER NOT NULL, note TEXT NOT NULL);",
           "BEGIN;"]

    def inserts(table, count, row):
        for start in range(1, count + 1, 100):
            values = ",".join(row(i) for i in range(start, min(count, start + 99) + 1))
            out.append("INSERT INTO %s VALUES %s;" % (table, values))

    inserts("customer", customers, lambda i: "(%d,'%s %s','city%02d','%s',%d)" % (
        i, rng.word().capitalize(), rng.word().capitalize(), rng.next(CITIES),
        ("retail", "trade", "online", "public")[rng.next(4) - 1], 1000 + rng.next(3000)))
    inserts("product", products, lambda i: "(%d,'%s','cat%02d',%d)" % (
        i, "-".join(rng.word() for _ in range(rng.next(3))), rng.next(CATEGORIES), 100 + rng.next(9900)))
    inserts("orders", orders, lambda i: "(%d,%d,%d,%d,%d,'%s')" % (
        i, rng.next(customers), rng.next(products), rng.next(9), rng.next(365),
        " ".join(rng.word() for _ in range(rng.next(6)))))
    out += [
        "COMMIT;",
        "CREATE INDEX orders_customer ON orders(customer_id);",
        "CREATE INDEX orders_product_day ON orders(product_id, day);",
        "CREATE INDEX customer_city ON customer(city, name);",
        "SELECT c.city, count(*), sum(o.qty * p.price) FROM orders o JOIN customer c ON c.id = o.customer_id "
        "JOIN product p ON p.id = o.product_id GROUP BY c.city ORDER BY c.city;",
        "SELECT p.category, count(DISTINCT o.customer_id), max(o.qty), sum(o.qty) FROM orders o "
        "JOIN product p ON p.id = o.product_id GROUP BY p.category ORDER BY p.category;",
        "SELECT c.segment, o.day % 7, count(*), sum(o.qty) FROM orders o JOIN customer c ON c.id = o.customer_id "
        "GROUP BY 1, 2 ORDER BY 1, 2;",
        "SELECT c.id, c.name, sum(o.qty * p.price) AS spend FROM orders o JOIN customer c ON c.id = o.customer_id "
        "JOIN product p ON p.id = o.product_id GROUP BY c.id ORDER BY spend DESC, c.id LIMIT 10;",
        "UPDATE orders SET note = note || '/' || upper(substr(note, 1, 4)) || '/' || customer_id WHERE id % 5 = 0;",
        "SELECT count(*), sum(length(note)), min(note), max(note) FROM orders;",
        "CREATE TEMP TABLE daily AS SELECT day, product_id, sum(qty) AS q FROM orders GROUP BY day, product_id;",
        "SELECT count(*), sum(a.q * b.q) FROM daily a JOIN daily b ON b.product_id = a.product_id "
        "AND b.day = a.day + 1;",
        "DELETE FROM orders WHERE qty = 3 OR note LIKE '%ka%ze%';",
        "SELECT count(*), sum(qty), sum(length(note)) FROM orders;",
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %d) "
        "INSERT INTO orders(customer_id, product_id, qty, day, note) "
        "SELECT 1 + i * 7 %% %d, 1 + i * 13 %% %d, 1 + i %% 9, 1 + i %% 365, printf('gen-%%d-%%s', i, hex(i * i)) FROM n;"
        % (orders // 2, customers, products),
        "SELECT p.category, c.city, count(*), sum(o.qty) FROM orders o JOIN product p ON p.id = o.product_id "
        "JOIN customer c ON c.id = o.customer_id WHERE c.city IN ('city01', 'city07', 'city13') "
        "GROUP BY 1, 2 ORDER BY 1, 2;",
        "SELECT count(*), count(DISTINCT note), sum(length(note)) FROM orders;",
        "DROP TABLE daily;",
        "DROP INDEX orders_product_day;",
        "SELECT count(*) FROM orders o WHERE NOT EXISTS (SELECT 1 FROM customer c WHERE c.id = o.customer_id);",
    ]
    return "\n".join(out) + "\n"


# ---- git -------------------------------------------------------------------------------

GIT_EPOCH = 1700000000  # the first commit's date; each next one is 97 seconds later
HOT_FILE = "src/core.txt"  # changed by most commits; the one `git blame` reads


def _code_line(rng):
    return "%s_%s(%s) = %d; # %s" % (rng.word(3), rng.word(2), ", ".join(rng.word(2) for _ in range(rng.next(3))),
                                     rng.next(10000), rng.word())


def git_fast_import(commits, files=40, seed=1):
    """A `git fast-import` stream: COMMITS commits on refs/heads/main over FILES text
    files (plus HOT_FILE), each commit changing HOT_FILE (most of the time) and one to
    three other files by replacing, inserting and deleting lines, with fixed author and
    committer dates. Returns bytes."""
    rng = Lcg(seed)
    names = [HOT_FILE] + ["%s/%s_%02d.txt" % (("lib", "doc", "tools", "tests")[i % 4], rng.word(2), i)
                          for i in range(files)]
    contents = {name: [_code_line(rng) for _ in range(40 + rng.next(60))] for name in names}
    chunks = []

    def data(text):
        raw = text.encode()
        chunks.append(b"data %d\n" % len(raw))
        chunks.append(raw)
        chunks.append(b"\n")

    for n in range(1, commits + 1):
        when = GIT_EPOCH + 97 * n
        changed = [HOT_FILE] if n == 1 or rng.next(10) <= 8 else []
        if n == 1:
            changed = list(names)
        else:
            for _ in range(rng.next(3)):
                name = names[1 + rng.next(files) - 1]
                if name not in changed:
                    changed.append(name)
        for name in changed:
            lines = contents[name]
            if n > 1:
                for _ in range(1 + rng.next(4)):
                    op, at = rng.next(10), rng.next(len(lines)) - 1
                    if op <= 5:
                        lines[at] = _code_line(rng)
                    elif op <= 8 or len(lines) < 20:
                        lines[at:at] = [_code_line(rng) for _ in range(rng.next(3))]
                    else:
                        del lines[at:at + rng.next(2)]
        chunks.append(b"commit refs/heads/main\nmark :%d\n" % n)
        chunks.append(b"author A U Thor <author@example.invalid> %d +0000\n" % when)
        chunks.append(b"committer C O Mitter <committer@example.invalid> %d +0000\n" % when)
        data("change %d: %s %s\n\n%s\n" % (n, rng.word(), rng.word(), " ".join(rng.word() for _ in range(rng.next(12)))))
        if n > 1:
            chunks.append(b"from :%d\n" % (n - 1))
        for name in sorted(changed):
            chunks.append(b"M 100644 inline %s\n" % name.encode())
            data("\n".join(contents[name]) + "\n")
        chunks.append(b"\n")
    return b"".join(chunks)


# ---- Redis -----------------------------------------------------------------------------

def _resp(*args):
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        raw = a if isinstance(a, bytes) else str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(parts)


def redis_dataset(keys, seed=1):
    """(commands, checks) for database 0 of a Redis server.

    commands: RESP bytes for `redis-cli --pipe`: KEYS strings of 8..600 bytes, KEYS/8
    hashes (some past the listpack limit of 128 fields), lists, sets and sorted sets, then
    appends, increments and deletions that churn part of them.
    checks: the text for `redis-cli` (one command a line) that reads back DBSIZE and a
    deterministic sample of values; none of them depends on hash order."""
    rng = Lcg(seed)
    groups = max(1, keys // 8)
    cmds = []
    for i in range(keys):
        cmds.append(_resp("SET", "hk:str:%d" % i, rng.word() * (1 + rng.next(100))))
    for i in range(groups):
        fields = 4 + rng.next(40) if rng.next(10) > 1 else 130 + rng.next(100)
        args = ["HSET", "hk:hash:%d" % i]
        for f in range(fields):
            args += ["f%d" % f, "%s:%d" % (rng.word(), rng.next(100000))]
        cmds.append(_resp(*args))
        cmds.append(_resp("RPUSH", "hk:list:%d" % i, *[rng.word() * rng.next(8) for _ in range(5 + rng.next(200))]))
        cmds.append(_resp("SADD", "hk:set:%d" % i, *["m%d" % rng.next(5000) for _ in range(3 + rng.next(150))]))
        zargs = ["ZADD", "hk:zset:%d" % i]
        for m in range(3 + rng.next(150)):
            zargs += [rng.next(100000), "z%d-%s" % (m, rng.word())]
        cmds.append(_resp(*zargs))
    for i in range(0, keys, 3):
        cmds.append(_resp("APPEND", "hk:str:%d" % i, "+" + rng.word() * rng.next(30)))
    for i in range(0, keys, 7):
        cmds.append(_resp("DEL", "hk:str:%d" % i))
    for i in range(0, groups, 5):
        cmds.append(_resp("LTRIM", "hk:list:%d" % i, 2, 40))
        cmds.append(_resp("INCRBY", "hk:counter:%d" % i, rng.next(1000)))
        cmds.append(_resp("HDEL", "hk:hash:%d" % i, "f1", "f2", "f3"))

    checks = ["DBSIZE"]
    for _ in range(40):
        i = rng.next(keys) - 1
        checks += ["GET hk:str:%d" % i, "STRLEN hk:str:%d" % i]
    for _ in range(20):
        g = rng.next(groups) - 1
        checks += ["HLEN hk:hash:%d" % g, "HGET hk:hash:%d f%d" % (g, rng.next(40)),
                   "LLEN hk:list:%d" % g, "LRANGE hk:list:%d 0 4" % g, "LINDEX hk:list:%d -1" % g,
                   "SCARD hk:set:%d" % g, "SISMEMBER hk:set:%d m%d" % (g, rng.next(5000)),
                   "ZCARD hk:zset:%d" % g, "ZRANGE hk:zset:%d 0 3 WITHSCORES" % g,
                   "GET hk:counter:%d" % g]
    return b"".join(cmds), "\n".join(checks) + "\n"

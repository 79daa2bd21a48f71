import re, statistics, sys, collections
rows = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    m = re.match(r'round=(\d+) lib=(\S+) .*ops_per_sec=([0-9.e+]+).*rss_after_continue_kib=(\d+)', line)
    if m: rows[int(m[1])][m[2]] = (float(m[3]), int(m[4]))
libs = ['default', 'nopurge', 'mimalloc']
print('| figure | ' + ' | '.join(libs) + ' |')
print('|---|---|---|---|')
print('| median ops/s | ' + ' | '.join('%.3g' % statistics.median(r[l][0] for r in rows.values()) for l in libs) + ' |')
print('| median RSS after phase 3, KiB | ' + ' | '.join('%d' % statistics.median(r[l][1] for r in rows.values()) for l in libs) + ' |')
for a, b in [('default', 'mimalloc'), ('nopurge', 'mimalloc'), ('default', 'nopurge')]:
    rs = [r[a][0] / r[b][0] for r in rows.values()]
    print('%s / %s: median %.3f over %d rounds, ahead in %d' % (a, b, statistics.median(rs), len(rs), sum(x > 1 for x in rs)))

#!/usr/bin/env python3
"""Size and sentence lengths of a Markdown file's prose (code blocks, tables and headings
left out; a blank line, a code block or a list item ends a sentence).
usage: tools/prose_stats.py FILE.md"""
import re, statistics, sys
text = open(sys.argv[1]).read()
paras, cur, fence = [], [], False
for line in text.split("\n"):
    if line.startswith("```"):
        fence = not fence
    elif not fence and line.strip() and not line.startswith(("|", "#")):
        if line.startswith("- ") and cur: paras.append(" ".join(cur)); cur = []
        cur.append(line.strip()); continue
    if cur: paras.append(" ".join(cur)); cur = []
if cur: paras.append(" ".join(cur))
n = [len(s.split()) for p in paras for s in re.split(r"(?<=[.!?])\s+", p) if s.strip("-* ")]
print("bytes %d, sentences %d, median %s words, mean %.1f, longest %d"
      % (len(text.encode()), len(n), statistics.median(n), statistics.mean(n), max(n)))

#!/usr/bin/python3
"""Every OpenMP loop's size threshold is OP_PAR_MIN (model/ops.h), so that a build with
-DOP_PAR_MIN=1 splits every loop over the threads (issue 20): the if clause of each
`#pragma omp parallel` directive in model/, harvest/, io/ and jobs/ is conditions `COUNT > 1` (a
thread count) and `SIZE >= OP_PAR_MIN` (ops.c: its alias PAR_MIN) joined by &&, never a hard-coded
threshold such as (1 << 14). Reads the sources only; the harvest argument is unused."""
import glob, os, re, sys

from util import args, check, finish

args()
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def directives(path):
    """(line, text) of each `#pragma omp parallel`, its backslash continuations joined"""
    lines = open(path).read().split("\n")
    i = 0
    while i < len(lines):
        start, text = i, lines[i]
        while text.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text.rstrip()[:-1] + " " + lines[i]
        if re.match(r"\s*#\s*pragma\s+omp\s+parallel\b", text):
            yield start + 1, text
        i += 1


def if_clause(text):
    """the condition of the directive's if (...) clause, or None"""
    m = re.search(r"\bif\s*\(", text)
    if not m:
        return None
    depth, j = 1, m.end()
    while j < len(text) and depth:
        depth += {"(": 1, ")": -1}.get(text[j], 0)
        j += 1
    return text[m.end():j - 1]


n = 0
for d in ("model", "harvest", "io", "jobs"):
    for path in sorted(glob.glob(os.path.join(root, d, "**", "*.c"), recursive=True)):
        for line, text in directives(path):
            n += 1
            cond = if_clause(text)
            if cond is None:
                continue
            where = f"{os.path.relpath(path, root)}:{line}: if ({cond})"
            for part in cond.split("&&"):  # a thread count, or a size against OP_PAR_MIN
                part = part.strip()
                check(re.fullmatch(r"\w+ > 1", part) or
                      re.fullmatch(r"(?:->|[^<>=])+ >= (OP_)?PAR_MIN", part),
                      f"{where}: {part!r} is neither `COUNT > 1` nor `SIZE >= OP_PAR_MIN`")
ops = open(os.path.join(root, "model", "ops.c")).read()
check(re.search(r"#define PAR_MIN OP_PAR_MIN\b", ops), "model/ops.c: PAR_MIN is OP_PAR_MIN")
check(n >= 20, f"only {n} parallel directives found")
print(n, "parallel directives")
finish()

#!/usr/bin/env python3
"""The include graph between the folders of src/ (tests left out): each
arrow with its file count, then any cycle and any arrow that runs up the
layers below (a part may include only parts under it).

    python3 scripts/include_graph.py [REPO]    # exit 1 on a cycle or an upward arrow
"""
import pathlib
import re
import sys

# Lowest first: each part may include only those before it.
LAYERS = ["common", "catalog", "loader", "cache", "sampling", "jobs", "fs", "daemon"]
SUPPORT = {"testing"}  # test helpers, above everything they include


def edges(src: pathlib.Path) -> dict:
    out: dict = {}
    for f in src.rglob("*"):
        if f.suffix not in (".h", ".cc") or f.name.endswith("_test.cc"):
            continue
        part = f.relative_to(src).parts[0]
        for m in re.finditer(r'#include "([a-z_]+)/', f.read_text()):
            if m.group(1) != part:
                out.setdefault((part, m.group(1)), set()).add(f)
    return out


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    graph = edges(root / "src")
    for (a, b), files in sorted(graph.items()):
        print(f"{a} -> {b}  ({len(files)} files)")
    adj: dict = {}
    for a, b in graph:
        adj.setdefault(a, set()).add(b)

    def reaches(a: str, b: str, seen: frozenset = frozenset()) -> bool:
        return any(c == b or (c not in seen and reaches(c, b, seen | {c}))
                   for c in adj.get(a, ()))

    cycles = sorted({tuple(sorted(e)) for e in graph if reaches(e[1], e[0])})
    upward = [(a, b) for a, b in graph if a not in SUPPORT
              and a in LAYERS and b in LAYERS and LAYERS.index(b) > LAYERS.index(a)]
    print("cycles:", cycles or "none")
    print("upward:", sorted(upward) or "none")
    return 1 if cycles or upward else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The include graph between the folders of src/ (tests left out): each
arrow with its file count, then any cycle and any arrow that runs up the
layers below (a part may include only parts under it). Then how many of
the project's headers the widest ones reach, and any header that reaches
RocksDB's: only common/rocksdb_support.h may include them, so that RocksDB
stays behind the .cc files that use it (the rest hold rocksdb::DB through
forward declarations).

The layers (LAYERS, lowest first) put under jobs/ what the streams' state
machine uses and does not drive: the stream's wire format (records/), the
texts users write to a job (spec/), the pacing policies that need no lane
(pacing/) and the jobs' persistence (store/); the control files' protocol
(control/), which calls the job manager, sits between jobs/ and fs/.

    python3 scripts/include_graph.py [REPO]    # exit 1 on a cycle, an upward
                                               # arrow or RocksDB in a header
"""
import pathlib
import re
import sys

# Lowest first: each part may include only those before it.
LAYERS = ["common", "catalog", "loader", "cache", "sampling", "records", "spec", "pacing", "store",
          "jobs", "control", "fs", "daemon"]
SUPPORT = {"testing"}  # test helpers, above everything they include
# The one header that may include RocksDB's, and the headers whose reach is
# shown (the FUSE layer and the job manager sit on top of everything else).
ROCKSDB_HEADER = "common/rocksdb_support.h"
REACH_SHOWN = ["jobs/job_manager.h", "fs/filesystem.h"]


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


def header_includes(src: pathlib.Path) -> tuple:
    """Per project header (test support left out): the project headers it
    includes, and whether it includes a RocksDB header itself."""
    includes, rocksdb = {}, set()
    for f in src.rglob("*.h"):
        name = str(f.relative_to(src))
        if name.split("/")[0] in SUPPORT:
            continue
        text = f.read_text()
        includes[name] = set(re.findall(r'#include "([a-z_]+/[a-z_0-9]+\.h)"', text))
        if re.search(r"#include <rocksdb/", text):
            rocksdb.add(name)
    return includes, rocksdb


def reach(includes: dict, header: str) -> set:
    """The project headers `header` includes, directly or through others."""
    seen, todo = set(), [header]
    while todo:
        for h in includes.get(todo.pop(), ()):
            if h not in seen:
                seen.add(h)
                todo.append(h)
    return seen


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

    includes, direct = header_includes(root / "src")
    for header in REACH_SHOWN:
        print(f"{header} reaches {len(reach(includes, header))} of {len(includes)} headers")
    rocksdb = sorted(h for h in includes if h != ROCKSDB_HEADER and
                     (h in direct or (direct & reach(includes, h))))
    print("headers reaching RocksDB's besides", ROCKSDB_HEADER + ":", rocksdb or "none")
    return 1 if cycles or upward or rocksdb else 0


if __name__ == "__main__":
    sys.exit(main())

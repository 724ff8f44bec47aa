"""The recipes' ``--log``: what a run trained on, as JSON lines, for the
tests that kill a recipe and run it again (python/tests/test_recipes.py)."""

from __future__ import annotations

import json
import threading


def json_lines(path: str | None):
    """``log(**fields)`` appends one JSON line to ``path``, or does nothing
    without one.  Each line is written whole as it is logged (a killed run
    leaves every line it logged), from any thread."""
    if path is None:
        return lambda **fields: None
    out = open(path, "a", buffering=1)
    lock = threading.Lock()

    def log(**fields) -> None:
        with lock:
            out.write(json.dumps(fields) + "\n")
    return log

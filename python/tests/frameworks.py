"""The frameworks a client test needs: imported if installed, the test
skipped if not, unless $JOADERFS_REQUIRE_FRAMEWORKS names them
(comma-separated; ctest sets it for the test venv, where every one is
installed): then the import error fails the test.  A module of its own, so
that importing ``framework`` imports no framework."""

from __future__ import annotations

import importlib
import os

REQUIRED = set(filter(None, os.environ.get(
    "JOADERFS_REQUIRE_FRAMEWORKS", "").split(",")))


def framework(name: str):
    """The module, or None (the test skips) where it is not installed and
    not required."""
    try:
        return importlib.import_module(name)
    except ImportError:
        if name in REQUIRED:
            raise
        return None

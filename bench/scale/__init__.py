"""Decode-once at scale: RAM tier at 5-20% of the decoded set."""

"""Costs of the cache tiers and of the job store."""

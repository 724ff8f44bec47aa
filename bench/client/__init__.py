"""Costs of the Python client, and end-to-end training through it."""

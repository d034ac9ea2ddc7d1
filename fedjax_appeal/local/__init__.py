"""Local stage: what one client computes.

client (local update, loss reports), solo (local-only models).
"""

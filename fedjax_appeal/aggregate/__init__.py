"""Aggregation stage: from the cohort's updates to the server's step.

aggregation (weight rules), server (optimizers), adversary (the Byzantine hook).
"""

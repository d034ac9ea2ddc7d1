"""Executors of a round's cohort: chunks of clients and device sharding.

cohort (chunks of clients), distributed (mesh, multi-process), stderr_filter (its helper).
"""

"""Executors of a round's cohort: chunks of clients and device sharding.

executor (`Executor`, the `core.parts.CohortExecutor` that rounds run with), cohort (chunks
of clients), distributed (mesh, multi-process), stderr_filter (its helper).
"""

"""Exp-alpha aggregation tables and their metrics."""

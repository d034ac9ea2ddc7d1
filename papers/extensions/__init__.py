"""Studies beyond the paper tables: mean estimation, DP and compression."""

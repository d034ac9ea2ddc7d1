"""Client selection tables (SubTrunc / UnionFL paper)."""

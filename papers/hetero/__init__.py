"""FedNova and FedBuff tables (heterogeneous local work, asynchrony)."""

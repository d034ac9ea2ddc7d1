"""MaxFL (Cho et al., TMLR) and IncFL appeal tables and their hyperparameter search."""

"""Experiments of the seed papers.

mean_estimation (MaxFL's toy problem), reproduce (the paper tables).
"""

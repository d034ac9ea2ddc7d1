"""Selection stage: which clients train in a round.

selection (samplers), selectors (loss/diversity-aware), submodular (greedy).
"""

"""Evaluation stage: every client's loss and accuracy, and summaries of them.

evaluation, metrics, expalpha_metrics, personal (personalised evaluation).
"""

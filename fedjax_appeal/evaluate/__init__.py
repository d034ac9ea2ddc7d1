"""Evaluation stage: every client's loss and accuracy, and summaries of them.

evaluation, metrics, expalpha_metrics (per-group test accuracy of tagged clients), personal
(personalised evaluation).
"""

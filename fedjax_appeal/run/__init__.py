"""Running: one run, a batch of runs, and what they write.

simulate, loop, sweep, assemble, experiment, validate, checkpoint, report, export, tracking.
"""

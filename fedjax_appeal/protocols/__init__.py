"""Protocols wrapped around any algorithm.

appeal (MaxFL's appeal protocol).
"""

"""The appeal protocol of MaxFL.

appeal (the wrapper and its metrics), requirement (client requirements rho_k).
"""

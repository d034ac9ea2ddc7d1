"""The round's core: configuration, errors, name registries, the round itself.

config, errors, registry, parts (the round's types), round, memory (budgets), models.
"""

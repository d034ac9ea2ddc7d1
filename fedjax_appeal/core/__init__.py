"""The round's core: configuration, errors, name registries, the round itself.

config, errors, registry, arrays (client data on device), parts (the round's types), round,
memory (budgets), models. Nothing here imports another subpackage of fedjax_appeal.
"""

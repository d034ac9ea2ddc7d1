"""Several devices: a `Mesh` with one axis `clients` over which the cohort is sharded.

The cohort axis is the natural shard axis. Inside a round (see `round.make_round`), the
cohort's indices, keys and everything the clients send back carry a
`NamedSharding(mesh, P("clients"))` constraint, so each device runs the local updates of
m / D clients; the server state, the hyperparameters and the client data are replicated
(`NamedSharding(mesh, P())`), and XLA inserts the cross-device reductions of the weighted
average. Sweeps may instead place the sweep axis on the mesh (`shard_leading`).

On one device (or `devices=1`) no mesh is made and nothing changes. Multi-host: call
`jax.distributed.initialize()` in every process before anything else touches JAX; then
`jax.devices()` lists the devices of all hosts and `make_mesh(0)` spans them all.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .config import ConfigError

AXIS = "clients"


def make_mesh(devices: int = 0) -> Mesh | None:
    """A 1-D mesh over the first `devices` devices (0 = all); None for a single device."""
    avail = jax.devices()
    if devices < 0:
        raise ConfigError(f"--devices must be >= 0 (got {devices})")
    if devices > len(avail):
        raise ConfigError(f"--devices {devices} but only {len(avail)} device(s) are visible; "
                          "lower --devices (0 = all)")
    n = len(avail) if devices == 0 else devices
    if n <= 1:
        return None
    return Mesh(np.array(avail[:n]), (AXIS,))


def replicate(tree, mesh: Mesh | None):
    """Put every array of `tree` on all devices of the mesh (no-op without a mesh)."""
    if mesh is None:
        return tree
    return jax.device_put(tree, NamedSharding(mesh, PartitionSpec()))


def shard_leading(tree, mesh: Mesh | None):
    """Split the leading axis of every array of `tree` over the mesh axis `clients`."""
    if mesh is None:
        return tree
    return jax.device_put(tree, NamedSharding(mesh, PartitionSpec(AXIS)))


def constrain_cohort(tree, mesh: Mesh | None):
    """Inside jit: the leading (cohort) axis of every array is sharded over `clients`."""
    if mesh is None:
        return tree
    spec = NamedSharding(mesh, PartitionSpec(AXIS))

    def one(a):
        if not hasattr(a, "ndim") or a.ndim == 0:
            return a
        if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            return jax.random.wrap_key_data(
                jax.lax.with_sharding_constraint(jax.random.key_data(a), spec),
                impl=jax.random.key_impl(a))
        return jax.lax.with_sharding_constraint(a, spec)

    return jax.tree.map(one, tree)

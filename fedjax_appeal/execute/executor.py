"""`Executor`: the package's `core.parts.CohortExecutor`, set by three numbers.

One vmap over the cohort, `lanes` clients side by side with the groups in a `lax.map`,
chunks of clients in one or two passes (`cohort`), and the cohort axis sharded over a
device mesh (`distributed`). `compose` and `build` make one from a `RunConfig`
(`--client-chunk`, `--client-lanes`, `--devices`); `make_round` runs the cohort with it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..core.capabilities import capable
from ..core.fields import option
from ..core.parts import ClientUpdate, CohortJob, LocalFn, WeightFn
from . import cohort
from .distributed import constrain_cohort, over_rows, own_program


def for_each_client(local: LocalFn, lanes: int = 0, mesh=None):
    """`local(state, data, k, key, hp)` over the cohort (`k`, `key` stacked [m]): `lanes`
    clients side by side in a vmap, the groups of lanes in turn in a `lax.map` (0 or >= m:
    one vmap over all m).

    With a `mesh` of D devices and lanes > 0, each device takes m / D consecutive clients
    and runs them `lanes` at a time (`distributed.per_device`; as a program of its own
    where the model has a large parameter array, `distributed.own_program`); a cohort
    that D does not divide runs as one sharded vmap instead. See `over_rows`.
    """

    def run(state, data, idx, keys, hp):
        own = own_program(getattr(state, "params", None))
        return over_rows(lambda r, s: local(s[0], s[1], r[0], r[1], s[2]), (idx, keys), lanes,
                         mesh, shared=(state, data, hp), own=own)

    return run


# How a cohort's local updates run (for the algorithms that run their cohort through the
# shared executor; `execute/layout.py` declares `devices`)
SHARED_EXECUTOR = capable("layouts", "{alg} does not use the shared executor", "drop "
                          "--client-lanes, --client-chunk and --devices", unless=lambda cfg: (
                              cfg.client_lanes == 0 and cfg.client_chunk <= 0
                              and cfg.devices == 1))
option("client_chunk", 0, "the cohort's local updates in chunks of this many clients (0 = auto, "
       "by the memory budget; -1 = never)", group="scale",
       ge=-1, hint="0 = auto, -1 = never", needs=SHARED_EXECUTOR)
option("client_lanes", 0, "clients trained side by side in one vmap, the rest in a loop of the "
       "same program (per device)", group="scale", ge=0,
       hint="0 = the whole cohort in one vmap", needs=SHARED_EXECUTOR)


class Executor(NamedTuple):
    """How a round runs its cohort's local updates (a `core.parts.CohortExecutor`).

    client_chunk: > 0 runs the cohort in chunks of that many clients (one or two passes, see
      `cohort`); 0 chunks only when the cohort's copies of the model exceed the memory
      budget (`memory.memory_budget`); -1 always runs one `vmap` over the whole cohort.
    mesh: a `distributed` mesh whose devices share the cohort axis (None = one device).
    lanes: in an unchunked round, how many clients train side by side in one `vmap`; the
      groups of `lanes` follow one another in a `lax.map` inside the same program (one
      pass, same results up to float reassociation). 0 = the whole cohort in one vmap (the
      faster layout measured for the MLP round on a 2-core CPU, see benchmarks/RESULTS.md;
      narrow lanes bound the working set of large models). With a mesh of D devices, each
      device runs its m / D clients `lanes` at a time (see `for_each_client`).
    The default, `Executor()`, is the automatic single-device round.
    """

    client_chunk: int = 0
    mesh: Any = None
    lanes: int = 0

    def chunk(self, m: int, params: Any) -> int:
        """Clients per chunk for a cohort of m (0 = unchunked), see `cohort.chunk_size`."""
        return cohort.chunk_size(self.client_chunk, m, params)

    def each(self, job: CohortJob) -> ClientUpdate:
        """Every client's update in one program step: the cohort's indices, keys and
        updates are sharded over the mesh (if any), `lanes` clients run side by side, and
        `job.corrupt` sees the whole cohort."""
        idx, keys = constrain_cohort((job.idx, job.keys), self.mesh)
        upd = for_each_client(job.local, self.lanes, self.mesh)(job.state, job.data, idx, keys,
                                                                 job.hp)
        upd = constrain_cohort(upd, self.mesh)
        if job.corrupt is not None:
            upd = job.corrupt(upd, job.idx, job.valid, job.k_adv, job.data, job.hp)
        return upd

    # The fields of a `CohortJob` are, in order, the leading arguments of the passes in
    # `cohort`: (local, corrupt, state, data, idx, keys, valid, k_adv, hp).

    def statistics(self, job: CohortJob, c: int) -> ClientUpdate:
        """Pass 1 of a chunked round (`cohort.chunked_statistics`)."""
        return cohort.chunked_statistics(*job, c)

    def weighted_delta(self, job: CohortJob, w, c: int):
        """Pass 2 of a chunked round (`cohort.chunked_weighted_delta`)."""
        return cohort.chunked_weighted_delta(*job, w, c)

    def one_pass(self, job: CohortJob, logits: WeightFn, c: int):
        """A chunked round of a softmax weight rule (`cohort.chunked_one_pass`)."""
        return cohort.chunked_one_pass(*job, logits, c)


AUTO = Executor()  # automatic chunking, one device
VMAP = Executor(client_chunk=-1)  # always one vmap over the whole cohort


def chunked(clients: int) -> Executor:
    """Chunks of `clients` clients (one or two passes, see `cohort`)."""
    return Executor(client_chunk=clients)


def sharded(mesh, client_chunk: int = 0) -> Executor:
    """The cohort axis sharded over `mesh` (see `distributed.make_mesh`)."""
    return Executor(client_chunk=client_chunk, mesh=mesh)

"""The one place that turns a `RunConfig` into what a run needs: data, model, algorithm.

`experiment.run_config` (the `run` command and `reproduce`) and `sweep.sweep` both call
`assemble`, so a configuration means the same composition wherever it runs: the data
loaded and partitioned from `cfg` (seeded), the model `cfg.model` for those data (with the
convolution its layout resolves, `layout.conv_impl_for`), the
registered algorithm `cfg.algorithm` with its executor (`cfg.client_chunk`, the given mesh)
and, with `cfg.appeal`, the appeal protocol of MaxFL around it (`appeal.with_appeal`).
"""

from __future__ import annotations

import time
from typing import NamedTuple

from ..algorithms import FederatedAlgorithm, build
from ..core.arrays import FederatedData
from ..core.config import RunConfig
from ..core.memo import shared
from ..core.models import Model, model_for
from ..data import Dataset, load_federated
from ..execute.executor import Executor
from ..execute.layout import conv_impl_for
from ..execute.programs import arrays_digest
from ..protocols.appeal import appeal
from ..protocols.appeal.appeal import with_appeal
from ..protocols.appeal.requirement import appeal_on

# `with_appeal`, one algorithm per value of its arguments (`core.memo.shared`; `build`
# returns one per configuration): runs that differ only in their seed share its functions,
# so JAX traces, lowers and compiles their programs once
appealed = shared(with_appeal)


class Assembled(NamedTuple):
    alg: FederatedAlgorithm
    model: Model
    data: FederatedData
    dataset: Dataset | None
    load_s: float  # seconds spent loading the data (0 when they were given)


def assemble(cfg: RunConfig, *, data: FederatedData | None = None,
             dataset: Dataset | None = None, mesh=None, model: Model | None = None
             ) -> Assembled:
    """Data (unless given), model, algorithm (+ appeal protocol) of `cfg`.

    Args:
      cfg: the run's configuration (validated by the caller).
      data, dataset: an already loaded federation of `cfg` (several algorithms, one
        partition); None loads it.
      mesh: the run's `distributed` mesh (built once by the caller), over which the cohort
        is sharded; None = one device.
      model: the model of `cfg` for these data, when the caller built it already (the
        command line builds it for its header); None builds it.
    """
    t0 = time.perf_counter()
    if data is None:
        data, dataset = load_federated(cfg)
    load_s = time.perf_counter() - t0
    devices = 1 if mesh is None else int(mesh.devices.size)
    if model is None:  # (a caller that built it for its header passes it)
        model = model_for(cfg.model, data, dataset, conv_impl_for(cfg, devices),
                          cfg.precision)
    alg = build(cfg.algorithm, model, cfg,
                executor=Executor(cfg.client_chunk, mesh, cfg.client_lanes))
    if appeal_on(cfg):  # the appeal protocol around the algorithm
        alg = appealed(alg, model, cfg.view(appeal.OPTIONS, "the appeal protocol"))
    return Assembled(alg, model, data, dataset, load_s)


# RunConfig fields that never enter a compiled program (where results go, logging,
# checkpoint schedule): a program cache ignores them
OUTSIDE_PROGRAMS = ("out", "resume", "log", "checkpoint_every")


def program_context(cfg: RunConfig, model: Model, data: FederatedData) -> str:
    """What built the programs of `assemble(cfg)` (`execute.programs.ProgramCache`'s
    context): every field of `cfg` but `OUTSIDE_PROGRAMS`, the model as built (its flax
    module with every attribute: normalisation constants, convolution form, classes) and
    a digest of the federation's small arrays (labels, offsets, counts)."""

    fields = {k: v for k, v in cfg.as_dict().items() if k not in OUTSIDE_PROGRAMS}
    return repr((sorted(fields.items()), model.name, repr(model.module), model.input_shape,
                 str(model.input_dtype), model.objective, arrays_digest(data)))

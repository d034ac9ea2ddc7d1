"""The execution layout of a run or a sweep, decided in one place.

A layout says how many devices share the work and how each device runs its share:

* `cpu_split`: the host CPU made into this many JAX devices (`jax_num_cpu_devices`; 0
  leaves JAX's default of one). XLA:CPU runs a vmapped cohort's small batched matmuls on
  about one core, so a second core idles unless a second device gives it its own clients.
  The split must be made before JAX's first operation, so the command line decides it
  from the configuration alone (`cpu_split`).
* `devices`: the devices the cohort is sharded over (1 = one device, no mesh).
* `client_lanes`: how each device trains its clients: 0 = all in one vmap, L > 0 = L side
  by side, the rest following in a loop inside the same program.

`--layout auto` (the default) chooses all three from the cohort and the hardware; setting
any of `--devices`, `--client-lanes` or `--cpu-devices` (or `--layout manual`) takes the
layout as given instead. The rule (benchmarks/RESULTS.md, FedAvg MLP round on a 2-core
CPU: one device 0.98 s, cohort sharded over 2 CPU devices 0.54 s, and 0.38 s with one
client at a time per device):

* CPU: split the host into D devices, D the largest divisor of the cohort that is at most
  the number of cores the process may use, shard the cohort over them with one lane per
  device. A cohort that no such D > 1 divides (e.g. an odd cohort on 2 cores) keeps one
  device and an unsplit CPU, so it costs nothing.
* GPU/TPU: the largest divisor of the cohort among the visible devices, each device's
  share in one vmap (accelerators need the width).
* Several processes: every device of every process (`--devices 0`), as the multi-process
  runtime requires.

A sweep shards its grid, not the cohort (`run/sweep.py`): the same split of the CPU, a
mesh over every device, and its own `--lanes` rule.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import jax

from ..core.config import RunConfig, declarations
from ..core.conv import resolve_conv_impl
from ..core.errors import ConfigError
from ..core.fields import option, when
from ..core.models import convolutional
from ..data.pool import default_model
from .distributed import one_vmap, split_cpu
from .executor import SHARED_EXECUTOR

LAYOUTS = ("auto", "manual")
option("devices", 1, "devices to shard the cohort over (0 = all; setting it makes the layout "
       "manual)", group="scale", ge=0, hint="0 = all", needs=SHARED_EXECUTOR)
option("layout", "auto", "execution layout (execute/layout.py); manual = exactly --devices "
       "and --client-lanes", LAYOUTS,
       group="scale")


def model_of(cfg) -> str:
    """The model a run of `cfg` builds (`auto`: its dataset's)."""
    return default_model(cfg.dataset) if cfg.model == "auto" else cfg.model


option("conv_impl", "auto", "how convolutional models convolve (core/conv.py): xla (lax.conv), "
       "patches (im2col slices + matmul), patches_cf (the same, channels-first), winograd (3x3 "
       "stride-1 layers by Winograd F(4x4,3x3), others as patches_cf), pooled_cf / "
       "pooled_winograd (a layer followed by ReLU and 2x2 max-pooling as one product over the "
       "pooling windows, core/conv_pool.py; others as patches_cf / winograd) or the _train "
       "forms of these (that form in training, xla in evaluation: XLA on CPU runs a "
       "convolution's gradient inside a loop tens of times slower, benchmarks/RESULTS.md); "
       "auto = pooled_winograd_train on CPU (pooled_cf_train where a device trains several "
       "clients in one vmap), patches_train on GPU, xla elsewhere",
       ("auto", "xla", "patches", "patches_train", "patches_cf", "patches_cf_train", "winograd",
        "winograd_train", "pooled_cf", "pooled_cf_train", "pooled_winograd",
        "pooled_winograd_train"), group="algorithm", applies=when(
           lambda cfg: convolutional(model_of(cfg)),
           lambda cfg: f"it configures convolutional models, and --model {model_of(cfg)} has "
           "no convolution"))
# RunConfig fields a layout sets; giving any of them (or --cpu-devices) means "manual".
LAYOUT_FIELDS = ("devices", "client_lanes")


class Layout(NamedTuple):
    """A resolved execution layout (what `results.json` and the run header report)."""

    mode: str  # "auto" or "manual"
    devices: int  # devices the cohort is sharded over (1 = one device)
    client_lanes: int  # clients side by side per device (0 = one vmap)
    cpu_devices: int  # JAX devices of the backend the run uses
    backend: str  # jax.default_backend()
    why: str  # one line: how it was chosen

    def describe(self) -> str:
        lanes = ("one vmap per device" if self.client_lanes == 0 else
                 f"{self.client_lanes} client(s) at a time per device")
        where = (f"cohort sharded over {self.devices} {self.backend} devices, {lanes}"
                 if self.devices != 1 else f"one {self.backend} device, "
                 + ("one vmap" if self.client_lanes == 0 else
                    f"{self.client_lanes} client(s) at a time"))
        return f"layout {self.mode}: {where} ({self.why})"


def host_cores() -> int:
    """CPU cores this process may run on (its affinity mask; os.cpu_count() elsewhere)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def largest_divisor(n: int, limit: int) -> int:
    """The largest d <= limit that divides n (1 when n < 1 or limit < 1)."""
    for d in range(min(n, limit), 1, -1):
        if n % d == 0:
            return d
    return 1


def cpu_split(cohort: int, cores: int | None = None) -> int:
    """JAX CPU devices to make for a cohort under the automatic layout (0 = no split).

    Called before JAX runs (the command line), from the configuration alone.
    """
    d = largest_divisor(cohort, host_cores() if cores is None else cores)
    return d if d > 1 else 0


def auto_split(cohort: int) -> int:
    """Split the CPU for a cohort under the automatic layout, for a program that calls it
    before its first JAX operation; returns the devices to shard over (0 = one device).

    Where JAX already runs (the split can no longer change), the devices it has are used
    when two or more of them divide the cohort.
    """
    n = cpu_split(cohort)
    if n > 1:
        try:
            split_cpu(n)  # only CPU devices; an accelerator backend ignores it
        except ConfigError:
            pass
    d = largest_divisor(cohort, jax.device_count())
    return d if d > 1 else 0


def choose(cohort: int, *, backend: str | None = None, device_count: int | None = None,
           processes: int | None = None) -> tuple[int, int, str]:
    """(devices, client_lanes, why) of the automatic layout for a cohort, given the
    devices JAX sees (defaults: the running process's)."""
    backend = jax.default_backend() if backend is None else backend
    n = jax.device_count() if device_count is None else device_count
    procs = jax.process_count() if processes is None else processes
    if procs > 1:
        return 0, 1 if backend == "cpu" else 0, f"{procs} processes: every device"
    d = largest_divisor(cohort, n)
    if d == 1:
        cores = host_cores()
        if n == 1 and backend == "cpu" and cores > 1 and cpu_split(cohort, cores) == 0:
            why = (f"cohort {cohort} has no divisor in 2..{cores} (the host's cores), so the "
                   "CPU is not split")
        elif n == 1:
            why = f"only 1 {backend} device visible"
        else:
            why = f"no divisor of cohort {cohort} in 2..{n} devices"
        return 1, 0, why
    if backend == "cpu":
        return d, 1, f"cohort {cohort} split {cohort // d} per device over {d} CPU devices"
    return d, 0, f"cohort {cohort} split {cohort // d} per device over {d} devices"


def vmap_width(cohort: int, devices: int, lanes: int, client_chunk: int = 0) -> int:
    """How many of the cohort's clients one device trains side by side in one vmap (at
    most; a last group may be narrower), as `distributed.over_rows` (and a chunked round,
    `cohort.chunk_size`) runs them."""
    if 0 < client_chunk < cohort:  # chunks of that many clients, each chunk one vmap
        return client_chunk
    d = max(1, devices)
    return -(-cohort // d) if one_vmap(cohort, d, lanes) else lanes


def conv_impl_for(cfg, devices: int | None = None, backend: str | None = None) -> str:
    """The convolution a run of `cfg` builds its model with (`RunConfig.conv_impl`, with
    "auto" resolved by `core.conv.resolve_conv_impl` for the layout: a device that trains
    several clients in one vmap takes the vmapped form of its backend).

    Args:
      cfg: a `RunConfig` whose layout is resolved (`resolve_layout`).
      devices: the devices the cohort is sharded over (default: `cfg.devices`, 0 = all).
      backend: default `jax.default_backend()`.
    """
    if devices is None:
        devices = jax.device_count() if cfg.devices == 0 else cfg.devices
    width = vmap_width(cfg.cohort, devices, cfg.client_lanes, cfg.client_chunk)
    return resolve_conv_impl(cfg.conv_impl, backend, clients_vmapped=width > 1)


def resolve_layout(cfg, *, algorithm_layouts: bool = True):
    """(cfg with the layout fields filled in, Layout). The one place a run's layout is
    decided: `experiment.run_config` calls it before building the mesh and the executor.

    `layout="manual"` takes `devices`/`client_lanes` as given; so does `layout="auto"`
    with either set away from its default (the Python API's way of giving them), unless
    they are what the automatic rule itself chose (a configuration resolved before).

    Args:
      cfg: the run's `RunConfig`.
      algorithm_layouts: whether the algorithm runs its cohort through the shared executor
        (`Supports.layouts`); one that does not always gets one device.
    """
    backend = jax.default_backend()
    count = jax.device_count()
    given = (cfg.devices, cfg.client_lanes)

    def manual(why):
        devices = count if cfg.devices == 0 else cfg.devices
        return cfg, Layout("manual", devices, cfg.client_lanes, count, backend, why)

    if cfg.layout == "manual":
        return manual("as given")
    if not algorithm_layouts:
        if given != (1, 0):
            return manual("as given")
        return cfg, Layout("auto", 1, 0, count, backend,
                           f"{cfg.algorithm} runs its own cohort loop")
    devices, lanes, why = choose(cfg.cohort, backend=backend, device_count=count)
    default = {f.name: f.default for f in declarations(RunConfig)}
    defaults = (default["devices"], default["client_lanes"])
    if given not in (defaults, (devices, lanes)):
        return manual("--devices/--client-lanes given")
    shown = count if devices == 0 else devices
    return (cfg.replace(devices=devices, client_lanes=lanes),
            Layout("auto", shown, lanes, count, backend, why))

"""Run configuration: static choices (`RunConfig`) and vmappable hyperparameters (`HParams`).

The split follows the rule that everything which fixes array shapes or program structure
(dataset, model, number of clients, cohort size, local steps, batch size, ...) is static
and lives in `RunConfig`, while every scalar that only enters arithmetic (learning rates,
FedProx mu, MaxFL epsilon, Exp-alpha alpha, q, ...) lives in the `HParams` pytree. A sweep
over hyperparameters is then a `jax.vmap` over a stacked `HParams`.

Both dataclasses carry a `help` string per field; the command-line interface is generated
from them, so a field added here is a `--flag` of `fedjax-appeal run` and a key of
`--config FILE`. Here are the keys every run has; the static options of one kind of
component (an algorithm's, a selector's, a compressor's) are declared in the component's own
file (`core.fields.register_option`), and `RunConfig` takes them like its fields
(`run_fields` lists both).
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from .capabilities import supports
from .errors import ConfigError, UndeclaredOption
from .fields import COMPONENT_OPTIONS, GROUPS, load_option_modules, meta, option_value
from .registry import Registry, did_you_mean
from .tunables import TUNABLES, Tunable, check_tunable, in_range, reserve

PRECISIONS = ("default", "fp32", "tf32", "bf16")  # RunConfig.precision (core/precision.py)
SEED_LIMIT = 2 ** 63  # seeds are non-negative int64 values (jax.random.key)

def _f(default: Any, help: str, choices: tuple | None = None, *, group: str,
       data: bool = False, ge=None, gt=None, le=None, lt=None, hint: str = "",
       registry: str = "", prefixes: tuple = (), shown: str = "", **kw):
    """A RunConfig field, declared once: default, CLI help, section (`GROUPS`), allowed
    values (`choices`, or the name of a component `registry`), range (`ge`/`gt`/`le`/`lt`),
    a `hint` appended to a refusal, whether it changes the data, and `shown`: what `--help`
    says the default is when the stored one stands for something else (an empty folder
    name that means an environment variable or a folder named after the run)."""
    m = meta(help, group, choices, ge, gt, le, lt, hint, data=data, registry=registry,
             prefixes=prefixes, shown=shown)
    return dataclasses.field(default=default, metadata=m, **kw)


def _data(default: Any, help: str, choices: tuple | None = None, **kw):
    """A RunConfig field that the data layer reads (loading, partition, heterogeneity)."""
    return _f(default, help, choices, data=True, **kw)


def _hp(default: float, help: str, *, group: str, ge=None, gt=None, le=None, lt=None,
        hint: str = ""):
    """A vmappable hyperparameter, declared like `_f` (always a float)."""
    return struct.field(default=default,
                        metadata=meta(help, group, None, ge, gt, le, lt, hint))


@struct.dataclass
class HParams:
    """Tunable scalars of a run, one pytree; vmap over it to sweep.

    All leaves are float32 scalars once passed through `HParams.as_arrays`. The fields are
    the learning rates every run has; every other hyperparameter is a tunable declared by
    the component that reads it, in its own file (`register_tunable`: `qffl_q` in
    `algorithms/qffl.py`, `exp_alpha` in `aggregate/aggregation.py`, the DP ones in
    `aggregate/privacy.py`, ...), or by a plugin. Their values live in `extra`, which is
    part of the pytree, so a vmapped sweep batches them too. A declared tunable reads and
    builds like a field: `HParams(qffl_q=2.0)`, `hp.qffl_q`, `hp.replace(qffl_q=...)`;
    `hp.get(name)` reads either kind by name.
    """

    client_lr: float = _hp(0.05, "client (local) SGD learning rate", group="federation", gt=0)
    server_lr: float = _hp(1.0, "server learning rate applied to the pseudo-gradient",
                           group="federation", gt=0)

    # User tunables (`extend.register_tunable`): name -> scalar, part of the pytree.
    extra: Mapping[str, Any] = struct.field(
        default_factory=dict, metadata={"help": "user tunables registered by plugins"})

    @classmethod
    def make(cls, **values: Any) -> HParams:
        """HParams from built-in fields and registered tunables by name (one-line error
        for an unknown name)."""
        own = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        extra = dict(values.pop("extra", None) or {})
        for k in values:
            if k not in own:
                _known_tunable(k)
        extra.update({k: v for k, v in values.items() if k not in own})
        return cls(**{k: v for k, v in values.items() if k in own}, extra=extra)

    def with_values(self, **values: Any) -> HParams:
        """A copy with some built-in fields or tunables changed (`replace` that also
        takes tunable names)."""
        return HParams.make(**{**self.to_dict(fill=False), **values})

    def get(self, name: str) -> Any:
        """A hyperparameter by name: a field, or a declared tunable (its value in `extra`,
        else its declared default). Works on traced and stacked HParams."""
        if name != "extra" and name in _HP_OWN:
            return getattr(self, name)
        if name in self.extra:
            return self.extra[name]
        _known_tunable(name)
        return TUNABLES[name].default

    def __getattr__(self, name: str) -> Any:
        # only called for names that are not fields: a declared tunable reads like a field
        if name.startswith("_") or name == "extra" or "extra" not in self.__dict__:
            raise AttributeError(name)
        if name not in TUNABLES:
            load_option_modules()
            if name not in TUNABLES:
                raise AttributeError(f"HParams has no field or tunable {name!r}")
        return self.get(name)

    def to_dict(self, fill: bool = True) -> dict[str, float]:
        """Every hyperparameter by name as a float: the fields, then the tunables (every
        declared one, at its default unless set, when `fill`)."""
        out = {name: float(getattr(self, name)) for name in _HP_OWN}
        load_option_modules()
        tun = {k: t.default for k, t in TUNABLES.items()} if fill else {}
        tun.update({k: float(v) for k, v in self.extra.items()})
        return {**out, **tun}

    def as_arrays(self) -> HParams:
        """Every leaf as a float32 array, so that the pytree can be traced and stacked;
        `extra` holds every declared tunable (defaults filled in), so that HParams made
        with different tunables set still stack."""
        load_option_modules()
        extra = {k: t.default for k, t in TUNABLES.items()}
        extra.update(self.extra)
        return HParams(**{name: _f32(getattr(self, name)) for name in _HP_OWN},
                       extra={k: _f32(extra[k]) for k in sorted(extra)})


def _f32(v) -> jax.Array:
    """A float32 array of `v`: host numbers are transferred (`jnp.asarray` of a number
    compiles a small program), JAX arrays and tracers converted."""
    if isinstance(v, jax.Array):
        return jnp.asarray(v, jnp.float32)
    return jax.device_put(np.asarray(v, np.float32))


def _known_tunable(name: str) -> None:
    """Raise a one-line `ConfigError` unless `name` is a declared tunable (the modules
    that declare the built-in ones are imported first)."""
    if name not in TUNABLES:
        load_option_modules()
    check_tunable(name, _HP_OWN)


_HP_OWN = tuple(f.name for f in dataclasses.fields(HParams) if f.name != "extra")
_HP_SET = frozenset(_HP_OWN) | {"extra"}
_hp_dataclass_init = HParams.__init__


def _hp_init(self, *args, **kw) -> None:
    """HParams' constructor: the fields as usual; a declared tunable given by name
    (`HParams(qffl_q=2.0)`) goes into `extra`."""
    moved = [k for k in kw if k not in _HP_SET]
    if moved:
        extra = dict(kw.pop("extra", None) or {})
        for k in moved:
            _known_tunable(k)
            extra[k] = kw.pop(k)
        kw["extra"] = extra
    _hp_dataclass_init(self, *args, **kw)


HParams.__init__ = _hp_init


DATASETS = Registry("dataset", dict.fromkeys((
    "fmnist", "mnist", "cifar10", "femnist", "sent140", "synthetic", "usps", "mnistm",
    "tfds:fashion_mnist", "tfds:mnist", "tfds:emnist/byclass", "tfds:cifar10",
    "digits")))  # digits: the Digits domain shift (MNIST, USPS, MNIST-M)
PARTITIONS = Registry("partition", dict.fromkeys(("dirichlet", "clusters", "classes",
                                                  "natural")))

# Options that belong to the appeal protocol (declared in `protocols/appeal/`); giving one
# (non-default) turns `auto` on.
APPEAL_OPTIONS = ("opt_out_after", "requirement", "appeal_def", "finetune_steps")


def appeal_on(cfg: RunConfig) -> bool:
    """Whether a run applies the appeal protocol (`--appeal on|off|auto`, see RunConfig)."""
    if isinstance(cfg.appeal, bool):  # RunConfig(appeal=True/False) from Python code
        return cfg.appeal
    if cfg.appeal != "auto":
        return cfg.appeal == "on"
    defaults = {f.name: f.default for f in run_fields()}
    return supports(cfg.algorithm).needs_requirements or any(
        getattr(cfg, k) != defaults[k] for k in APPEAL_OPTIONS)


def appeal_reason(cfg: RunConfig) -> str:
    """One phrase: whether the appeal protocol is on, and why (for the run header)."""
    on = appeal_on(cfg)
    if cfg.appeal in ("on", "off") or isinstance(cfg.appeal, bool):
        return f"appeal protocol {'on' if on else 'off'} (--appeal)"
    if supports(cfg.algorithm).needs_requirements:
        return f"appeal protocol on (auto: {cfg.algorithm} uses requirements)"
    return ("appeal protocol on (auto: an appeal option was given)" if on else
            "appeal protocol off (auto; --appeal on adds GM-Appeal metrics)")


def data_seed(opts: RunConfig | Options) -> int:
    """The seed of a run's data (`--data-seed`, or `--seed` when that is -1); `opts`: the
    configuration or the data layer's options."""
    return opts.seed if opts.data_seed < 0 else opts.data_seed


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Static configuration of one simulation (fixes shapes and program structure)."""

    # What to run
    algorithm: str = _f("fedavg", "federated algorithm (see `fedjax-appeal list`)",
                        registry="algorithm", group="algorithm")
    dataset: str = _data("fmnist", "dataset name (or npz:PATH, your own arrays)", DATASETS,
                         group="data", prefixes=("npz:",))
    model: str = _f("auto", "model name, or 'auto' for the dataset's default",
                    registry="model", group="algorithm")
    # Data sources
    data_dir: str = _data("", "directory with the npz data files", group="data",
                          shown="$FEDJAX_APPEAL_DATA")
    fmnist_dir: str = _data("/usr/share/datasets/fashion-mnist",
                         "directory with the Fashion-MNIST IDX .gz files", group="data")
    cache_dir: str = _data("", "cache for decoded arrays", group="data",
                           shown="$FEDJAX_APPEAL_CACHE, else ~/.cache/fedjax_appeal")
    max_samples: int = _data(0, "use at most this many samples of the dataset (0 = all)",
                             group="data", ge=0)
    input_scale: float = _data(0.0, "dataset npz:PATH: the model multiplies its inputs by this "
                                    "first (0 = 1/255 for uint8 inputs, 1 for float inputs)",
                               group="data", ge=0,
                                hint="0 = 1/255 for uint8 inputs, 1 for float inputs")
    num_classes: int = _data(0, "the number of classes, when the labels do not use every one "
                                "(0 = the largest label + 1)", group="data", ge=0,
                             hint="0 = the largest label + 1")
    # Partition
    partition: str = _data("dirichlet", "how samples are split over clients", PARTITIONS,
                           group="data")
    min_samples: int = _data(10, "minimum samples per client (all partitions)", group="data", ge=0)
    train_fraction: float = _data(0.6, "per-client train share; the rest is the client's test "
                                       "split", group="data", gt=0, lt=1)
    # Federation
    clients: int = _data(100, "number of seen (training) clients", group="federation", ge=1)
    unseen_clients: int = _data(100, "number of unseen clients (never trained on; 0 = none)",
                                group="federation", ge=0)
    cohort: int = _f(10, "clients sampled per round", group="federation", ge=1)
    rounds: int = _f(200, "communication rounds",
                     group="federation", ge=1,
                     hint="a run trains at least one round; to only evaluate the initial "
                          "model use --rounds 1")
    local_steps: int = _f(50, "local SGD steps per round (tau)", group="federation", ge=1)
    batch_size: int = _f(64, "local minibatch size", group="federation", ge=1)
    conv_impl: str = _f("auto", "how convolutional models convolve (core/conv.py): xla "
                                "(lax.conv), patches (im2col slices + matmul), patches_cf "
                                "(the same, channels-first), winograd (3x3 stride-1 layers by "
                                "Winograd F(4x4,3x3), others as patches_cf) or patches_train / "
                                "patches_cf_train / winograd_train (that form in training, xla "
                                "in evaluation: XLA on CPU runs a convolution's gradient inside "
                                "a loop tens of times slower, benchmarks/RESULTS.md); auto = "
                                "winograd_train on CPU (patches_cf_train where a device "
                                "trains several clients in one vmap), patches_train on GPU, "
                                "xla elsewhere",
                        ("auto", "xla", "patches", "patches_train", "patches_cf",
                         "patches_cf_train", "winograd", "winograd_train"), group="algorithm")
    precision: str = _f("default", "arithmetic of the model's forward and backward pass "
                                   "(core/precision.py): default = JAX's (float32 on CPU, "
                                   "TF32 matmuls on an Ampere+ GPU), fp32 (exact float32 "
                                   "matmuls everywhere), tf32 (GPU only), bf16 (bfloat16 "
                                   "compute, float32 master weights and updates)",
                        PRECISIONS, group="algorithm")
    server_opt: str = _f("sgd", "server optimizer on the pseudo-gradient",
                         registry="server_opt", group="algorithm")
    selector: str = _f("random", "cohort selector (random = uniform from the available pool)",
                       registry="selector", group="selection")
    aggregation: str = _f("proportional", "aggregation weight rule of FedAvg-style algorithms",
                          registry="aggregation", group="algorithm")
    # --- client selection (Power-of-Choice, DivFL, SubTrunc, UnionFL) ---
    # Schedule and output
    eval_every: int = _f(10, "evaluate all clients every this many rounds",
                         group="output", ge=1,
                         hint="to evaluate only at the start and the end use --eval-every "
                              "equal to --rounds")
    seed: int = _data(0, "random seed (training; also the data unless --data-seed is given)",
                      group="output", ge=0, lt=SEED_LIMIT)
    data_seed: int = _data(-1, "seed of the data: partition, train/test split, label flips, "
                               "generated clients (-1 = --seed)",
                       group="data", ge=-1, lt=SEED_LIMIT)
    out: str = _f("", "output directory (results.json, history.csv, accuracy.png)", group="output",
                  shown="runs/ALGORITHM_DATASET_sSEED; a sweep: runs/sweep_ALGORITHM_DATASET")
    # --- appeal protocol (fedjax_appeal/protocols/appeal/appeal.py, requirement.py) ---
    appeal: str = _f("auto", "the appeal protocol (solo models, GM-Appeal and preferred-model "
                             "metrics, opt-out participation, fine-tuning evaluation): on, off, "
                             "or auto = on for algorithms that need requirements (maxfl, incfl, "
                             "mwfed) or when one of its options is given, else off",
                     ("auto", "on", "off"), group="appeal")
    # --- scale: checkpoints, devices, large cohorts ---
    checkpoint_every: int = _f(0, "save a checkpoint into --out every this many rounds "
                                  "(0 = only when interrupted with Ctrl-C)", group="scale", ge=0)
    resume: str = _f("", "continue the run whose checkpoint is in this folder", group="scale")
    client_chunk: int = _f(0, "run the cohort's local updates in chunks of this many clients "
                              "(0 = auto: only when cohort x params exceeds the memory "
                              "budget; -1 = never)",
                           group="scale", ge=-1, hint="0 = auto, -1 = never")
    client_lanes: int = _f(0, "clients of an unchunked cohort trained side by side in one "
                              "vmap, the rest following in a loop inside the same program "
                              "(0 = the whole cohort in one vmap; with --devices D, "
                              "each device's share of the cohort)",
                           group="scale", ge=0, hint="0 = the whole cohort in one vmap")
    devices: int = _f(1, "devices to shard the cohort over (0 = all; setting it makes the "
                         "layout manual)", group="scale", ge=0, hint="0 = all")
    layout: str = _f("auto", "execution layout: auto = the cohort sharded over the host's "
                             "cores (CPU) or devices when the cohort divides among them, one "
                             "client at a time per CPU device (execute/layout.py); manual = "
                             "exactly --devices and --client-lanes", ("auto", "manual"),
                     group="scale")
    log: str = _f("", "experiment trackers, comma-separated: tensorboard (event files in "
                      "OUT/tensorboard), wandb (WANDB_MODE=offline keeps it on disk)",
                  group="tracking")
    # --- heterogeneous and unreliable clients (local/hetero.py, select/availability.py) ---
    local_steps_dist: str = _f("fixed", "per-client local steps tau_k, drawn per client and "
                                        "round: fixed (= --local-steps), uniform on "
                                        "[--local-steps-min, --local-steps], or lognormal "
                                        "(--steps-sigma) clipped to those bounds; the scan "
                                        "runs --local-steps, steps past tau_k are no-ops; "
                                        "epochs = floor(--local-epochs x n_k / batch size), "
                                        "fixed per client, clipped to the same bounds",
                               ("fixed", "uniform", "lognormal", "epochs"), group="hetero")
    availability: str = _f("always", "client availability per round, applied before "
                                     "selection: always, bernoulli (--avail-p, "
                                     "--avail-spread) or markov (on/off trace, --avail-on-off, "
                                     "--avail-off-on)", ("always", "bernoulli", "markov"),
                           group="hetero")

    # --- user-level DP-FedAvg and update compression (aggregate/privacy.py, uplink.py) ---
    dp: str = _f("off", "user-level DP-FedAvg: off, fixed (clip norm --dp-clip) or adaptive "
                        "(clip tracks the --dp-quantile of the update norms)",
                 ("off", "fixed", "adaptive"), group="uplink")
    compress: str = _f("none", "compression of what a client sends: none, qsgd (stochastic "
                               "quantisation to --compress-levels levels) or topk (the "
                               "--compress-fraction largest coordinates)",
                       ("none", "qsgd", "topk"), group="uplink")

    # the given values of the options components declare in their own files
    # (`core.fields.register_option`), as sorted (name, value) pairs; read them as attributes
    component_options: tuple = dataclasses.field(default=(), metadata={"group": "output"})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "component_options":
            raise AttributeError(name)
        if name not in COMPONENT_OPTIONS:
            load_option_modules()
        if name not in COMPONENT_OPTIONS:
            raise AttributeError(f"'RunConfig' object has no attribute {name!r}")
        return option_value(object.__getattribute__(self, "component_options"), name)

    def replace(self, **kw) -> RunConfig:
        return dataclasses.replace(self, **kw)

    def as_dict(self) -> dict[str, Any]:
        """Every key of the configuration and its value: the fields and every declared
        component option (a flat dict, as results.json's `config`)."""
        return {f.name: getattr(self, f.name) for f in run_fields()}

    def view(self, names: Iterable[str], component: str) -> Options:
        """The read-only `Options` of `component`: the fields `names` of this configuration
        (every other field raises `UndeclaredOption` naming the field and the component)."""
        return Options(component, {n: getattr(self, n) for n in _declared(names, component)})


_CORE_FIELDS = tuple(f for f in dataclasses.fields(RunConfig) if f.name != "component_options")
_CORE_NAMES = frozenset(f.name for f in _CORE_FIELDS)
_dataclass_init = RunConfig.__init__


def _run_init(self, **kw: Any) -> None:
    """RunConfig(**keys): its fields, and the declared component options by name (kept in
    `component_options` when they differ from their default)."""
    given = dict(kw.pop("component_options", ()))
    for k in [k for k in kw if k not in _CORE_NAMES]:
        if k not in COMPONENT_OPTIONS:
            load_option_modules()
        if k in COMPONENT_OPTIONS:
            given[k] = kw.pop(k)
    own = tuple(sorted((k, v) for k, v in given.items()
                       if k not in COMPONENT_OPTIONS or v != COMPONENT_OPTIONS[k].default))
    _dataclass_init(self, **kw, component_options=own)


RunConfig.__init__ = _run_init
reserve([*_CORE_NAMES, *_HP_OWN])
_HP_NAMES = frozenset(_HP_OWN) - _CORE_NAMES


def run_fields(load: bool = True) -> list[dataclasses.Field]:
    """The declarations of every configuration key: RunConfig's fields, then the options
    components declare (`core.fields.register_option`; with `load`, after the package's modules
    that declare built-in options are imported)."""
    if load:
        load_option_modules()
    return [*_CORE_FIELDS, *COMPONENT_OPTIONS.values()]


def _run_names() -> frozenset[str]:
    return _CORE_NAMES | COMPONENT_OPTIONS.keys()


def _declared(names: Iterable[str], component: str) -> tuple[str, ...]:
    """`names` without repeats, each checked to be a RunConfig field (HParams names, which
    and registered tunables, which `Supports.options` may also list, are left out: they
    travel in `hp`)."""
    names = tuple(names)
    if any(n not in _HP_NAMES and n not in TUNABLES and n not in _run_names() for n in names):
        load_option_modules()  # declared by a component module not imported yet
    out = tuple(dict.fromkeys(n for n in names if n not in _HP_NAMES and n not in TUNABLES))
    unknown = [n for n in out if n not in _run_names()]
    if unknown:
        raise ValueError(f"{component} declares unknown configuration field(s) "
                         f"{', '.join(map(repr, unknown))}")
    return out


class Options:
    """The configuration fields one component reads, read-only (`RunConfig.view`).

    A component (a weight rule, the uplink, a selector, an algorithm's builder, the data
    layer, ...) declares the `RunConfig` fields it reads and receives this view of them
    instead of the whole configuration: `opts.cohort` reads a declared field, any other
    field raises `UndeclaredOption` naming the field and the component, so an undeclared
    read fails in the tests instead of coupling the component to the whole configuration.
    Views compare and hash by their values (they key caches like the configuration did);
    `opts.view(names, component)` narrows a view to a sub-component's fields.
    """

    __slots__ = ("_component", "_values")

    def __init__(self, component: str, values: Mapping[str, Any]):
        object.__setattr__(self, "_component", component)
        object.__setattr__(self, "_values", MappingProxyType(dict(values)))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_component", "_values"):
            raise AttributeError(name)
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        component = object.__getattribute__(self, "_component")
        if name in _run_names():
            raise UndeclaredOption(
                f"{component} reads the configuration field {name!r}, which it does not "
                f"declare (it declares: {', '.join(values) or 'none'})")
        raise AttributeError(f"the options of {component} have no field {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r} (options "
                                              f"of {self._component} are read-only)")

    def __reduce__(self):
        return (Options, (self._component, dict(self._values)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Options) and dict(self._values) == dict(other._values)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values.items())))

    def __contains__(self, name: str) -> bool:
        return name in self._values

    def __dir__(self):
        return [*self._values, "names", "component", "view", "replace", "as_dict"]

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"Options[{self._component}]({inner})"

    @property
    def names(self) -> tuple[str, ...]:
        """The declared fields."""
        return tuple(self._values)

    @property
    def component(self) -> str:
        """The component the view was made for (named in errors)."""
        return self._component

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def view(self, names: Iterable[str], component: str) -> Options:
        """The narrower view of `component` (its fields must all be in this one)."""
        names = _declared(names, component)
        missing = [n for n in names if n not in self._values]
        if missing:
            raise UndeclaredOption(
                f"{component} reads {', '.join(map(repr, missing))}, which {self._component} "
                f"(whose options it is given) does not declare")
        return Options(component, {n: self._values[n] for n in names})

    def replace(self, **kw: Any) -> Options:
        """A copy with some declared fields changed."""
        for k in kw:
            getattr(self, k)  # undeclared -> UndeclaredOption
        return Options(self._component, {**self._values, **kw})


def fields_in(*groups: str) -> tuple[str, ...]:
    """The RunConfig fields of the given configuration groups (`GROUPS`), in declared order."""
    for g in groups:
        if g not in GROUPS:
            raise ValueError(f"unknown configuration group {g!r}")
    return tuple(f.name for f in run_fields(load=False) if f.metadata["group"] in groups)


def data_fields() -> tuple[str, ...]:
    """The RunConfig fields that change a run's data (runs equal in them share the data)."""
    return tuple(f.name for f in run_fields() if f.metadata.get("data"))


def data_options(cfg: RunConfig | Options, component: str = "the data layer") -> Options:
    """The read-only view of `cfg`'s data fields (`data_fields`) that the data layer, its
    registered datasets and partitions receive."""
    return cfg.view(data_fields(), component)


def field_names(cls) -> list[str]:
    """The configuration keys of `RunConfig` or `HParams` (for HParams: the built-in fields
    and every registered tunable, see `core/tunables.py`)."""
    if cls is HParams:
        load_option_modules()
        return [*_HP_OWN, *TUNABLES]
    return [f.name for f in run_fields()]


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a TOML or JSON file of `RunConfig`/`HParams` keys (dashes or underscores)."""
    p = Path(path)
    raw = read_config_raw(p)
    known = set(field_names(RunConfig)) | set(field_names(HParams)) | {"plugin"}
    out = {}
    for k, v in raw.items():
        key = k.replace("-", "_")
        if key not in known:
            guess = did_you_mean(key, sorted(known))
            raise ConfigError(f"config file {p}: unknown key '{k}'"
                              + (f"; did you mean '{guess}'?" if guess else ""))
        out[key] = v
    out = check_types(out, f"config file {p}")
    fields = {**{f.name: (f, "float") for f in declarations(HParams)},
              **{f.name: (f, _field_kind(RunConfig, f.name)) for f in run_fields()}}
    for k, v in out.items():
        if k in fields and k != "extra":
            err = declared_error(k, v, fields[k][0].metadata, fields[k][1])
            if err:
                raise ConfigError(f"config file {p}: {err}")
    return out


def read_config_raw(path: str | Path) -> dict[str, Any]:
    """The table of a TOML or JSON config file, keys unchecked (the `plugin` key is read
    from it before the plugins' tunables are registered)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read config file {p}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {p} is not UTF-8 text (byte 0x{e.object[e.start]:02x} at "
                          f"position {e.start}): save it as UTF-8") from None
    try:
        if p.suffix.lower() == ".json":
            raw = json.loads(text)
        else:
            raw = tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"config file {p} is not valid {p.suffix[1:] or 'TOML'}: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {p} must hold a table/object of keys")
    return raw


def _field_kind(cls, name: str) -> str:
    f = {f.name: f for f in (run_fields() if cls is RunConfig else dataclasses.fields(cls))}[name]
    return f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))


def check_types(values: dict[str, Any], source: str = "configuration") -> dict[str, Any]:
    """`values` with each key's value checked against its field's type (strictly).

    An int field takes an int only (4.7 or "ten" are errors, never truncated); a float
    field takes an int or a float; a bool field a bool; a string field a string. The error
    names the key and says what to write instead.
    """
    run_keys, hp_keys = set(field_names(RunConfig)), set(field_names(HParams))
    out = {}
    for k, v in values.items():
        if k in hp_keys:
            kind = "float"
            if k == "solo_lr" and isinstance(v, str) and v.strip().lower() == "same":
                v = 0.0  # the client lr of the run (see HParams.solo_lr)
        elif k in run_keys:
            kind = _field_kind(RunConfig, k)
            if k == "appeal" and isinstance(v, bool):  # appeal = true / false
                v = "on" if v else "off"
            if k == "appeal" and v not in ("auto", "on", "off"):
                guess = did_you_mean(v, ("auto", "on", "off"))
                raise ConfigError(f"{source}: key 'appeal' must be on, off or auto (or true / "
                                  f"false), got {v!r}"
                                  + (f"; did you mean '{guess}'?" if guess else ""))
        else:
            out[k] = v
            continue
        ok = {"int": isinstance(v, int) and not isinstance(v, bool),
              "float": isinstance(v, int | float) and not isinstance(v, bool),
              "bool": isinstance(v, bool),
              "str": isinstance(v, str)}.get(kind, True)
        if not ok:
            want = {"int": "an integer (e.g. 10)", "float": "a number (e.g. 0.1)",
                    "bool": "true or false", "str": "a string in quotes"}[kind]
            extra = (f"; {v} is not an integer and is not rounded" if kind == "int"
                     and isinstance(v, float) else "")
            raise ConfigError(f"{source}: key '{k}' must be {want}, got {v!r} "
                              f"({type(v).__name__}){extra}")
        out[k] = float(v) if kind == "float" else v
    return out


def split_overrides(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a flat dict of keys into (RunConfig kwargs, HParams kwargs)."""
    run_keys, hp_keys = set(field_names(RunConfig)), set(field_names(HParams))
    return ({k: v for k, v in values.items() if k in run_keys},
            {k: v for k, v in values.items() if k in hp_keys})


_KINDS = {"int": "an integer (e.g. 10)", "float": "a number (e.g. 0.1)", "bool": "true or false",
          "str": "a string"}


def _type_ok(kind: str, v: Any) -> bool:
    return {"int": isinstance(v, int) and not isinstance(v, bool),
            "float": isinstance(v, int | float) and not isinstance(v, bool),
            "bool": isinstance(v, bool),
            "str": isinstance(v, str)}.get(kind, True)


def range_text(rng: Mapping[str, Any]) -> str:
    """The declared range in words: ">= 1", "> 0", "in [0, 1]", "in (0, 1)", ..."""
    lo = ("[", rng["ge"]) if "ge" in rng else ("(", rng["gt"]) if "gt" in rng else None
    hi = ("]", rng["le"]) if "le" in rng else (")", rng["lt"]) if "lt" in rng else None
    def num(v) -> str:
        return "2^63" if v == SEED_LIMIT else f"{v:g}"

    if lo and hi:
        return f"in {lo[0]}{num(lo[1])}, {num(hi[1])}{hi[0]}"
    if lo:
        return f"{'>=' if lo[0] == '[' else '>'} {num(lo[1])}"
    return f"{'<=' if hi[0] == ']' else '<'} {num(hi[1])}"


def declared_error(name: str, value: Any, meta: Mapping[str, Any], kind: str) -> str | None:
    """The one-line refusal of `value` for the declared field `name`, or None if it is
    allowed (type, declared choices, declared range; registry names are checked by the
    run layer, which knows the registries)."""
    flag = "--" + name.replace("_", "-")
    hint = f"; {meta['hint']}" if meta.get("hint") else ""
    if name == "appeal" and isinstance(value, bool):  # RunConfig(appeal=True) from Python
        return None
    if not _type_ok(kind, value):
        return f"{flag} must be {_KINDS[kind]}, got {value!r} ({type(value).__name__})"
    choices = meta.get("choices")
    if isinstance(choices, tuple) and value not in choices:
        guess = did_you_mean(value, choices)
        return (f"{flag} must be one of: {', '.join(map(str, choices))} (got {value!r})"
                + (f"; did you mean '{guess}'?" if guess else ""))
    if isinstance(choices, Registry) and not any(str(value).startswith(p)
                                                 for p in meta.get("prefixes", ())):
        try:
            choices.check(value)
        except ConfigError as e:
            return str(e)
    rng = meta.get("range") or {}
    if rng and kind in ("int", "float") and not in_range(float(value), rng.items()):
        return f"{flag} must be {range_text(rng)} (got {value}){hint}"
    return None


def check_declared(cfg: RunConfig, hp: HParams | None = None) -> None:
    """Raise `ConfigError` for the first field of `cfg` (and `hp`) outside its declaration."""
    for f in run_fields():
        err = declared_error(f.name, getattr(cfg, f.name), f.metadata,
                             _field_kind(RunConfig, f.name))
        if err:
            raise ConfigError(err)
    if hp is None:
        return
    for f in declarations(HParams):
        err = declared_error(f.name, float(hp.get(f.name)), f.metadata, "float")
        if err:
            raise ConfigError(err)


def declarations(cls) -> list[dataclasses.Field]:
    """The declared fields of `RunConfig` or `HParams` (their metadata: help, group,
    choices, registry, range, hint)."""
    if cls is RunConfig:
        return run_fields()
    load_option_modules()
    return [*(f for f in dataclasses.fields(cls) if f.name != "extra"),
            *(tunable_field(name, t) for name, t in TUNABLES.items())]


def tunable_field(name: str, t: Tunable) -> dataclasses.Field:
    """A declared tunable as a field declaration (help, group, range, hint), like the
    HParams fields'."""
    f = dataclasses.field(default=t.default, metadata=meta(
        t.help, t.group, None, *(dict(t.range).get(k) for k in ("ge", "gt", "le", "lt")),
        t.hint))
    f.name, f.type = name, "float"
    return f

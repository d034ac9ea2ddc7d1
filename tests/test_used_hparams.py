"""The hyperparameters a configuration uses, derived from the declarations that refuse an
option without effect (`validate.used_hparams`): checked against those declarations and by
hand."""

from __future__ import annotations

import pytest

from fedjax_appeal.aggregate.server import SERVER_OPTS
from fedjax_appeal.algorithms import ALGORITHMS
from fedjax_appeal.core.capabilities import supports
from fedjax_appeal.core.config import ConfigError, HParams, RunConfig, field_names
from fedjax_appeal.core.fields import OPTIONS
from fedjax_appeal.run.validate import check_ignored, used_hparams


def _own(alg: str) -> set[str]:
    """The hyperparameters declared for algorithm `alg` (by name or a part it is built on)."""
    parts = {("part", p) for p in supports(alg).parts}
    return {k for k in field_names(HParams)
            if ("algorithm", alg) in OPTIONS[k].applies.mentions
            or parts & OPTIONS[k].applies.mentions}


def owners(key: str) -> list[str]:
    return [a for a in ALGORITHMS if key in _own(a)]


def server_opt_reads() -> dict[str, set[str]]:
    """Server optimizer -> the hyperparameters declared for it, and the server lr."""
    return {name: {"server_lr"} | {k for k in field_names(HParams) if ("server_opt", name)
                                   in OPTIONS[k].applies.mentions} for name in SERVER_OPTS}


def _algorithm_hparams(alg: str) -> set[str]:
    return _own(alg)


@pytest.mark.parametrize("alg", ["fedavg", "maxfl", "fedprox", "qffl", "fedbuff", "pfedme"])
def test_used_hparams_follow_the_declarations(alg):
    cfg = RunConfig(algorithm=alg)
    used = set(used_hparams(cfg))
    assert _algorithm_hparams(alg) <= used  # its own options ...
    for k in used:  # ... and no option another algorithm owns
        assert not owners(k) or alg in owners(k)
    reads = server_opt_reads()
    server_keys = set().union(*reads.values())
    assert used & server_keys == reads[cfg.server_opt]
    assert used < set(field_names(HParams))


def test_used_hparams_by_hand():
    assert used_hparams(RunConfig()) == ["client_lr", "server_lr"]
    assert used_hparams(RunConfig(algorithm="maxfl")) == ["client_lr", "server_lr", "solo_lr",
                                                          "maxfl_eps"]
    assert used_hparams(RunConfig(server_opt="adam", selector="unionfl")) == [
        "client_lr", "server_lr", "server_momentum", "server_beta2", "server_eps", "union_mu"]
    assert used_hparams(RunConfig(dp="fixed", aggregation="exp-alpha")) == [
        "client_lr", "server_lr", "exp_alpha", "dp_clip", "dp_noise"]


def test_an_option_of_an_unused_component_is_refused():
    with pytest.raises(ConfigError, match="--server-momentum has no effect here.*--server-opt"):
        check_ignored(RunConfig(), {"server_momentum"})
    check_ignored(RunConfig(server_opt="momentum"), {"server_momentum"})
    with pytest.raises(ConfigError, match="--exp-alpha has no effect here"):
        check_ignored(RunConfig(), {"exp_alpha"})
    with pytest.raises(ConfigError, match="--byzantine-noise has no effect here"):
        check_ignored(RunConfig(), {"byzantine_noise"})
    check_ignored(RunConfig(algorithm="maxfl", appeal="off"), {"solo_lr"})  # its rho_k
    with pytest.raises(ConfigError, match="--solo-lr has no effect here"):
        check_ignored(RunConfig(appeal="off"), {"solo_lr"})

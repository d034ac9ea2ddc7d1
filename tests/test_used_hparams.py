"""The hyperparameters a configuration uses, derived from the declarations that refuse an
option without effect (`validate.used_hparams`): checked against those declarations and by
hand."""

from __future__ import annotations

import pytest

from fedjax_appeal.aggregate.server import server_opt_reads
from fedjax_appeal.core.capabilities import SUPPORTS, owners
from fedjax_appeal.core.config import ConfigError, HParams, RunConfig, field_names
from fedjax_appeal.run.validate import check_ignored, used_hparams


def _algorithm_hparams(alg: str) -> set[str]:
    return {k for k in field_names(HParams) if k in SUPPORTS[alg].options}


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

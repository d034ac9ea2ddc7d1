"""The sections of the configuration: every declared field and tunable names one."""

# The sections of the configuration: every field declares one (`group=`), and
# `fedjax-appeal run --help` lists the options section by section in this order.
GROUPS = {
    "data": "data: dataset, partition, generated clients, label noise",
    "federation": "federation: clients, cohort, rounds, local training, Byzantine clients",
    "algorithm": "algorithm: local objective, aggregation, server optimizer, model",
    "selection": "client selection: Power-of-Choice, DivFL, SubTrunc, UnionFL",
    "uplink": "uplink: update compression and differential privacy",
    "hetero": "heterogeneous and unreliable clients",
    "appeal": "appeal protocol: requirements, GM-Appeal, opt-out, fine-tuning",
    "scale": "scale and layout: devices, chunks, lanes, checkpoints",
    "output": "output: schedule, seeds, folder",
    "tracking": "tracking",
}

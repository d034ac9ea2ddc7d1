"""The experiments of the seed papers, outside the `fedjax_appeal` library (which imports
nothing from here); they use only its public API (`fedjax_appeal`, `fedjax_appeal.extend`).

  * reproduce: the `fedjax-appeal reproduce NAME` harness (context, run cache, registry);
    cli: the subcommand itself, added through the `fedjax_appeal.commands` entry point.
  * spec: a paper table as data (`Table`: settings, arms, metrics, the paper's numbers);
    runner: `run_table`, the generic runner of one; pairs: per-seed paired differences.
  * decide: `reproduce NAME --seeds auto`, seeds until the main claim is decided;
    scorecard: `reproduce all`, every table with an ETA, and the scorecard of both verdicts.
  * appeal/: MaxFL and IncFL tables (and appeal-tune, their hyperparameter search).
  * selection/: SubTrunc / UnionFL client selection tables.
  * expalpha/: Exp-alpha tables and their metrics.
  * hetero/: FedNova and FedBuff tables.
  * extensions/: mean estimation (MaxFL's toy problem), DP and compression studies.
"""

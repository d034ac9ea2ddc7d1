"""The commands quoted in README.md and docs/*.md are commands of this version: every
`fedjax-appeal ...` line of a bash block parses with the real parser (known subcommand,
known flags, allowed choices, a registered experiment), every page the README links to
exists. The Python examples run in tests/test_doc_examples.py."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from fedjax_appeal.cli.commands import all_commands, make_parser, unknown_message

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# "...", "<folder>", "[run flags]", a trailing "&": the parts of a sketch that are no flags
PLACEHOLDER = re.compile(r"\.\.\.|<[^>]+>|\[[^\]]+\]|&\s*$")


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def commands(page: Path) -> list[str]:
    """`fedjax-appeal ...` command lines of a page's bash blocks (continuations joined,
    comments and environment prefixes dropped, `&&` chains split)."""
    out = []
    for block in bash_blocks(page.read_text()):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            for part in line.split("&&"):
                words = part.strip().split()
                while words and "=" in words[0] and not words[0].startswith("-"):
                    words = words[1:]  # VAR=value prefixes
                if words and words[0].endswith("fedjax-appeal"):
                    out.append(" ".join(words[1:]))
    return out


CASES = [(p.relative_to(ROOT).as_posix(), c) for p in PAGES for c in commands(p)]


def test_the_pages_quote_commands():
    assert len(CASES) >= 20
    assert {p for p, _ in CASES} >= {"README.md", "docs/command-line.md",
                                     "docs/layout-and-scale.md"}


@pytest.mark.parametrize("page,cmd", CASES, ids=[f"{p}:{c[:40]}" for p, c in CASES])
def test_a_quoted_command_parses(page, cmd):
    cmd = PLACEHOLDER.sub("", cmd)  # a sketch's "..." and "<folder>": the rest must parse
    argv = shlex.split(cmd)
    parser = make_parser()
    try:
        args, unknown = parser.parse_known_args(argv)
    except SystemExit as e:  # an invalid choice, a missing value (0: --help printed)
        if e.code == 0 and "--help" in argv:
            return
        raise AssertionError(f"{page}: `fedjax-appeal {cmd}` does not parse") from e
    assert not unknown, (
        f"{page}: `fedjax-appeal {cmd}`: {unknown_message(parser, args.command, unknown)}")
    assert args.command in all_commands()
    if args.command == "reproduce" and args.name not in ("list", "all"):
        from papers.reproduce import EXPERIMENTS, load_modules

        load_modules()
        assert args.name in EXPERIMENTS, f"{page}: no experiment {args.name!r}"


def test_every_page_the_readme_links_to_exists():
    text = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#]+)\)", text)
    assert links
    for link in links:
        assert (ROOT / link).exists(), f"README.md links to {link}, which does not exist"
    for page in PAGES[1:]:
        for link in re.findall(r"\]\(([^)#:]+)\)", page.read_text()):
            assert (page.parent / link).exists(), f"{page.name} links to missing {link}"


def test_the_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 230


def test_the_readme_starts_with_the_two_setup_commands():
    blocks = bash_blocks((ROOT / "README.md").read_text())
    assert "fedjax-appeal reproduce tour" in blocks[0]
    assert "python -m pytest" in blocks[1] and "ruff check" in blocks[1]
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci.strip() in blocks[1]  # CI runs the README's test command verbatim


def _history_keys(**kw) -> set[str]:
    """The keys of a history entry of the configuration `kw` on a tiny synthetic
    federation, from the shapes its evaluation returns (`sweep.metric_check`'s way: traced,
    nothing compiled)."""
    import jax
    import numpy as np

    from fedjax_appeal.core.config import HParams, RunConfig
    from fedjax_appeal.core.models import abstract_key
    from fedjax_appeal.data import load_federated
    from fedjax_appeal.evaluate.metrics import summarize
    from fedjax_appeal.run.assemble import assemble

    cfg = RunConfig(**{"dataset": "synthetic", "partition": "natural", "clients": 8,
                       "unseen_clients": 2, "cohort": 4, "local_steps": 2, "batch_size": 4,
                       "min_samples": 4, **kw})
    data, ds = load_federated(cfg)
    alg = assemble(cfg, data=data, dataset=ds, mesh=None)[0]
    hp = HParams().as_arrays()
    shapes = jax.eval_shape(alg.evaluate, jax.eval_shape(alg.init, abstract_key(), data, hp),
                            data, hp)
    with np.errstate(all="ignore"):
        return set(summarize(jax.tree.map(lambda a: np.ones(a.shape, a.dtype), shapes)))


def test_every_history_metric_is_documented():
    """docs/metrics.md names every metric a history holds: the always-there ones, the
    unseen clients', the appeal protocol's, label flipping's groups and DP's epsilons."""
    from fedjax_appeal.aggregate.accounting import epsilons, epsilons_fixed

    page = (ROOT / "docs" / "metrics.md").read_text()
    documented = set(re.findall(r"`([a-z][a-z0-9_]*)`", page))
    keys = (_history_keys(appeal="off") | _history_keys(algorithm="maxfl", rho_steps=2)
            | _history_keys(label_flip_fraction=0.5, appeal="off")
            | set(epsilons(0.1, 1.0, 3, 1e-5)) | set(epsilons_fixed(10, 2, 1.0, 3, 1e-5)))
    assert {"test_acc_unseen", "gm_appeal_seen", "test_acc_flipped", "dp_epsilon_pld"} <= keys
    assert not keys - documented, f"docs/metrics.md lacks {sorted(keys - documented)}"
    assert "`mse`" in page and "`xent`" in page

"""The README and docs/ stay true: short, every command documented, the examples run."""

from __future__ import annotations

import re
from pathlib import Path

import torch
import yaml

from frontier.search import parse_config
from frontier.search.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _commands() -> list[str]:
    """Every command and subcommand the CLI has, as ``frontier lut import``."""
    out = []
    parser = build_parser()
    for action in parser._subparsers._group_actions:  # type: ignore[union-attr]
        for name, sub in action.choices.items():
            nested = [a for a in sub._actions if a.__class__.__name__ == "_SubParsersAction"]
            if nested:
                out += [f"frontier {name} {n}" for n in nested[0].choices]
            else:
                out.append(f"frontier {name}")
    return out


def test_the_readme_is_short_and_every_command_is_documented() -> None:
    assert len(README.splitlines()) <= 250
    cli = (ROOT / "docs" / "cli.md").read_text()
    for command in _commands():
        assert f"`{command}" in cli, f"docs/cli.md does not document {command}"
        assert f"`{command}" in README, f"README's table lacks {command}"


def test_docs_the_readme_links_to_exist() -> None:
    for page in re.findall(r"`(docs/[\w.-]+\.md)`", README):
        assert (ROOT / page).is_file(), page


def test_the_readme_config_and_technique_examples_work() -> None:
    blocks = re.findall(r"```(\w+)\n(.*?)```", README, re.S)
    config = next(b for lang, b in blocks if lang == "yaml" and "name: my-search" in b)
    parsed = parse_config(yaml.safe_load(config), source="README my.yaml")
    assert parsed.space.prune_ratios == (0.0, 0.25, 0.5)
    code = next(b for lang, b in blocks if lang == "python" and "register_technique" in b)
    scope: dict = {}
    exec(code.replace('"zero-bias"', '"zero-bias-readme"'), scope)
    from frontier.spaces import SpaceOptions, apply_plan, discover

    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    options = SpaceOptions(techniques={"zero-bias-readme": {}})
    space = discover(model, torch.randn(1, 4), options)
    assert {d.name for d in space.dimensions()} >= {"zero_bias.0", "zero_bias.2"}
    plan = space.plan_of({"zero_bias.2": True})
    assert plan.techniques == {"zero-bias-readme": ["2"]}
    assert bool((apply_plan(model, plan, torch.randn(1, 4))[2].bias == 0).all())

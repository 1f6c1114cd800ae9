"""A technique defined outside the package, named in a config's ``plugins``, searched
from the CLI by worker processes that import it themselves."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from frontier.search import ConfigError, load_config, open_storage

PLUGIN = textwrap.dedent(
    '''
    """Per Linear layer: keep its bias or zero it. Records which process applied it
    where $BIAS_OFF_LOG names a file."""
    import os
    from dataclasses import dataclass

    import torch

    from frontier.spaces import Dimension, Technique, register_technique


    @register_technique("bias-off")
    @dataclass(frozen=True)
    class BiasOff(Technique):
        choices: tuple[bool, ...] = (False, True)

        def layer_dimensions(self, space, layer):
            if layer.kind != "Linear":
                return []
            return [Dimension(f"bias_off.{layer.name}", "zero bias", self.choices)]

        def draw(self, space, choose, prefix=""):
            names = [q.name for q in space.layers if q.kind == "Linear"]
            zeroed = [n for n in names if choose(f"{prefix}bias_off.{n}", self.choices)]
            return self.entry_field(sorted(zeroed) or None)

        def apply(self, model, plan, context):
            if "BIAS_OFF_LOG" in os.environ:
                with open(os.environ["BIAS_OFF_LOG"], "a") as log:
                    log.write(f"{os.getpid()}\\n")
            with torch.no_grad():
                for name in self.entry(plan) or []:
                    model.get_submodule(name).bias.zero_()
    '''
)


def _config(workdir: Path, plugins: list[str]) -> Path:
    path = workdir / "plug.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "plug",
                "plugins": plugins,
                "task": {"name": "digits", "options": {"model": "mlp"}},
                "space": {
                    "prune_ratios": [0.0, 0.5],
                    "weight_bits": [8, 32],
                    "act_bits": [32],
                    "techniques": {"bias-off": {}},
                },
                "objectives": [{"name": "accuracy", "options": {"steps": 10}}, "size_bytes"],
                "search": {
                    "trials": 6,
                    "population": 3,
                    "fidelity": {"rungs": ["proxy"]},
                },
            }
        )
    )
    return path


@pytest.mark.slow
def test_a_technique_from_a_plugin_is_searched_by_two_workers(workdir: Path) -> None:
    (workdir / "bias_off_plugin.py").write_text(PLUGIN)
    path = _config(workdir, ["bias_off_plugin"])
    log = workdir / "applied.log"
    env = {**os.environ, "PYTHONPATH": str(workdir), "BIAS_OFF_LOG": str(log)}
    cmd = [sys.executable, "-m", "frontier.search.cli", "search", str(path)]
    proc = subprocess.Popen(
        [*cmd, "--workers", "2", "--no-progress"],
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    storage = open_storage(str(workdir / "frontier-optuna.journal"))
    study = optuna.load_study(study_name="plug", storage=storage)
    trials = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(trials) == 6
    assert any(k.startswith("bias_off.") for t in trials for k in t.params)
    plans = [t.user_attrs["plan"] for t in trials]
    assert any(p.get("techniques", {}).get("bias-off") for p in plans)
    # the plugin's apply ran in the workers, which imported it themselves
    pids = {int(line) for line in log.read_text().split()}
    assert pids and proc.pid not in pids


def test_a_plugin_that_cannot_be_imported_is_named(workdir: Path) -> None:
    path = _config(workdir, ["no_such_plugin_module"])
    with pytest.raises(ConfigError, match=r"plug.yaml: plugins\[0\]: cannot import"):
        load_config(path)
    # without the plugin the technique is unknown, and the error says so
    path = _config(workdir, [])
    with pytest.raises(ConfigError, match="unknown technique 'bias-off'"):
        load_config(path)

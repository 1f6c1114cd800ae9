"""Torch-Pruning's internals that ``spaces/_graph.py`` patches or reads, as they are in
the pinned range: a release that changes one of them fails here, by name, before any
space is discovered wrong. (Torch-Pruning offers no public extension point for mapping
one node at a time, bounding a flatten's spread or a group's size: see the module.)"""

from __future__ import annotations

import inspect
from importlib.metadata import version

import torch
import torch_pruning as tp
from torch import nn
from torch_pruning.dependency import index_mapping

from frontier.spaces._graph import build_graph, pruning_group, release

#: the range pyproject.toml pins and this test checks: 1.6.x
PINNED = (1, 6)


def test_the_installed_torch_pruning_is_in_the_pinned_range() -> None:
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert "torch-pruning>=1.6,<1.7" in project["project"]["dependencies"]
    assert tuple(int(p) for p in version("torch-pruning").split(".")[:2]) == PINNED


def test_the_patched_functions_keep_their_shape() -> None:
    # _tolerant_mapping replaces it with a function of the graph alone
    assert list(inspect.signature(index_mapping.update_index_mapping).parameters) == ["graph"]
    # _bounded_flatten wraps __call__(self, idxs) and reads reverse and _stride
    flatten = index_mapping._FlattenIndexMapping
    assert list(inspect.signature(flatten.__call__).parameters) == ["self", "idxs"]
    mapping = flatten(stride=4, reverse=False)
    assert mapping._stride == 4 and mapping.reverse is False
    # _bounded_group wraps add_dep(self, dep, idxs) and counts _group
    assert list(inspect.signature(tp.dependency.Group.add_dep).parameters) == [
        "self",
        "dep",
        "idxs",
    ]
    assert tp.dependency.Group()._group == []


def test_a_graph_built_patched_prunes_and_is_released() -> None:
    """The patched calls run end to end on a small network: a group couples the conv
    with the batch norm and the next conv, and release() finds what it clears."""
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 3), nn.Flatten()
    )
    graph = build_graph(model, torch.randn(1, 3, 8, 8))
    assert graph is not None
    dg = graph.dg
    assert isinstance(dg._param_to_name, dict) and dg.module2node
    group = pruning_group(graph, model[0], [0, 1])
    touched = {dep.target.module for dep, _ in group}
    assert {model[0], model[1], model[3]} <= touched
    release(graph)
    assert not dg.module2node

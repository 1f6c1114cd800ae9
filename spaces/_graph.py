"""Torch-Pruning's dependency graph: the one source of truth for coupled channels.

Everything in Frontier that needs to know which channels move together (discovery,
pruning) asks this module, which asks Torch-Pruning's ``DependencyGraph``.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock

import torch
import torch_pruning as tp
from torch import nn
from torch_pruning import ops
from torch_pruning.dependency import index_mapping

logger = logging.getLogger(__name__)

#: Module types that root a prunable group (their output channels are pruned).
ROOT_TYPES: tuple[type[nn.Module], ...] = (
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
    nn.Linear,
)


@dataclass(frozen=True)
class GraphGroup:
    """One group of coupled channels found in the graph."""

    name: str
    channels: int
    members: tuple[str, ...]
    channel_groups: int = 1


@dataclass
class Graph:
    """A built dependency graph plus what Frontier learned while building it."""

    dg: Any  # tp.DependencyGraph
    model: nn.Module
    module_names: dict[nn.Module, str]
    failed_nodes: set[Any]
    failure: str | None = None
    #: the most indices one channel spreads to through a single flatten of this graph
    #: (a conv map flattened into a classifier: its height x width). A group whose
    #: channel spreads further has been flattened again, which is Torch-Pruning going
    #: round a cycle of reshapes, each pass multiplying the indices (a Swin stage's
    #: window partition: 1, 16, 256, ... 1M, minutes a group and 23 GB for swin_t;
    #: maxvit_t's partitions: 1, 32, 1024, ...)
    flatten_max: int = 1


def build_graph(model: nn.Module, example_inputs: Any) -> Graph | None:
    """Trace ``model`` into a dependency graph, tolerating ops Torch-Pruning cannot map.

    Torch-Pruning maps channel indices through reshapes, concatenations and splits. When
    one of those mappings raises (channel shuffle in shufflenet_v2 divides by zero), the
    whole build fails upstream. Here each mapping is tried on its own; the nodes that fail
    are remembered so that every group touching them is left out of pruning, while the
    rest of the model stays prunable.

    Returns:
        The graph, or None when even tracing failed (then nothing is prunable).
    """
    failed: set[Any] = set()
    dg = tp.DependencyGraph()
    try:
        with warnings.catch_warnings(), _tolerant_mapping(failed), torch.enable_grad():
            warnings.simplefilter("ignore")
            dg.build_dependency(model, example_inputs=example_inputs, verbose=False)
    except Exception as err:
        return Graph(
            dg=None,
            model=model,
            module_names={},
            failed_nodes=set(),
            failure=f"{type(err).__name__}: {err}",
        )
    names = {module: name for name, module in model.named_modules()}
    return Graph(
        dg=dg,
        model=model,
        module_names=names,
        failed_nodes=failed,
        flatten_max=_largest_flatten(dg),
    )


def release(graph: Graph) -> None:
    """Let go of the forward ``build_graph`` traced. Torch-Pruning's nodes point at one
    another (a web of cycles the collector frees only on its own schedule) and each holds
    its autograd node, which holds the tensors the forward saved: the weights as they were
    before pruning. Cutting those links frees the weights at once; a full ``gc.collect``
    did the same at 0.24 s a call in a process with the search's imports (2.6x
    ``apply_plan``'s time on MobileNetV2)."""
    dg = graph.dg
    if dg is None:
        return
    for node in dg.module2node.values():
        node.grad_fn = None
        for attr in ("grad_fn", "_grad_fn"):  # Torch-Pruning's op stand-ins keep theirs
            if attr in vars(node.module):
                setattr(node.module, attr, None)
        node.inputs.clear()
        node.outputs.clear()
        node.dependencies.clear()
    dg.module2node.clear()
    dg._param_to_name.clear()
    graph.failed_nodes.clear()


def _largest_flatten(dg: Any) -> int:
    strides = [
        int(mapping._stride)
        for node in dg.module2node.values()
        for dep in node.dependencies
        for mapping in dep.index_mapping
        if isinstance(mapping, index_mapping._FlattenIndexMapping) and not mapping.reverse
    ]
    return max(strides, default=1)


def _tolerant_mapping(failed: set[Any]) -> Any:
    """Torch-Pruning's index mapping, each node tried on its own: a node whose mapping
    raises joins ``failed`` and the rest are mapped. Torch-Pruning maps the whole graph
    again each time it builds a group, so every call into it goes through this."""
    original = index_mapping.update_index_mapping

    def tolerant_update(graph: Any) -> None:
        for node in graph.module2node.values():
            single = _SingleNodeGraph(graph, node)
            try:
                original(single)
            except Exception as err:  # a mapping Torch-Pruning cannot compute
                logger.debug("index mapping failed at %s: %r", node.name, err)
                failed.add(node)

    return mock.patch.object(index_mapping, "update_index_mapping", tolerant_update)


class _SingleNodeGraph:
    """Presents one node of a graph to Torch-Pruning's ``update_index_mapping``."""

    def __init__(self, graph: Any, node: Any) -> None:
        self._graph = graph
        self.module2node = {node.module: node}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._graph, name)


def output_channels(graph: Graph, module: nn.Module) -> int | None:
    pruner = graph.dg.get_pruner_of_module(module)
    if pruner is None:
        return None
    channels = pruner.get_out_channels(module)
    return int(channels) if channels is not None else None


class ChannelsSpread(RuntimeError):
    """A group's channel mapping grows without end: a flatten sends a channel to more
    indices than the graph's largest flatten does (``Graph.flatten_max``), or a group
    passes ``GROUP_MAX_VISITS_PER_NODE`` deps a node."""


@contextlib.contextmanager
def _bounded_flatten(roots: int, per_channel: int) -> Iterator[None]:
    """Torch-Pruning's flatten mapping, raising ``ChannelsSpread`` once its output holds
    more than ``per_channel`` indices per root channel (``roots`` of them)."""
    cls = index_mapping._FlattenIndexMapping
    original = cls.__call__
    limit = per_channel * max(roots, 1)

    def bounded(self: Any, idxs: Any) -> Any:
        if not self.reverse and len(idxs) * self._stride > limit:
            raise ChannelsSpread(
                f"{len(idxs)} indices x a flatten of {self._stride} exceed "
                f"{per_channel} per channel, the graph's largest flatten"
            )
        return original(self, idxs)

    with mock.patch.object(cls, "__call__", bounded):
        yield


#: A group visits each node of the graph a few times at most (once per path its
#: channels reach it by); more than this many visits a node is Torch-Pruning going
#: round a cycle whose index lists differ only in order (maxvit_t's partitions: past
#: 600 s and 10 GB in ``Group.has_pruning_op``).
GROUP_MAX_VISITS_PER_NODE = 16


@contextlib.contextmanager
def _bounded_group(nodes: int) -> Iterator[None]:
    """Torch-Pruning's ``Group.add_dep``, raising ``ChannelsSpread`` once a group holds
    more than ``GROUP_MAX_VISITS_PER_NODE`` deps per node of the graph (``nodes``)."""
    cls = tp.dependency.Group
    original = cls.add_dep
    limit = GROUP_MAX_VISITS_PER_NODE * max(nodes, 1)

    def bounded(self: Any, dep: Any, idxs: Any) -> Any:
        if len(self._group) >= limit:
            raise ChannelsSpread(f"a group past {limit} deps over a graph of {nodes} nodes")
        return original(self, dep, idxs)

    with mock.patch.object(cls, "add_dep", bounded):
        yield


def pruning_group(graph: Graph, module: nn.Module, idxs: list[int]) -> Any:
    pruner = graph.dg.get_pruner_of_module(module)
    with (
        _tolerant_mapping(graph.failed_nodes),
        _bounded_flatten(len(idxs), graph.flatten_max),
        _bounded_group(len(graph.dg.module2node)),
    ):
        return graph.dg.get_pruning_group(module, pruner.prune_out_channels, idxs)


def channel_groups(graph: Graph, group: Any) -> int:
    """How many equal channel groups a pruning group must shrink evenly (grouped convs,
    group norms); 1 when free. Depthwise convs follow their input and do not count."""
    found = [1]
    for dep, _ in group:
        module = dep.target.module
        pruner = graph.dg.get_pruner_of_module(module)
        if pruner is None:
            continue
        if isinstance(module, nn.Conv1d | nn.Conv2d | nn.Conv3d) and (
            module.groups == module.out_channels
        ):
            continue
        if graph.dg.is_out_channel_pruning_fn(dep.handler):
            found.append(int(pruner.get_out_channel_groups(module) or 1))
        else:
            found.append(int(pruner.get_in_channel_groups(module) or 1))
    return max(found)


MEETS_FAILED = "Torch-Pruning cannot map its channels through a reshape/concat it meets"
SPREADS = (
    "Torch-Pruning's channel mapping grows without end through its reshapes "
    "(reshapes it passes again and again, as channel shuffles and window partitions make)"
)


def _touches_failed(graph: Graph, group: Any) -> bool:
    return any(
        dep.target in graph.failed_nodes or dep.source in graph.failed_nodes for dep, _ in group
    )


def iter_groups(graph: Graph) -> Iterator[tuple[GraphGroup | None, str, str | None]]:
    """Yield ``(group, root_name, reason_skipped)`` for every candidate root module.

    The group is named after its member that comes first in the model's module order,
    so names are stable and readable (``layer1.0.conv1``). A group whose channels reach
    the model's output (the classifier) or touch a node whose index mapping failed is
    yielded with a reason instead.
    """
    order = {name: i for i, name in enumerate(graph.module_names.values())}
    visited: set[nn.Module] = set()
    candidates = [
        m for m in graph.dg.module2node if isinstance(m, ROOT_TYPES) and m in graph.module_names
    ]
    candidates.sort(key=lambda m: order[graph.module_names[m]])
    for module in candidates:
        if module in visited:
            continue
        root_name = graph.module_names[module]
        try:
            channels = output_channels(graph, module)
            if channels is None:
                continue
            # one channel first: the deps it reaches are a subset of all channels', so
            # a group it finds failing, spreading, or meeting a failed mapping is left
            # out either way, for a channel's share of the work (mapping every channel
            # through a channel shuffle's reshape to find that out took 5 s a group on
            # ShuffleNetV2 x1.0, 43 of its 45 s of discovery at 64x64)
            probe = pruning_group(graph, module, [0])
            if graph.failed_nodes and _touches_failed(graph, probe):
                visited.add(module)  # its coupled layers are tried, and named, in turn
                yield None, root_name, MEETS_FAILED
                continue
            group = pruning_group(graph, module, list(range(channels)))
        except ChannelsSpread:
            visited.add(module)
            yield None, root_name, SPREADS
            continue
        except Exception as err:
            visited.add(module)
            why = f"{type(err).__name__}: {err}"
            if graph.failed_nodes:  # most likely where its channels meet that reshape
                why += "; its channels may meet a reshape whose mapping failed"
            yield None, root_name, f"Torch-Pruning cannot group it ({why})"
            continue
        members: list[str] = []
        reaches_output = False
        touches_failed = False
        for dep, _ in group:
            node = dep.target
            if node in graph.failed_nodes or dep.source in graph.failed_nodes:
                touches_failed = True
            if isinstance(node.module, ops._OutputOp):
                reaches_output = True
            if graph.dg.is_out_channel_pruning_fn(dep.handler):
                visited.add(node.module)
                if len(node.outputs) == 0:
                    reaches_output = True
                if node.module in graph.module_names and isinstance(node.module, ROOT_TYPES):
                    members.append(graph.module_names[node.module])
        members.sort(key=lambda n: order[n])
        name = members[0] if members else root_name
        if reaches_output:
            yield None, name, "its channels are the model's output"
        elif touches_failed:
            yield None, name, MEETS_FAILED
        else:
            found = GraphGroup(
                name=name,
                channels=channels,
                members=tuple(members),
                channel_groups=channel_groups(graph, group),
            )
            yield found, name, None


def group_importance(graph: Graph, group: Any, criterion: str) -> torch.Tensor:
    """Importance of each channel of ``group`` (higher = keep) under ``criterion``."""
    importance: Any
    if criterion == "bn_scale":
        importance = tp.importance.BNScaleImportance()
    elif criterion == "taylor":
        importance = tp.importance.GroupTaylorImportance()
    else:
        importance = tp.importance.GroupMagnitudeImportance(p=1)
    with torch.no_grad(), contextlib.suppress(Exception):
        scores = importance(group)
        if scores is not None:
            return scores
    # BN-scale has nothing to score where a group has no batch norm, Taylor where no
    # gradient was computed: fall back to L1 magnitude, which always applies.
    with torch.no_grad():
        return tp.importance.GroupMagnitudeImportance(p=1)(group)

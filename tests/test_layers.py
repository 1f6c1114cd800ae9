"""The codebase reads as layers: each part's modules sit in stated tiers and import only
tiers below their own (imports in any form, inside functions and under TYPE_CHECKING
count), so no import cycles; docs/design.md states the tiers the code has; and nothing
outside a part (its tests aside) reaches into its private modules."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("spaces", "search", "evaluators", "latency_models", "experiments")

#: Each part's modules, bottom tier first: a module imports only modules of tiers below
#: its own (``test_each_part_imports_only_downward``). docs/design.md quotes these lines
#: (``tier_line``), so the order it states is the order the code has.
TIERS: dict[str, list[str]] = {
    "spaces": [
        "_dims _forward _graph onnx._onnx_files _param_shapes _registry",
        "onnx._onnx_int8 _plan _quant",
        "_cost onnx._export _students _surgery",
        "_techniques _transformer",
        "_apply _embedding_quant _space _transformer_prune",
        "_shapes _uniform",
        "__init__",
    ],
    "search": [
        "config._anchors config._constraints config._pipeline config._uri study._dbstudy _interrupt _log front._pareto config._registries run._timing",
        "tracking._tracking",
        "config._config tracking._learning",
        "trials._accelerator front._front tracking._results",
        "trials._trials trials._promotion study._storage",
        "trials._workers",
        "trials._backends trials._view",
        "run._callbacks run._savings run._sensitivity trials._surrogate",
        "run._mlflow trials._samplers",
        "run._setup",
        "run._report run._watch",
        "run._engine",
        "pipeline._measure pipeline._price",
        "pipeline._export",
        "pipeline._track",
        "pipeline._search",
        "__init__",
        "cli._common",
        "cli.results",
        "cli.explore cli.lut cli.pipeline",
        "cli.search",
        "cli.__init__",
        "cli.__main__",
    ],
    "evaluators": ["_base", "_accuracy _cost _hardware", "__init__"],
    "latency_models": [
        "bundle._corners price._estimate price._frame runner",
        "device._table ops._templates runner_torch",
        "ops._ops",
        "ops._arch calibrate._context calibrate._correction device._devices ops._op_models bundle._sparse price._transfer bundle._whole",
        "bundle._bundle calibrate._calibration",
        "calibrate._choose bundle._front_bundle price._pricer",
        "price._model",
        "measure._local",
        "measure._validate",
        "measure._profile",
        "measure._join",
        "__init__",
    ],
    "experiments": [
        "_training perception._models",
        "_tasks",
        "_digits _efficientnet _idx _imagefolder _text_data",
        "_fashion _text perception._scenes",
        "perception._formats",
        "perception._metrics",
        "perception._tasks",
        "perception.__init__",
        "__init__",
    ],
}


#: The folders of a part, bottom first: a module imports only modules of its own folder
#: or of folders below it (``test_each_folder_imports_only_downward``), so the folders
#: read as the stages the docs name. "" is the part's own folder (its ``__init__``, the
#: public face, sits above them all).
FOLDERS: dict[str, list[str]] = {
    "search": ["", "config", "front", "study", "tracking", "trials", "run", "pipeline", "cli"],
    "latency_models": ["", "ops", "device", "calibrate", "price", "bundle", "measure"],
    "experiments": ["", "perception"],
}

#: No folder holds more modules than this (STYLE: a folder past about 20 modules splits
#: into stages).
MAX_FOLDER_MODULES = 20


def _modules(part: str, root: Path) -> dict[str, Path]:
    """Every module of the part by dotted name inside it (``_config``, ``cli.lut``,
    ``__init__``, ``cli.__init__``)."""
    out = {}
    for path in sorted((root / part).rglob("*.py")):
        rel = path.relative_to(root / part).with_suffix("")
        out[".".join(rel.parts)] = path
    return out


def _imports(part: str, root: Path = ROOT) -> dict[str, set[str]]:
    """Module (dotted, inside the part) -> the modules of the same part it imports
    anywhere in its file, in any form: ``import frontier.P.x``, ``from frontier.P
    import x``, ``from frontier.P.x import y``, relative imports, subpackages, split
    over lines, inside functions or under TYPE_CHECKING. Importing a package (its own
    too) imports its ``__init__``."""
    names = _modules(part, root)
    prefix = f"frontier.{part}"

    def resolve(target: str) -> str | None:
        """The module a dotted target names: itself, or its package's ``__init__``."""
        if target in names:
            return target
        init = f"{target}.__init__" if target else "__init__"
        return init if init in names else None

    def inside(module: str) -> str | None:
        """``frontier.P.x.y`` -> ``x.y`` ('' for the part itself); None elsewhere."""
        if module == prefix or module.startswith(prefix + "."):
            return module.removeprefix(prefix).strip(".")
        return None

    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        package = name.split(".")[:-1]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets += [t for a in node.names if (t := inside(a.name)) is not None]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[: len(package) - node.level + 1]
                    target = ".".join([*base, *(node.module.split(".") if node.module else [])])
                elif (got := inside(node.module or "")) is not None:
                    target = got
                else:
                    continue
                for a in node.names:
                    # ``from X import a``: the module X.a where there is one, else a
                    # name of X (a module, or a package's __init__)
                    sub = f"{target}.{a.name}".strip(".")
                    targets.append(sub if sub in names else target)
            for target in targets:
                module = resolve(target)
                if module is not None:
                    found.add(module)
        graph[name] = found - {name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` (the modules in order), or []."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def _upward(graph: dict[str, set[str]], tiers: list[str]) -> list[str]:
    """Each import of ``graph`` that does not go to a lower tier, and each module the
    tiers leave out or name twice, as a line."""
    tier_of: dict[str, int] = {}
    problems = []
    for k, line in enumerate(tiers):
        for module in line.split():
            if module in tier_of:
                problems.append(f"{module}: in two tiers")
            tier_of[module] = k
    for module in sorted(set(graph) - set(tier_of)):
        if module.endswith(".__init__") and not graph[module]:
            continue  # a subpackage's docstring-only __init__ is nobody's tier
        problems.append(f"{module}: in no tier")
    for module in sorted(set(tier_of) - set(graph)):
        problems.append(f"{module}: a tier names it, the part has no such module")
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            if module in tier_of and target in tier_of and tier_of[target] >= tier_of[module]:
                problems.append(f"{module} (tier {tier_of[module]}) imports {target} "
                                f"(tier {tier_of[target]})")  # fmt: skip
    return problems


def _folder_problems(graph: dict[str, set[str]], folders: list[str]) -> list[str]:
    """Each import of ``graph`` into a folder above the importer's, as a line."""

    def folder(module: str) -> str:
        return module.rpartition(".")[0]

    rank = {f: k for k, f in enumerate(folders)}
    problems = [f"{m}: its folder is in no stated order" for m in graph if folder(m) not in rank]
    for module, targets in sorted(graph.items()):
        if module == "__init__" or folder(module) not in rank:
            continue
        for target in sorted(targets):
            if rank.get(folder(target), 0) > rank[folder(module)]:
                problems.append(f"{module} imports {target}, a folder above its own")
    return problems


def tier_line(part: str) -> str:
    """The part's tiers as docs/design.md states them: "`a`, `b`; `c`; ..."."""
    return "; ".join(", ".join(f"`{m}`" for m in line.split()) for line in TIERS[part])


@pytest.mark.parametrize("part", PARTS)
def test_no_import_cycle_inside_a_part(part: str) -> None:
    cycle = _cycle(_imports(part))
    assert not cycle, f"{part}: " + " -> ".join(cycle)


@pytest.mark.parametrize("part", PARTS)
def test_each_part_imports_only_downward(part: str) -> None:
    problems = _upward(_imports(part), TIERS[part])
    assert not problems, f"{part}:\n" + "\n".join(problems)


@pytest.mark.parametrize("part", sorted(FOLDERS))
def test_each_folder_imports_only_downward(part: str) -> None:
    problems = _folder_problems(_imports(part), FOLDERS[part])
    assert not problems, f"{part}:\n" + "\n".join(problems)


def test_a_planted_folder_inversion_is_found() -> None:
    graph = {"low._a": {"high._b"}, "high._b": {"low._a"}, "__init__": {"high._b"}}
    assert _folder_problems(graph, ["", "low", "high"]) == [
        "low._a imports high._b, a folder above its own"
    ]
    assert _folder_problems(graph, ["", "high", "low"]) == [
        "high._b imports low._a, a folder above its own"
    ]


@pytest.mark.parametrize("part", PARTS)
def test_no_folder_holds_more_than_twenty_modules(part: str) -> None:
    counts: dict[str, int] = {}
    for name in _modules(part, ROOT):
        folder = name.rpartition(".")[0]
        counts[folder] = counts.get(folder, 0) + 1
    crowded = {f"{part}/{f}": n for f, n in counts.items() if n > MAX_FOLDER_MODULES}
    assert not crowded, f"folders past {MAX_FOLDER_MODULES} modules: {crowded}"


@pytest.mark.parametrize("part", PARTS)
def test_the_design_doc_states_the_tiers_the_code_has(part: str) -> None:
    doc = " ".join((ROOT / "docs" / "design.md").read_text().split())
    assert tier_line(part) in doc, f"docs/design.md does not state {part}: {tier_line(part)}"


def test_the_checker_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "p" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_imports_reads_every_form(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "__init__.py": "from ._a import A\nfrom .sub import _c\n",
            "_a.py": "import frontier.p._b\nA = 1\n",
            "_b.py": "def f():\n    from frontier.p._d import (\n        D,\n    )\n",
            "_d.py": "import os\nfrom frontier.other import x\n",
            "sub/__init__.py": "",
            "sub/_c.py": "from .._d import D\nfrom frontier.p.sub import _e\n",
            "sub/_e.py": "from frontier.p import _d, A\n",  # A: a name of p's __init__
        },
    )
    assert _imports("p", root) == {
        "__init__": {"_a", "sub._c"},
        "_a": {"_b"},
        "_b": {"_d"},
        "_d": set(),
        "sub.__init__": set(),
        "sub._c": {"_d", "sub._e"},
        "sub._e": {"__init__", "_d"},
    }


@pytest.mark.parametrize(
    "files",
    [
        {"_a.py": "import frontier.p._b\n", "_b.py": "import frontier.p._a\n"},
        {"__init__.py": "from ._a import x\n", "_a.py": "from frontier.p import y\n"},
        {
            "_a.py": "from .sub._c import z\n",
            "sub/__init__.py": "",
            "sub/_c.py": "from .._a import x\n",
        },
    ],
    ids=["import-x", "through-init", "through-subpackage"],
)
def test_a_planted_cycle_is_found(tmp_path: Path, files: dict[str, str]) -> None:
    assert _cycle(_imports("p", _tree(tmp_path, files)))


def test_a_planted_tier_inversion_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"_low.py": "from ._high import x\n", "_high.py": "x = 1\n"})
    graph = _imports("p", root)
    assert _upward(graph, ["_high", "_low"]) == []
    assert _upward(graph, ["_low", "_high"]) == ["_low (tier 0) imports _high (tier 1)"]
    assert _upward(graph, ["_low"]) == ["_high: in no tier"]


def test_nothing_outside_a_part_imports_its_private_modules() -> None:
    private = re.compile(  # a private module at any depth of a part's folders
        r"from frontier\.(\w+)(?:\.[a-z]\w*)*\._\w+|import frontier\.(\w+)(?:\.[a-z]\w*)*\._\w+"
        r"|from frontier\.(\w+) import (?:[\w, ]+, )?_[a-z]\w*"
    )
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in (".venv", "build") or "site-packages" in rel.parts:
            continue
        if rel == Path("tests/test_layers.py"):  # its planted trees import a made-up part
            continue
        for m in private.finditer(path.read_text()):
            part = m.group(1) or m.group(2) or m.group(3)
            own = rel.parts[0] == part or rel.parts[:2] == ("tests", part)
            if not own:
                offenders.append(f"{rel}: {m.group(0)}")
    assert not offenders, "\n".join(offenders)


def _lines_matching(
    root: Path, pattern: re.Pattern[str], parts: tuple[str, ...] = PARTS, skip: tuple[str, ...] = ()
) -> list[str]:
    """``path:line: text`` of every line of ``parts`` that ``pattern`` finds, outside the
    paths starting with ``skip``."""
    found = []
    for part in parts:
        for path in _modules(part, root).values():
            rel = path.relative_to(root).as_posix()
            if rel.startswith(skip):
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line):
                    found.append(f"{rel}:{n}: {line.strip()}")
    return found


#: an f-string that writes ``metric@{device}`` by hand: a metric key built outside
#: ``MetricKey`` (``f"latency_ms@{device}"``), which lives in ``evaluators/_base.py``
HAND_BUILT_KEY = re.compile(r"""f["'][\w/]+@\{""")
KEY_OWNER = ("evaluators/_base.py",)


def test_metric_keys_come_only_through_metric_key(tmp_path: Path) -> None:
    """Every ``metric@device`` name is written by ``MetricKey`` (``MetricKey.name``), so
    one place decides how a device joins a metric's name."""
    assert _lines_matching(ROOT, HAND_BUILT_KEY, skip=KEY_OWNER) == []
    planted = _tree(tmp_path, {"search/x.py": 'key = f"latency_ms@{device}"\n'}) / "p"
    assert _lines_matching(planted, HAND_BUILT_KEY, skip=KEY_OWNER) == [
        'search/x.py:1: key = f"latency_ms@{device}"'
    ]


#: a read of a device table's metadata as a dict (``table.meta.get("cpu")``): outside
#: the table module, device facts come typed, through ``DeviceTable.device_meta``
RAW_META = re.compile(r"\w\.meta\b(?!\.json)")
#: the one module that reads and writes the metadata file, and a scene set's own
#: ``meta`` (not a device's)
META_OWNERS = ("latency_models/device/_table.py", "experiments/perception/")


def test_device_facts_are_read_typed_outside_the_table_module(tmp_path: Path) -> None:
    assert _lines_matching(ROOT, RAW_META, skip=META_OWNERS) == []
    planted = _tree(tmp_path, {"search/x.py": 'cpu = table.meta.get("cpu")\n'}) / "p"
    assert _lines_matching(planted, RAW_META, skip=META_OWNERS) == [
        'search/x.py:1: cpu = table.meta.get("cpu")'
    ]


def test_search_resolves_a_device_once_through_resolve_device() -> None:
    """The search reads a device from ``Config.typed`` (resolved once with the config) or,
    for a name from outside it (a CLI flag, a logged result), from ``resolve_device``:
    never by looking the name up again among this machine's devices."""
    assert _lines_matching(ROOT, re.compile(r"\blocal_device\("), parts=("search",)) == []


#: a module longer than this says why in its docstring ("Over 500 lines: ...")
MAX_MODULE_LINES = 500


@pytest.mark.parametrize("part", PARTS)
def test_a_module_over_500_lines_says_why(part: str) -> None:
    silent = []
    for path in _modules(part, ROOT).values():
        text = path.read_text()
        if text.count("\n") > MAX_MODULE_LINES:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if "over 500 lines" not in doc.lower():
                silent.append(f"{path.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    assert not silent, f"over {MAX_MODULE_LINES} lines without a stated reason: {silent}"

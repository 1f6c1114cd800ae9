"""The sections of ``benchmarks/REPORT.md``: each renders one benchmark's figures
(read from its JSON or its log under ``report-logs/``) as Markdown lines, with its
targets and plots. ``run_all.py`` runs and measures; this module only writes."""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

HERE = Path(__file__).resolve().parent


def search_section(task: dict[str, Any]) -> list[str]:
    """Hypervolume and wall time of each search method on one task, per seed."""
    labels = list(task["hv"])
    frame = pd.DataFrame(
        {
            "method@trials": labels,
            **{
                # a method stopped early has fewer seeds (an empty cell)
                f"HV seed {seed}": [(task["hv"][k][i:] or [None])[0] for k in labels]
                for i, seed in enumerate(task["seeds"])
            },
            "median HV": [task["median"][k] for k in labels],
            "median wall s": [statistics.median(task["wall_s"][k]) for k in labels],
        }
    )
    phases = ", ".join(
        f"{k} {statistics.median(v):.0f} s" for k, v in task.get("phases_s", {}).items()
    )
    median = task["median"]
    claims = [
        f"frontier@{n} is {median[f'frontier@{n}'] / median[other]:.2f}x {other}"
        for n, other in ((60, "random@60"), (60, "random@300"), (30, "random@300"))
        if f"frontier@{n}" in median and other in median
    ]
    return [
        f"### Search methods on {task['task']} (same engine, rungs and promotion)",
        "",
        "Hypervolume of each front, objectives normalised by the uncompressed model "
        "(reference point 1.1). frontier: the config's own sampler and anchors; the "
        "others exactly what they say (no anchors, except surrogate).",
        "" if not task.get("overrides") else f"Overrides: `{task['overrides']}`.",
        "",
        md_table(frame, 4),
        "",
        *([f"Median against median: {'; '.join(claims)}.", ""] if claims else []),
        *([f"Inside those wall times: {phases}.", ""] if phases else []),
    ]


def hv_bound_lines(bound: dict[str, Any]) -> list[str]:
    """What ``bench_hv_bound.py`` found: the largest hypervolume the task's space allows."""
    ratios = ", ".join(f"{k} {v:.3f}x" for k, v in bound["cost_ratios"].items())
    shares = ", ".join(f"{k} {v:.1%}" for k, v in bound["share_of_bound"].items())
    lines = [
        f"The largest hypervolume any front of this space can reach is "
        f"**{bound['hv_bound']:.4f}** (`bench_hv_bound.py`: the teacher's accuracy with the "
        f"space's most compressed plan, {ratios} of the baseline; the box is "
        f"{bound['hv_box']:.3f}). Each median as a share of it: {shares}."
    ]
    if bound.get("bound_over_random@60"):
        lines[0] += (
            f" No method can beat random@60's median by more than "
            f"{bound['bound_over_random@60']:.2f}x here."
        )
    return [*lines, ""]


def search_methods_section(search: dict[str, Any], logs: Path = HERE / "report-logs") -> list[str]:
    """Every task of ``search.json`` (``bench_search.py``, seeds run apart and merged), with
    the task's hypervolume bound where ``hv-bound-TASK.json`` holds one."""
    lines: list[str] = []
    for task in search.get("tasks", []):
        lines += search_section(task)
        bound = logs / f"hv-bound-{task['task']}.json"
        if bound.exists():
            lines += hv_bound_lines(json.loads(bound.read_text()))
    return lines


# -- reporting ----------------------------------------------------------------------------
def _fmt(v: Any, digits: int = 4) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


def md_table(frame: pd.DataFrame, digits: int = 4) -> str:
    cols = list(frame.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for _, row in frame.iterrows():
        lines.append("| " + " | ".join(_fmt(row[c], digits) for c in cols) + " |")
    return "\n".join(lines)


@dataclass(frozen=True)
class Target:
    """A figure's target: one value gives both the text a reader sees and the check."""

    at_least: bool
    bound: float
    #: how the bound reads ("95%", "5 s", "0.5 (goal)")
    text: str

    def __str__(self) -> str:
        return f"{'>=' if self.at_least else '<='} {self.text}"

    def met(self, value: float) -> bool:
        return value >= self.bound if self.at_least else value <= self.bound


def at_least(bound: float, text: str) -> Target:
    return Target(True, bound, text)


def at_most(bound: float, text: str) -> Target:
    return Target(False, bound, text)


def figure_rows(figs: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(figure, value, target, met) rows from the benchmarks' JSON figures."""
    rows: list[tuple[str, str, str, str]] = []

    def add(name: str, shown: str, target: Target | None = None, value: float = 0.0) -> None:
        """A row: ``shown`` is how the value reads, ``value`` what ``target`` checks."""
        if target is None:
            rows.append((name, shown, "-", "-"))
        else:
            rows.append((name, shown, str(target), "met" if target.met(value) else "MISSED"))

    sp = figs.get("spaces", {})
    if "discover_s" in sp:
        add(
            "discover(resnet50), median",
            f"{sp['discover_s']:.2f} s",
            at_most(5, "5 s"),
            sp["discover_s"],
        )
        add(
            "apply_plan(resnet50), median",
            f"{sp['apply_s']:.2f} s",
            at_most(2, "2 s"),
            sp["apply_s"],
        )
    ev = figs.get("evaluators", {})
    for family in ("mlp", "cnn"):
        f = ev.get(family)
        if not f:
            continue
        rho = f["short_vs_full_spearman"]
        add(
            f"digits {family}: short vs full rung, Spearman",
            f"{rho:.3f}",
            at_least(0.8, "0.8"),
            rho,
        )
        best = max((v, k) for k, v in f.items() if k.startswith("proxy_"))
        add(
            f"digits {family}: best proxy ({best[1][6:-9]}) vs full, Spearman",
            f"{best[0]:.3f}",
            at_least(0.5, "0.5 (goal)"),
            best[0],
        )
        add(
            f"digits {family}: one short evaluation, median",
            f"{f['short_wall_median_s']:.2f} s",
            at_most(3, "3 s"),
            f["short_wall_median_s"],
        )
    lat = figs.get("latency", {})
    for case in ("digits CNN", "mobilenet_v2 224"):
        c = lat.get(case)
        if not c:
            continue
        cal = c.get("calibrated", {})
        if cal:
            add(
                f"{case}: predictions within +/-10% of measured",
                f"{cal['within_10pct']:.0%}",
                at_least(0.95, "95%"),
                cal["within_10pct"],
            )
            add(
                f"{case}: Kendall tau predicted vs measured",
                f"{cal['kendall_tau']:.3f}",
                at_least(0.9, "0.9"),
                cal["kendall_tau"],
            )
            fewer = next((k for k in c if k.startswith("calibrated (")), None)
            if fewer and not fewer.endswith(f"({cal.get('models')} models)"):
                add(
                    f"{case}: calibrated on {fewer[len('calibrated (') : -1]} (side by side)",
                    f"{c[fewer]['within_10pct']:.0%} within, tau {c[fewer]['kendall_tau']:.3f}",
                )
            plain = next((k for k in c if k.startswith("uncorrected (")), None)
            if plain:
                add(
                    f"{case}: without the per-op correction (side by side)",
                    f"{c[plain]['within_10pct']:.0%} within, tau {c[plain]['kendall_tau']:.3f}",
                )
            rep = c["repeatability"]
            add(
                f"{case}: the same models measured twice (ceiling)",
                f"{rep['within']:.0%} within, tau {rep['tau']:.3f}",
            )
        if case.startswith("mobilenet"):
            add(
                "measuring the mobilenet_v2 bundle",
                f"{c['measure_s']:.0f} s ({c['ops']} ops)",
                at_most(600, "600 s"),
                c["measure_s"],
            )
    dev = figs.get("devices", {})
    for direction, d in dev.get("few_shot", {}).get("directions", {}).items():
        fs = d["few_shot"]
        add(
            f"few-shot table ({dev['few_shot']['few_shot_ops']} ops), {direction}: within +/-10%",
            f"{fs['within_10pct']:.0%} (MAPE {fs['mape']:.1%}, {d['method']['method']})",
            at_least(0.95, "95%"),
            fs["within_10pct"],
        )
    if "bundle_size" in dev:
        b = dev["bundle_size"]
        add(
            "mobilenet_v2 bundle, 60 + 50 whole models",
            f"{b['bundle_mib']:.1f} MiB",
            at_most(64 * 2**20, "64 MiB"),
            b["bundle_bytes"],
        )
    if "predict_resnet50_ms" in lat:
        ms = lat["predict_resnet50_ms"]
        add("predict one resnet50 plan, median", f"{ms:.2f} ms", at_most(5, "5 ms"), ms)
    se = figs.get("search", {})
    if "default_run_s" in se:
        s = se["default_run_s"]
        add(
            "frontier search digits-mcu, default budget, fresh",
            f"{s:.0f} s",
            at_most(600, "600 s"),
            s,
        )
    if "overhead_ms_per_trial" in se:
        o = se["overhead_ms_per_trial"]
        add("engine overhead per trial", f"{o:.1f} ms", at_most(50, "50 ms"), o)
    if "pick" in se:
        p = se["pick"]
        gap = abs(p["onnx_accuracy"] - p["logged_accuracy"]) * 100
        add("picked model: ONNX accuracy vs logged", f"{gap:.2f} points", at_most(0.5, "0.5"), gap)
        err = abs(p["measured_latency_ms"] / p["logged_latency_ms"] - 1) * 100
        add("picked model: measured latency vs logged", f"{err:.1f}%", at_most(10, "10%"), err)
    for task in se.get("tasks", []):
        m = task["median"]
        trials = next((k.split("@")[1] for k in m if k.startswith("frontier@")), None)
        if trials is None or f"random@{trials}" not in m:
            continue
        mine, rand = m[f"frontier@{trials}"], m[f"random@{trials}"]
        real = task["task"] != "digits-mcu"
        need = 1.05 if real else 1.0
        add(
            f"hypervolume on {task['task']}, median: frontier@{trials} / random@{trials}",
            f"{mine:.4f} / {rand:.4f} ({mine / rand:.3f}x)",
            at_least(need, f"{need:.2f}x"),
            mine / rand,
        )
        longest = max((k for k in m if k.startswith("random@")), key=lambda k: int(k[7:]))
        if real and longest != f"random@{trials}":
            add(
                f"hypervolume on {task['task']}, median: frontier@{trials} / {longest}",
                f"{mine:.4f} / {m[longest]:.4f}",
                at_least(1.0, "(moonshot)"),
                mine / m[longest],
            )
    return rows


def _plan_kind(plan: dict[str, Any]) -> str:
    pruned, sparse = bool(plan.get("prune")), bool(plan.get("sparsity"))
    return {
        (False, False): "dense",
        (True, False): "structured",
        (False, True): "sparse",
        (True, True): "structured + sparse",
    }[(pruned, sparse)]


def _activation(plan: dict[str, Any]) -> str:
    act = plan.get("activation")
    return "keep (SwishBeta)" if not act else str(act["to"])


def plot_front(
    trials: pd.DataFrame,
    x: str,
    y: str,
    path: Path,
    *,
    baseline: dict[str, float],
    hue: str | None = None,
    title: str = "",
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = trials[trials.state == "complete"]
    fig, ax = plt.subplots(figsize=(6, 4))
    groups = done.groupby(hue) if hue else [("trials", done)]
    for label, g in groups:
        ax.scatter(g[x], g[y], s=14, alpha=0.6, label=str(label))
    front = done[done.pareto].sort_values(x)
    ax.plot(front[x], front[y], "k-o", ms=5, mfc="none", label="front")
    if x in baseline and y in baseline:
        ax.scatter([baseline[x]], [baseline[y]], marker="*", s=150, c="red", label="FP32 model")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def scenario_section(name: str, s: dict[str, Any], out: Path) -> list[str]:
    cfg = s["config"]
    trials: pd.DataFrame = s["trials"]
    done = trials[trials.state == "complete"]
    base = s["baseline"]
    objectives = [o.name for o in cfg.objectives]
    lines = [
        f"### {name}",
        "",
        f"{cfg.description}. Budget: {len(trials)} trials "
        f"({', '.join(f'{k}={v}' for k, v in s['overrides'].items()) or 'config defaults'}), "
        f"{s['wall_s']:.0f} s including this machine's table measurement; "
        f"{int((trials.state == 'failed').sum())} failed; front of {len(s['pareto'])}; "
        f"hypervolume {s['hypervolume']:.4f}.",
        "",
    ]
    if s["constraints"]:
        lines += [
            f"Constraints (resolved against the FP32 model): {', '.join(s['constraints'])}.",
            "",
        ]
    for note in s["notes"]:
        lines += [f"> {note}", ""]
    cols = [c for c in ["trial", "rung", *objectives, *cfg.metrics] if c in s["pareto"].columns]
    shown = [c for c in dict.fromkeys(cols + [c for c in cfg.metric_names() if c in s["pareto"]])]
    fp32 = pd.DataFrame(
        [{"trial": "FP32 model", "rung": "-", **{c: base.get(c) for c in shown[2:]}}]
    )
    front = s["pareto"][shown].sort_values(objectives[0], ascending=False).head(12)
    lines += [md_table(pd.concat([fp32, front], ignore_index=True)), ""]
    x = next((o for o in objectives[1:] if o in done), objectives[-1])
    hue = None
    if name == "unsupported-op":
        trials["activation"] = [_activation(p) for p in trials.plan]
        hue = "activation"
    if name == "sparse-vs-structured":
        trials["kind"] = [_plan_kind(p) for p in trials.plan]
        hue = "kind"
    png = out / f"report-{name}.png"
    plot_front(trials, x, "accuracy", png, baseline=base, hue=hue, title=name)
    lines += [f"![{name}: accuracy against {x}]({png.name})", ""]
    lines += _scenario_extra(name, trials, s, out)
    return lines


def _scenario_extra(name: str, trials: pd.DataFrame, s: dict[str, Any], out: Path) -> list[str]:
    done = trials[trials.state == "complete"].copy()
    if name == "multi-device":
        from frontier.search import Objective, pareto_mask

        lines = ["Each device's own front, from the same trials:", ""]
        members = {}
        for device in ("local-cpu", "local-cpu-2t"):
            col = f"latency_ms@{device}"
            mask = pareto_mask(
                done[["accuracy", col]].to_numpy(),
                [Objective("accuracy", "maximize"), Objective(col, "minimize")],
            )
            members[device] = set(done[mask].trial)
        both = members["local-cpu"] & members["local-cpu-2t"]
        rows = []
        for t in sorted(members["local-cpu"] | members["local-cpu-2t"]):
            r = done[done.trial == t].iloc[0]
            rows.append(
                {
                    "trial": t,
                    "accuracy": r.accuracy,
                    "1 thread (ms)": r["latency_ms@local-cpu"],
                    "2 threads (ms)": r["latency_ms@local-cpu-2t"],
                    "2t / 1t": r["latency_ms@local-cpu-2t"] / r["latency_ms@local-cpu"],
                    "on 1t front": t in members["local-cpu"],
                    "on 2t front": t in members["local-cpu-2t"],
                }
            )
        lines += [
            md_table(pd.DataFrame(rows)),
            "",
            f"Models on both fronts: {len(both)}; "
            f"{len(members['local-cpu'] - both)} only on the 1-thread front, "
            f"{len(members['local-cpu-2t'] - both)} only on the 2-thread front.",
            "",
        ]
        return lines
    if name == "unsupported-op":
        g = done.groupby("activation").agg(
            trials=("trial", "count"),
            best_accuracy=("accuracy", "max"),
            median_npu_ms=("latency_ms@edge-npu", "median"),
            median_cpu_ms=("latency_ms@local-cpu", "median"),
            front_members=("pareto", "sum"),
        )
        return [
            "By activation: the Sigmoid inside SwishBeta falls back to the CPU on "
            "`edge-npu` and pays for moving its tensors both ways.",
            "",
            md_table(g.reset_index()),
            "",
        ]
    if name == "sparse-vs-structured":
        g = done.groupby("kind").agg(
            trials=("trial", "count"),
            best_accuracy=("accuracy", "max"),
            min_latency_ms=("latency_ms@local-cpu", "min"),
            median_latency_ms=("latency_ms@local-cpu", "median"),
            front_members=("pareto", "sum"),
        )
        return ["By kind of plan:", "", md_table(g.reset_index()), ""]
    return []


def real_scenarios_section(rows: list[dict[str, Any]]) -> list[str]:
    """The scenarios on real data (``scenarios.json``): the FP32 baseline (the teacher)
    and the member each scenario's question picks, its latency measured again beside the
    baseline's, and each target met or missed."""
    if not rows:
        return []
    table = []
    for r in rows:
        b, p = r.get("baseline") or {}, r.get("picked") or {}
        speedup = (
            b["latency_measured_ms"] / p["latency_measured_ms"]
            if p.get("latency_measured_ms") and b.get("latency_measured_ms")
            else None
        )
        table.append(
            {
                "scenario": r["scenario"],
                "accuracy": r["accuracy_kind"],
                "baseline acc": b.get("accuracy"),
                "picked acc": p.get("accuracy"),
                "MACs %": 100 * p["macs"] / b["macs"] if p.get("macs") and b.get("macs") else None,
                "size %": 100 * p["size_bytes"] / b["size_bytes"]
                if p.get("size_bytes") and b.get("size_bytes")
                else None,
                "baseline ms": b.get("latency_measured_ms"),
                "picked ms (table)": p.get("latency_ms"),
                "picked ms (measured)": p.get("latency_measured_ms"),
                "speed-up": speedup,
                "wall s": r.get("wall_s"),
            }
        )
    lines = [
        "### The scenarios on real data (`benchmarks/bench_scenarios.py`)",
        "",
        "Real test accuracy (ONNX Runtime on the exported models). The picked member is "
        "the feasible one at the full rung that the scenario's question asks for (each "
        "row's rule below); latencies measured again, baseline and picked side by side, "
        "1 thread, batch 1.",
        "",
        md_table(pd.DataFrame(table), 3),
        "",
    ]
    for r in rows:
        lines.append(f"- {r['scenario']}: picked {r.get('pick_rule', 'the most accurate')}")
        for what, met in (r.get("targets") or {}).items():
            lines.append(f"- {r['scenario']}: {what}: {'met' if met else 'MISSED'}")
    return [*lines, ""]


def devices_section(dev: dict[str, Any]) -> list[str]:
    """Few-shot tables both ways and the bundle size (``devices.json``)."""
    fs = dev.get("few_shot")
    if not fs:
        return []
    rows = []
    for direction, d in fs["directions"].items():
        for label, key in (
            (
                f"few-shot ({fs['few_shot_ops']} ops + {fs['few_shot_whole_models']} models)",
                "few_shot",
            ),
            ("base table as it is", "base_as_is"),
            ("base table x one scale (same models)", "base_scaled_once"),
            ("full table on its own device", "full_table_own_device"),
            ("the same models in two runs", "two_runs_agree"),
        ):
            r = d.get(key) or {}
            rows.append(
                {
                    "direction": direction,
                    "predictor": label,
                    "within +/-10%": r.get("within_10pct"),
                    "MAPE": r.get("mape"),
                    "tau": r.get("kendall_tau"),
                }
            )
    lines = [
        "### Device tables on a device nobody tuned for (`benchmarks/bench_devices.py`)",
        "",
        f"{fs['model']}: {fs['space_ops']} ops. Each few-shot table is measured by the "
        "runner in its own run and predicted through the other thread count's full "
        f"table; every row is judged on the same {fs['validation_models']} validation "
        "models, measured in the few-shot run. Methods chosen: "
        + "; ".join(f"{k}: {d['method']['method']}" for k, d in fs["directions"].items())
        + ". Measuring took (s): "
        + ", ".join(f"{k} {v:.0f}" for k, v in fs["measure_s"].items())
        + ".",
        "",
        md_table(pd.DataFrame(rows), 3),
        "",
    ]
    b = dev.get("bundle_size")
    if b:
        lines += [
            f"Bundle size: {b['model']}, {b['ops']} ops, {b['calibration_models']} calibration "
            f"and {b['validation_models']} validation models: {b['bundle_mib']:.2f} MiB "
            f"(weights drawn from seeds on the device; one whole model with its weights is "
            f"{b['one_whole_model_with_weights_bytes'] / 2**20:.1f} MiB). Written in "
            f"{b['write_s']:.0f} s.",
            "",
        ]
    if dev.get("gpu"):
        lines += [f"GPU: {dev['gpu']}.", ""]
    return lines


#: REPORT.md's last part: figures of benchmarks run on their own (hours, or services),
#: rendered from their logs by ``logged_sections`` (``--logged-only`` rewrites just it)
LOGGED_MARKER = "## Benchmarks run on their own (rendered from their logs)"


def _pct(v: Any) -> str:
    return "-" if v is None else f"{100 * float(v):.1f}%"


def latency_trust_section(trust: dict[str, Any]) -> list[str]:
    lines = [
        "### Latency a user can trust (`benchmarks/bench_latency_trust.py`)",
        "",
        "Each space's own table, 50 seeded random plans and the corner plans, against the "
        "timing protocol's measurement; the ceiling is the same models measured twice; "
        "'vs plain loop' is the share of models where the protocol and a plain ONNX "
        "Runtime loop agree within 5%. Since protocol 2 (2026-11-27) each plan's speed-up "
        "over the uncompressed model is measured in the same rounds and compared with the "
        "table's ('speed-ups'), and 'baseline' is the table's price of the uncompressed "
        "model against that measurement; '-' for runs before.",
        "",
        "| space | random within 10% | random MAPE | corners within 10% | corners MAPE | "
        "CV MAPE | ceiling (random) | vs plain loop (random) | speed-ups within 10% / "
        "MAPE (random) | baseline |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in trust.items():
        r, c = row["random"], row["corners"]
        ceiling = r.get("repeatability", {})
        plain = r.get("protocol_vs_plain_loop", {})
        speed = r.get("speedups", {})
        base = row.get("baseline_price_error")
        lines.append(
            f"| {name} | {_pct(r['within_10pct'])} | {_pct(r['mape'])} | "
            f"{_pct(c['within_10pct'])} | {_pct(c['mape'])} | {_pct(row.get('cv_mape'))} | "
            f"{_pct(ceiling.get('within_10pct'))} / {_pct(ceiling.get('mape'))} | "
            f"{_pct(plain.get('within_5pct'))} | "
            f"{_pct(speed.get('within_10pct'))} / {_pct(speed.get('mape'))} | "
            f"{'-' if base is None else f'{100 * base:+.1f}%'} |"
        )
    return [*lines, ""]


def first_table_section(runs: dict[str, Any]) -> list[str]:
    lines = [
        "### A first table in minutes (`benchmarks/bench_first_table.py`)",
        "",
        "A user's own model searched from a fresh device store: the search measures its "
        "`local-cpu` table, then runs trials; the clock stops at the first finished trial.",
        "",
        "| run | config, overrides | baseline cache | first trial after | machine, date |",
        "|---|---|---|---|---|",
    ]
    notes = runs.get("notes", [])
    for name, r in runs.items():
        if name == "notes":
            continue
        took = r.get("first_trial_s")
        lines.append(
            f"| {name} | {r['config']} {' '.join(r.get('overrides', []))} | "
            f"{r.get('cache', '')} | {'-' if took is None else f'{took:.0f} s'} | "
            f"{r.get('machine', '')}, {r.get('date', '')} |"
        )
    return [*lines, "", *(f"- {n}" for n in notes), *([""] if notes else [])]


#: an own model's first trial is due within this many seconds of launch (issue 69)
OWN_FIRST_TRIAL_S = 300


def _own_verdict(members_met: bool, first_trial_s: float | None) -> str:
    """Both targets of an own-model run: the compressed members, the first trial
    (``first_trial_s``: Frontier's part, the user's own training taken off)."""
    late = first_trial_s is not None and first_trial_s > OWN_FIRST_TRIAL_S
    if members_met and not late:
        return "met"
    return (
        "MISSED ("
        + ", ".join(w for w, miss in (("members", not members_met), ("first trial", late)) if miss)
        + ")"
    )


def training_done_s(said: list[str]) -> float:
    """When the user's own training of the baseline ended, in seconds since launch, from
    the lines a first-table run stamped (``[178 s] epoch 4/4 (171 s)``); 0 where the
    baseline was not trained in the run."""
    done = 0.0
    for line in said:
        m = re.match(r"\[(\d+(?:\.\d+)?) s\] epoch (\d+)/(\d+) ", line)
        if m and m.group(2) == m.group(3):
            done = float(m.group(1))
    return done


def _alone(first_tables: dict[str, Any], config: str) -> dict[str, Any] | None:
    """The latest ``bench_first_table.py`` run of ``config`` (None where there is none)."""
    runs = [r for k, r in first_tables.items() if k != "notes" and r.get("config") == config]
    return max(runs, key=lambda r: r.get("date", ""), default=None)


def own_models_section(
    runs: list[dict[str, Any]], first_tables: dict[str, Any] | None = None
) -> list[str]:
    """``bench_own_model.py``'s runs (``own-model-*.json``): a user's own model with the
    default config, 30 trials; the target is 3 compressed front members within the
    accuracy bound and the first trial within 5 minutes. A search of 30 trials runs for
    an hour or more, often beside other benchmarks; where ``first_tables``
    (``first-table.json``) holds a run of the same config (a fresh store, stopped at the
    first trial), its latest is shown too and the first-trial verdict is its."""
    lines = [
        "### A user's own model with the defaults (`benchmarks/bench_own_model.py`)",
        "",
        "Each a torchvision model with a one-channel stem, trained briefly here on 32x32 "
        "Fashion-MNIST, searched with the README's config (30 trials, "
        "`accuracy >= baseline - 0.05`). Target: at least 3 compressed front members within "
        "the bound, the first trial within 5 minutes (the user's own training aside). "
        "'First trial, fresh store' is the latest `bench_first_table.py` run of the config "
        "(its own search, stopped at the first trial); where there is one, the first-trial "
        "verdict is its.",
        "",
        "| config | baseline | bound | compressed members (at full rung) | within bound | "
        "first trial after (training) | first trial, fresh store (training) | wall | met |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for r in runs:
        front = r.get("front", [])
        within = sum(1 for m in front if m["compressed"] and m["accuracy"] >= r["accuracy_bound"])
        first, train = r.get("first_trial_s"), r.get("baseline_training_s", 0.0)
        frontier_s = None if first is None else first - train
        alone = _alone(first_tables or {}, r["config"])
        shown_alone = "-"
        if alone is not None and alone.get("first_trial_s") is not None:
            took, trained = alone["first_trial_s"], training_done_s(alone.get("said", []))
            shown_alone = f"{took:.0f} s ({trained:.0f} s), {alone.get('date', '')}"
            frontier_s = took - trained
        lines.append(
            f"| {r['config']} ({r.get('date', '2026-11-27')}) | "
            f"{r['baseline']['accuracy']:.4f} | {r['accuracy_bound']:.4f} | "
            f"{r['compressed_members']} ({r['compressed_members_at_full_rung']}) | {within} | "
            f"{'-' if first is None else f'{first:.0f} s ({train:.0f} s)'} | {shown_alone} | "
            f"{r['wall_s']:.0f} s | {_own_verdict(r['met'], frontier_s)} |"
        )
        if r.get("partial"):
            notes.append(f"{r['config']}: partial run, {r['partial']}")
        if r.get("note"):
            notes.append(f"{r['config']}: {r['note']}")
        notes += [f"{r['config']}: {n.removeprefix('frontier: ')}" for n in r["promotion_notes"]]
    return [*lines, "", *(f"- {n}" for n in notes), *([""] if notes else [])]


def cluster_section(cluster: dict[str, Any]) -> list[str]:
    lines = [
        "### How far one driver goes (`benchmarks/bench_driver.py`)",
        "",
        f"{cluster.get('date', '')}, {cluster.get('machine', '')}; instant trials, so only "
        "the driver's own work is timed.",
        "",
        "| set-up | trials | trials/s | workers kept busy at "
        + " / ".join(f"{t} s" for t in cluster.get("trial_seconds", []))
        + " a trial |",
        "|---|---|---|---|",
    ]
    for row in cluster.get("rows", []):
        busy = " / ".join(str(v) for v in row["workers_kept_busy"].values())
        lines.append(f"| {row['setup']} | {row['trials']} | {row['trials_per_s']} | {busy} |")
    lanes = cluster.get("mlflow_lanes_trials_per_s")
    if lanes:
        lines += [
            "",
            "MLflow write lanes against one tracking server (trials/s, alternating runs): "
            + "; ".join(f"{k} lane(s): {', '.join(map(str, v))}" for k, v in lanes.items()),
        ]
    if cluster.get("not_measured"):
        lines += ["", f"Not measured: {'; '.join(cluster['not_measured'])}"]
    return [*lines, ""]


def remote_devices_section(remote: dict[str, Any]) -> list[str]:
    """Held-out devices on a lent GPU machine (``bench_remote_device.py``)."""
    machine = [line for line in remote.get("machine", []) if line.startswith(("GPU", "Model name"))]
    lines = [
        "### Devices nobody tuned for, on a lent GPU machine (`benchmarks/bench_remote_device.py`)",
        "",
        "The machine: "
        + "; ".join(" ".join(re.sub(r"\(UUID[^)]*\)", "", m).split()) for m in machine)
        + ". Its CPU measured by the "
        "device runner (ONNX Runtime, 1 thread); its GPU by `runner_torch.py` (eager "
        "PyTorch, CUDA events; FP32 spaces: eager PyTorch has no INT8 kernels). Each "
        "predictor is judged on the device's own 50 validation plans.",
        "",
        "| space | device and predictor | within 10% | MAPE | tau | median ms |",
        "|---|---|---|---|---|---|",
    ]
    for space, rows in remote.get("spaces", {}).items():
        for label, r in rows.items():
            if "protocol vs plain loop" in label:
                continue
            cells = [(label, r.get("validation") or r.get("few_shot"))]
            if "few_shot" in r:
                cells += [
                    ("  local-cpu's table as it is", r["local_cpu_table_as_is"]),
                    (
                        f"  local-cpu's table x {r['local_cpu_scaled_once']['scale']}",
                        r["local_cpu_scaled_once"],
                    ),
                    ("  the same plans in two runs (ceiling)", r["two_runs_agree"]),
                ]
            for name, e in cells:
                median = r.get("median_validation_ms") if name == label else None
                lines.append(
                    f"| {space} | {name} | {_pct(e.get('within_10pct'))} | "
                    f"{_pct(e.get('mape'))} | {e.get('kendall_tau', '-')} | "
                    f"{'-' if median is None else f'{median:.4f}'} |"
                )
    plain = [
        f"{space} {label.replace(' protocol vs plain loop', '')}: median ratio "
        f"{r['median_ratio']}, {_pct(r['within_5pct'])} within 5% ({r['models']} models)"
        for space, rows in remote.get("spaces", {}).items()
        for label, r in rows.items()
        if "protocol vs plain loop" in label
    ]
    if plain:
        lines += ["", "The protocol against a plain loop on the same models: " + "; ".join(plain)]
    between = remote.get("between_runs", {})
    if between:
        lines += [
            "",
            "The same validation plans in two leases of the machine (run 1: the CPU runners "
            "and the GPU runner side by side; run 2: one at a time): "
            + "; ".join(
                f"{name.removesuffix('.csv')}: {_pct(r['within_10pct'])} within 10%, "
                f"MAPE {_pct(r['mape'])}, median ratio {r['median_ratio']}"
                for name, r in between.items()
            ),
        ]
    corner_rows = [
        {"space": space, "device": label.split(" ")[0], **r["corners_ms"]}
        for space, rows in remote.get("spaces", {}).items()
        for label, r in rows.items()
        if r.get("corners_ms")
    ]
    if corner_rows:
        lines += [
            "",
            "What the uniform plans measured (ms; every layer at one prune ratio and one "
            "precision):",
            "",
            md_table(pd.DataFrame(corner_rows), 4),
        ]
    return [*lines, ""]


def remote_models_section(figures: dict[str, Any]) -> list[str]:
    """Whole scenario models on a lent GPU machine's CPU and GPU, and here
    (``bench_remote_device.py models-report``): each a speed-up against its baseline
    measured in the same series, then the spread over series."""
    machine = [
        " ".join(re.sub(r"\(UUID[^)]*\)", "", line).split())
        for line in figures.get("machine", [])
        if line.startswith(("GPU", "Model name"))
    ]
    labels = figures.get("labels", {})
    lines = [
        "### Scenario models on a lent GPU machine (`bench_remote_device.py models-report`)",
        "",
        f"The machine: {'; '.join(machine)}. Each series is one timing of every model of a "
        "bundle, one process at a time: the protocol (device runner) or a plain loop on one "
        "core at 1 thread, and eager PyTorch at batch 1 on the GPU (no INT8 kernels there). "
        "Speed-ups are against the bundle's baseline within the same series; the range is "
        "over series (leases and methods); ms and speed-ups are medians, with the range.",
        "",
        "| model | local-cpu ms | speed-up here | gpu-host-cpu ms | speed-up there | series "
        "here / there | gpu-cuda ms | speed-up on the GPU |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def cells(device: str, bundle: str, key: str) -> tuple[list[float], list[float]]:
        ms, gains = [], []
        for s in figures["series"]:
            if s["device"] == device and s["bundle"] == bundle and key in s["ms"]:
                ms.append(s["ms"][key])
                base = s["ms"].get(figures["reference"][bundle])
                if base:
                    gains.append(base / s["ms"][key])
        return ms, gains

    def med(values: list[float], form: str, spread: bool = False) -> str:
        if not values:
            return "-"
        text = form.format(statistics.median(values))
        return text + (
            f" ({form.format(min(values))}-{form.format(max(values))})" if spread else ""
        )

    for bundle, ref in figures.get("reference", {}).items():
        keys = sorted({k for s in figures["series"] if s["bundle"] == bundle for k in s["ms"]},
                      key=lambda k: (k != ref, labels.get(k, k)))  # fmt: skip
        for key in keys:
            here, here_gain = cells("local-cpu", bundle, key)
            there, there_gain = cells("gpu-host-cpu", bundle, key)
            gpu, gpu_gain = cells("gpu-cuda", bundle, key)
            lines.append(
                f"| {labels.get(key, key)} | {med(here, '{:.4f}', True)} | "
                f"{med(here_gain, '{:.2f}x', True)} | {med(there, '{:.4f}', True)} | "
                f"{med(there_gain, '{:.2f}x', True)} | {len(here)} / {len(there)} | "
                f"{med(gpu, '{:.3f}')} | {med(gpu_gain, '{:.2f}x')} |"
            )
    return [*lines, ""]


def learn_section(learn: dict[str, Any]) -> list[str]:
    """A table that learnt one search's measured front, predicting another's
    (``bench_learn.py``)."""
    lines = [
        "### What learning a measured front changes (`benchmarks/bench_learn.py`)",
        "",
        f"{learn['config']}, {learn['trials']} trials a search, seeds {learn['seeds']}; the "
        f"table holds {learn['calibration_models_before']} calibration models before "
        "learning. Each row: the table after learning search A's measured front, "
        "predicting search B's front members, against their measurements.",
        "",
        "| learnt from | predicting | members | within 10% before / after | "
        "MAPE before / after | CV MAPE before / after |",
        "|---|---|---|---|---|---|",
    ]
    for r in learn["rows"]:
        b, a = r["before"], r["after"]
        lines.append(
            f"| seed {r['learnt_from']} | seed {r['predicting']} | {r['members']} | "
            f"{_pct(b['within_10pct'])} / {_pct(a['within_10pct'])} | {_pct(b['mape'])} / "
            f"{_pct(a['mape'])} | {_pct(r['cv_mape_before'])} / {_pct(r['cv_mape_after'])} |"
        )
    return [*lines, ""]


def scenario_runs_section(rows: list[dict[str, Any]]) -> list[str]:
    """Each scenario's last ``bench_scenarios.py`` run (``scenarios.json``): accuracy on
    validation (what chose) and test (reported only), where the search's time went, and
    whether promotion measured the end of the front the question asks for."""
    table, notes = [], []
    for r in rows:
        b, p, t = r.get("baseline") or {}, r.get("picked") or {}, r.get("time_s") or {}
        search_s = r.get("search_s")
        sens = t.get("sensitivity_s")
        table.append(
            {
                "scenario": r["scenario"],
                "baseline val / test": _pair(b.get("accuracy_val"), b.get("accuracy_test")),
                "pick val / test": _pair(p.get("accuracy_val"), p.get("accuracy_test")),
                "search s": _num(search_s, "{:.0f}"),
                "sensitivity s (share)": "-"
                if sens is None or not search_s
                else "cached (< 1 s)"
                if sens < 1
                else f"{sens:.0f} ({100 * sens / search_s:.0f}%)",
                "proposal median s": _num(t.get("sampler_propose_median_s"), "{:.2f}"),
                "proposals s in all": _num(t.get("sampler_propose_s"), "{:.0f}"),
            }
        )
        if r.get("note"):
            notes.append(f"- {r['scenario']}: {r['note']}")
        cover = r.get("promotion_coverage") or {}
        if cover.get("by"):
            notes.append(
                f"- {r['scenario']} (pick by {cover['by']}): {cover['cheaper_than_pick']} trials "
                f"cheaper than the pick; {cover['cheaper_went_up']} of them measured at a higher "
                f"rung; {cover.get('cheaper_left_below_within_2_points', '-')} left at the first "
                "rung within 2 points of the accuracy bound"
            )
    return [
        "### The scenarios, last run on their own (`benchmarks/bench_scenarios.py`)",
        "",
        "Accuracy on validation (what every rung, the front and the pick used) and on the "
        "test split (measured once on the exported pick, never used to choose); '-' where "
        "a row predates the split. Time: the search's own accounting; 'cached': the "
        "sensitivity rows were read back from an earlier run of the same teacher and "
        "space (docs/findings.md names the run that computed them).",
        "",
        md_table(pd.DataFrame(table), 3),
        "",
        *notes,
        "",
    ]


def baseline_threads_section(result: dict[str, Any]) -> list[str]:
    """Seconds a baseline training step at one thread and at the driver's threads,
    idle and beside busy processes (``bench_baseline_threads.py``)."""
    rows = []
    for run in result.get("runs", []):
        n = str(run["driver_threads"])
        busy = next((k for k in run if k.startswith("beside_")), None)
        rows.append(
            {
                "scenario": run["scenario"],
                "steps": run["steps_per_baseline"],
                "idle, 1 thread (s/step)": run["idle"]["1"]["step_s_median"],
                f"idle, {n} (s/step)": run["idle"][n]["step_s_median"],
                f"baseline at 1 / {n} (min)": (
                    f"{run['baseline_minutes_idle']['1']:.0f} / "
                    f"{run['baseline_minutes_idle'][n]:.0f}"
                ),
                f"busy, 1 / {n} (s/step)": (
                    "-"
                    if busy is None
                    else f"{run[busy]['1']['step_s_median']:.2f} / "
                    f"{run[busy][n]['step_s_median']:.2f}"
                ),
            }
        )
    if not rows:
        return []
    return [
        "### A baseline the search trains: its threads (`benchmarks/bench_baseline_threads.py`)",
        "",
        f"Training steps of each scenario's baseline model as its recipe runs them "
        f"(medians of {result['repeats']} timings of {result['steps_per_timing']} steps, "
        f"alternated; {result['date'][:16].replace('T', ' ')}, {result['commit']}). The "
        "driver now trains on the cores its trials will share (`backend.workers` x "
        "`threads_per_trial`); busy: beside two busy-looping processes.",
        "",
        md_table(pd.DataFrame(rows), 3),
        "",
    ]


def pipeline_section(result: dict[str, Any]) -> list[str]:
    """A pipeline of three own models: the front run here frame by frame beside its
    prediction, and a placement on two runtimes measured beside one
    (``bench_pipeline.py``)."""
    rows = [
        {
            "trial": "uncompressed" if m["number"] < 0 else m["number"],
            "predicted (ms)": m["predicted_ms"],
            "measured (ms)": m["measured_ms"],
            "pred/meas": m["predicted_ms"] / m["measured_ms"],
            "speed-up predicted": m["speedup_predicted"],
            "speed-up measured": m["speedup_measured"],
        }
        for m in result["measured"]
    ]
    place = result["placement"]
    summary = result["summary"]
    best = ", ".join(f"{s} on {d}" for s, d in place["best_placement"]["placement"].items())
    return [
        "### A pipeline of three models on one frame (`benchmarks/bench_pipeline.py`)",
        "",
        f"{result['date'][:16].replace('T', ' ')}, {result.get('commit', '')}: "
        f"`{result['command']}`. Three users' own models (MNASNet 0.5, MobileNetV3-Small, "
        "ResNet-18 on 32x32 frames) read one frame; each may run on `local-cpu` (ONNX "
        "Runtime) or `local-openvino` (OpenVINO), 1 thread each; "
        + (
            f"{result['trials']} joint trials at the proxy rung, searched by an earlier run "
            "whose journal this one resumed (the front priced again as the search prices "
            "it now, then measured)"
            if result.get("resumed")
            else f"{result['trials']} joint trials at the proxy rung ({result['search_s']:.0f} s; "
            "stage plans scored: "
            + ", ".join(f"{k} {v}" for k, v in result["stage_plans_scored"].items())
            + ")"
        )
        + ". The front and the uncompressed pipeline run here frame by frame, one thread "
        f"per device: frames within 10% of their prediction {summary['frames_within_10pct']}, "
        f"speed-ups within 10% {summary['speedups_within_10pct']}.",
        "",
        md_table(pd.DataFrame(rows), 3),
        "",
        f"Placement: the uncompressed stages all on `local-cpu` were predicted "
        f"{place['all_on_local_cpu']['predicted_ms']:.3g} ms and measured "
        f"{place['all_on_local_cpu']['measured_ms']:.3g} ms; in the placement the tables "
        f"price fastest ({best}) predicted {place['best_placement']['predicted_ms']:.3g} ms, "
        f"measured {place['best_placement']['measured_ms']:.3g} ms: a gain of "
        f"{summary['placement_gain_predicted']:.2f}x predicted, "
        f"{summary['placement_gain_measured']:.2f}x measured. The same pipeline run twice "
        f"in the same rounds differed by {100 * place['ceiling_same_pipeline_twice']:+.1f}%. "
        "A plain loop of ONNX Runtime sessions over the uncompressed stages, one after "
        f"another, ran {place['plain_loop_all_on_local_cpu_ms']:.3g} ms a frame.",
        "",
        *_context_line(result.get("stage_context_ms")),
    ]


#: the perception scenario's targets: each stage's allowed loss (points of its metric)
#: and the teacher it must reach
PERCEPTION_STAGES = {
    "det": ("mAP@0.5", 0.01, 0.5),
    "seg": ("mIoU", 0.01, 0.6),
    "depth": ("delta<1.25", 0.02, 0.8),
}


def perception_section(result: dict[str, Any]) -> list[str]:
    """The perception scenario: the teacher pipeline, the joint search's pick and the
    hand split, measured here and scored on the test split (``bench_perception.py``)."""
    teacher, pick, hand = result["teacher"], result.get("pick"), result.get("best_hand")
    tests = result.get("test", {})
    rows = []
    for stage, (metric, allowed, floor) in PERCEPTION_STAGES.items():
        t = tests.get("teacher", {}).get(stage)
        p = tests.get("pick", {}).get(stage)
        rows.append(
            {
                "stage": stage,
                "metric": metric,
                "teacher (test)": t,
                "teacher >= target": f"{floor}: "
                + ("met" if t is not None and t >= floor else "MISSED"),
                "pick (test)": p,
                "drop (points)": None if t is None or p is None else 100 * (t - p),
                "allowed": 100 * allowed,
                "met": "met"
                if t is not None and p is not None and t - p <= allowed + 1e-9
                else "MISSED",
                "pick's plan": _plan_words((pick or {}).get("plans", {}).get(stage, {})),
                "placed on": (pick or {}).get("placement", {}).get(stage, ""),
            }
        )

    def frame(row: dict[str, Any] | None, label: str) -> dict[str, Any]:
        if row is None:
            return {"pipeline": label}
        values = row["values"]
        return {
            "pipeline": label,
            "placement": ", ".join(f"{s} {d}" for s, d in row["placement"].items()),
            "predicted (ms)": values["latency_ms@frame"],
            "measured (ms)": row.get("measured_ms"),
            "energy (mJ/frame)": values.get("energy_mj@frame"),
            "power at 10 fps (W)": values.get("power_w@frame"),
            "accuracy kept": values.get("accuracy_kept"),
        }

    frames = pd.DataFrame(
        [frame(teacher, "teacher"), frame(pick, "joint pick"), frame(hand, "hand split, fastest")]
    )
    speed = None
    if pick and pick.get("measured_ms") and teacher.get("measured_ms"):
        speed = pick["measured_ms"] / teacher["measured_ms"]
    hv = result["hypervolume"]
    seconds = result["seconds"]
    return [
        "### Perception: detection, segmentation and depth on one frame "
        "(`benchmarks/bench_perception.py`)",
        "",
        f"{result['date'][:16].replace('T', ' ')}, {result.get('commit', '')}: "
        f"`{result['command']}`. The `perception-pipeline` experiment: three teachers trained "
        "here on the scene set, tables of `local-cpu` (ONNX Runtime) and `local-openvino` "
        f"measured here, {result['trials']} joint trials ({result['placements_priced']} "
        f"placements of the uncompressed stages priced; stage plans scored: "
        + ", ".join(f"{k} {v}" for k, v in result["stage_plans_scored"].items())
        + f"), then the hand split: each stage searched alone on `local-cpu` "
        f"({result['hand_trials_each']} trials each), bound to half its own uncompressed "
        f"latency; {result['hand_combinations']} combinations of their fronts (a stage "
        "whose front is empty stands in uncompressed"
        + (
            ": fronts of " + ", ".join(f"{k} {v}" for k, v in result["hand_front_sizes"].items())
            if "hand_front_sizes" in result
            else ""
        )
        + f"), {result['hand_feasible']} within every stage's bound. Wall time "
        f"{seconds['total'] / 60:.0f} min (teachers, tables and set-up "
        f"{seconds['prepare'] / 60:.0f}, joint {seconds['joint'] / 60:.0f}, hand split "
        f"{seconds['hand'] / 60:.0f}); target 90 min: "
        + ("met." if seconds["total"] <= 5400 else "MISSED."),
        "",
        md_table(pd.DataFrame(rows), 4),
        "",
        md_table(frames, 4),
        "",
        "Targets: the pick runs in under half the teacher pipeline's measured frame time: "
        + (
            f"{speed:.2f} of it, " + ("met" if speed < 0.5 else "MISSED")
            if speed is not None
            else "not measured"
        )
        + (
            f"; the teacher pipeline run twice in the same rounds differed by "
            f"{100 * result['ceiling_teacher_twice']:+.1f}%"
            if result.get("ceiling_teacher_twice") is not None
            else ""
        )
        + f". Joint beats hand split (hypervolume of latency_ms@frame and accuracy_kept "
        f"against the teacher, both priced on the joint search's tables): joint "
        f"{hv['joint']:.4f}, hand {hv['hand']:.4f}, "
        + ("met." if hv["joint"] > hv["hand"] else "MISSED."),
        "",
        *_context_line(result.get("stage_context_ms")),
    ]


def _plan_words(plan: dict[str, Any]) -> str:
    """A stage plan in a few words: how much is pruned, which bits."""
    if not plan:
        return ""
    prune = {k: float(v) for k, v in (plan.get("prune") or {}).items() if float(v) > 0}
    weight = plan.get("weight_bits") or {}
    bits = sorted({int(v) for v in weight.values()}) if isinstance(weight, dict) else []
    parts = [
        f"{len(prune)} groups pruned, {sum(prune.values()) / len(prune):.2f} on average"
        if prune
        else "not pruned"
    ]
    if bits:
        parts.append("weights " + "/".join(map(str, bits)) + " bit")
    return ", ".join(parts)


def _context_line(context: dict[str, dict[str, float]] | None) -> list[str]:
    """What running inside a frame cost each stage over running alone, as the search
    measured it at the start and added to its table latency."""
    if not context:
        return ["Stages priced by their tables alone (no in-frame cost measured).", ""]
    parts = [
        f"{s} {', '.join(f'{ms:.3g} ms on {d}' for d, ms in on.items())}"
        for s, on in context.items()
    ]
    return [
        "In-frame cost measured at the start on the uncompressed stages and added to a "
        "stage's table latency where it shares its device: " + "; ".join(parts) + ".",
        "",
    ]


def _run_start(note: str) -> str:
    """``YYYY-MM-DD HH:MM`` where a scenario row's note starts with the run's time."""
    found = re.match(r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2})", note)
    return found.group(1) if found else ""


def reprice_section(result: dict[str, Any]) -> list[str]:
    """Scenario runs' fronts priced again on one table (``bench_reprice.py``): were the
    runs apart, or only the tables they were priced on?"""
    table = result.get("table") or {}
    rows = [
        {
            # the run's own start where its note gives it, else the commit's date
            "run": _run_start(run.get("note") or "") or run["logged"][:16].replace("T", " "),
            "row logged at": run["rev"],
            "top-rung feasible": run["candidates"],
            "HV as logged": f"{run['hypervolume_logged']:.4f}",
            "HV on one table": f"{run['hypervolume_one_table']:.4f}",
            "latency there / logged (median)": run["latency_one_table_vs_logged_median"],
        }
        for run in result.get("runs", [])
    ]
    if not rows:
        return []
    return [
        f"### {result['scenario']}'s runs on one table (`benchmarks/bench_reprice.py`)",
        "",
        "Every top-rung feasible trial each run logged, its plan priced again on one "
        f"{table.get('device')} table (bundle {table.get('bundle')}, measured "
        f"{str(table.get('measured'))[:16].replace('T', ' ')}; baseline "
        f"{table.get('baseline_latency_ms', float('nan')):.2f} ms) with its logged "
        "validation accuracy and size; the hypervolume computed as the search does. "
        "Nothing trained or timed again. The table as it stands holds "
        f"{table.get('learned_models', '?')} learnt front members (every space's; a "
        "search's front joins its table when it ends), so a run's latencies priced "
        "there differ from those it logged, its own too.",
        "",
        md_table(pd.DataFrame(rows), 4),
        "",
    ]


def _pair(a: Any, b: Any) -> str:
    return " / ".join(_num(v, "{:.4f}") for v in (a, b))


def _num(value: Any, form: str) -> str:
    return "-" if value is None else form.format(value)


def runtimes_section(runs: dict[str, Any]) -> list[str]:
    """A second runtime (``bench_latency_trust.py --device local-openvino``): its table
    against a plain loop of that runtime, and the same plans' speed-ups on each runtime."""
    from frontier.latency_models import error_summary

    lines = [
        "### A second runtime: OpenVINO (`bench_latency_trust.py --device local-openvino`)",
        "",
        "INT8 layers exported in QDQ format for OpenVINO and in QOperator format for ONNX "
        "Runtime (the same quantization). 'vs plain loop': the table's prediction of each "
        "seeded random plan against a plain OpenVINO loop (one compiled model per plan, 1 "
        "thread, latency hint, f32, warm, median), target >= 95% within 10%; 'ceiling': "
        "the protocol's two passes over the same plans; speed-ups over the uncompressed "
        "model as the table predicts them and as each runtime's plain loop measures them "
        "(OpenVINO / ONNX Runtime, each over its own uncompressed model).",
        "",
        "| space | plans | vs plain loop within 10% / MAPE | | ceiling within 10% | "
        "speed-ups within 10% | all-INT8 | half-pruned FP32 | half-pruned INT8 | "
        "the scenario's pick | fastest random plan |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, run in runs.items():
        rows = [r for r in run["rows"] if r["set"] == "random"]
        if not rows:
            continue
        plain = error_summary([r["predicted_ms"] for r in rows], [r["plain_loop_ms"] for r in rows])
        speed = error_summary(
            [r["predicted_speedup"] for r in rows], [r["plain_speedup"] for r in rows]
        )
        within = plain["within_10pct"]
        plans = {r["plan"]: r for r in run["rows"] if r["set"] == "corner"}
        pick = next((r for r in run["rows"] if r["set"] == "pick"), None)
        fastest = max(rows, key=lambda r: r["plain_speedup"])

        def pair(r: dict[str, Any] | None) -> str:
            if r is None or "plain_onnxruntime_speedup" not in r:
                return "-"
            return f"{r['plain_speedup']:.2f}x / {r['plain_onnxruntime_speedup']:.2f}x"

        lines.append(
            f"| {name} | {len(rows)} | {_pct(within)} / {_pct(plain['mape'])} | "
            f"{'met' if within >= 0.95 else 'MISSED'} | "
            f"{_pct(run['random']['repeatability']['within_10pct'])} | "
            f"{_pct(speed['within_10pct'])} | {pair(plans.get('prune 0, int8'))} | "
            f"{pair(plans.get('prune 0.5, fp32'))} | {pair(plans.get('prune 0.5, int8'))} | "
            f"{pair(pick)} | {pair(fastest)} |"
        )
    return [*lines, ""]


def gpu_section(tables: dict[str, Any], accel: dict[str, Any] | None) -> list[str]:
    """The GPU path (``bench_gpu.py``): each GPU table against its validation plans'
    graph replays, and one trial's training on the GPU against this CPU."""
    machine = tables.get("machine", {})
    where = machine.get("gpu") or f"{machine.get('device', '?')} (a dry run, not a GPU)"
    rows = []
    for name, t in tables["tables"].items():
        v = t.get("validation", {})
        within = v.get("within_10pct")
        rows.append({
            "table": name, "plans": v.get("samples", 0),
            "within +/-10%": "-" if within is None else f"{within:.0%}",
            "target": ">= 95%",
            "": "-" if within is None else ("met" if within >= 0.95 else "MISSED"),
            "MAPE": "-" if v.get("mape") is None else f"{v['mape']:.1%}",
            "Kendall tau": v.get("kendall_tau"),
            "median plan ms": t.get("median_validation_ms"),
        })  # fmt: skip
    lines = [
        "### The GPU path, in one call (`benchmarks/bench_gpu.py`)",
        "",
        f"On {where}; {tables.get('travel_mib')} MiB carried. Each table's predictions "
        "of its validation plans against their CUDA-graph replays there.",
        "",
        md_table(pd.DataFrame(rows), 4),
        "",
    ]
    if accel:
        train = []
        for model, r in accel.get("models", {}).items():
            speedup = r.get("speedup_gpu_over_cpu")
            train.append({
                "model": model, "trial on GPU s": r.get("trial_s_gpu"),
                "trial on this CPU s": r.get("trial_s_cpu"),
                "speed-up": "-" if speedup is None else f"{speedup:.1f}x", "target": ">= 20x",
                "": "-" if speedup is None else ("met" if speedup >= 20 else "MISSED"),
                "host syncs a step": r.get("host_syncs_per_step"),
            })  # fmt: skip
        lines += [
            "One trial's training (the scenario's full rung, through `distill`), from "
            "seconds per step measured after warm-up steps:",
            "",
            md_table(pd.DataFrame(train), 4),
            "",
        ]
    return lines


def residuals_section(results: dict[str, Any]) -> list[str]:
    """Where a fresh table's error comes from (``bench_residuals.py``)."""
    lines = [
        "### Where a table's error comes from (`benchmarks/bench_residuals.py`)",
        "",
        "Fresh `local-cpu` tables of torchvision models no scenario uses (untrained, 96x96, "
        "prune 0/0.25/0.5, INT8 or FP32 per layer), each plan timed by a plain ONNX Runtime "
        "loop in two passes (each visit beside the uncompressed model; the second pass is "
        "the ceiling). 'isolated': each op priced as its row ran alone; 'chain': the layout "
        "conversions a run of kernels in one layout pays once taken out (`chain_ms`); "
        "'sum': without the table's calibration; 'chain, before': the same table's "
        "calibration chosen without the affine line (entries from 2026-12-01 on), beside "
        "the one it chose. The 2026-12-01 tables were calibrated on spread plans (each "
        "drawing its own INT8 share and prune mix; tried that day and left out); 'chain, "
        "uniform plans' (#3) is a second fresh table of the same hour calibrated on "
        "uniform plans in their place. resnet18 #4-#9 (2026-12-06) are fresh tables of "
        "the code since then (uniform plans, 60 calibration models each) on a machine that "
        "drifted: judge their ms by the ceiling column, their speed-ups by theirs; 'chain, "
        "anchored' (#7-#9) is the chosen calibration anchored on the table's measured "
        "uncompressed model (`LatencyModel(anchor=True)`, off by default). "
        "Errors by group and per unit are of "
        "speed-ups over the uncompressed model (a change of the machine's speed moves no "
        "speed-up).",
        "",
        "| model, table | ceiling: random ms / speed-ups within 10% | pricing | random within "
        "10% / MAPE | corners within 10%: ms / speed-up | random speed-ups within 10% / MAPE | "
        "median speed-up error by group | speed-up error per unit: pruned, INT8, boundary, "
        "odd channels |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, r in results.items():
        pricings = (
            "chain, uniform plans",
            "chain, before",
            "chain",
            "chain, anchored",
            "isolated",
            "isolated sum",
            "chain sum",
        )
        for pricing in (p for p in pricings if p in r):
            s = r[pricing]
            label = pricing
            if pricing == "chain" and r.get("calibration_before"):
                label = f"chain ({r['calibration']})"
            elif pricing == "chain, before":
                label = f"chain, before ({r['calibration_before']})"
            elif pricing == "chain, uniform plans":
                label = f"chain, uniform plans ({r['calibration_uniform']})"
            groups_text = ", ".join(f"{g} {e:+.1%}" for g, e in s["group_median_error"].items())
            line = s["residual_line"]
            lines.append(
                f"| {key} | {r['ceiling']['within_10pct']:.0%} / "
                f"{r['speedup_ceiling']['within_10pct']:.0%} | {label} | "
                f"{s['random']['within_10pct']:.0%} / {s['random']['mape']:.1%} | "
                f"{s['corners_within_10pct']} / {s['corner_speedups_within_10pct']} of 6 | "
                f"{s['speedups']['within_10pct']:.0%} / {s['speedups']['mape']:.1%} | "
                f"{groups_text} | {line['share_pruned']:+.3f}, {line['share_int8']:+.3f}, "
                f"{line['boundaries']:+.4f}, {line['share_odd_channels']:+.3f} |"
            )
    return [*lines, ""]


#: a space's distinct ops are enumerated within this many seconds (issue 68)
ENUMERATE_TARGET_S = 60.0


def every_model_section(logged: dict[str, Any]) -> list[str]:
    """``bench_every_model.py``: each torchvision classification model's table built and
    run, and what did not run."""
    models = logged.get("models", {})
    entries = sorted(models.values(), key=lambda e: e["model"])
    ran = [e for e in entries if "rows" in e]
    clean = [e for e in ran if e["not_ok"] == 0 and not e.get("shape_mismatches")]
    checked = [e for e in ran if "shape_mismatches" in e]
    slow = [e for e in ran if e["enumerate_cpu_s"] > ENUMERATE_TARGET_S]
    lines = [
        "### A table for every model (`benchmarks/bench_every_model.py`)",
        "",
        "Each torchvision classification model (random weights, 10 classes) at 96x96 "
        "(224x224 where it takes nothing else), prune 0/0.5, INT8 or FP32 per layer: its "
        f"distinct ops enumerated, every op model and {logged.get('whole', 3)} seeded whole "
        "models built and run once. Targets: every row runs; enumeration within "
        f"{ENUMERATE_TARGET_S:.0f} s. 'off the graph': op tensors whose shapes at the "
        "uncompressed plan are not the exported graph's (`shape_mismatches`: such ops are "
        "built at wrong sizes under every plan; '-' for entries from before the check, "
        "2026-12-02).",
        "",
        f"{len(entries)} models tried ({logged.get('machine', '')}): {len(clean)} of "
        f"{len(ran)} that ran have every row running and no op off the graph "
        f"({len(checked)} of them checked for that); {len(slow)} enumerated over "
        f"{ENUMERATE_TARGET_S:.0f} s; {len(entries) - len(ran)} stopped before running "
        "(the table below says where and why).",
        "",
        "| model | input | layers | ops | enumerate (CPU) | bundle | rows not ok "
        "| off the graph | wall | date |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e in entries:
        if "rows" not in e:
            lines.append(
                f"| {e['model']} | {e['status']} (below) | | | | | | | "
                f"{e.get('wall_s', 0):.0f} s | {e.get('date', '')} |"
            )
            continue
        lines.append(
            f"| {e['model']} | {e['size']} | {e['layers']} | {e['ops']} | "
            f"{e['enumerate_cpu_s']:.1f} s | {e['bundle_s']:.0f} s | "
            f"{e['not_ok']} of {e['rows']} | {e.get('shape_mismatches', '-')} | "
            f"{e['wall_s']:.0f} s | {e['date']} |"
        )
    notes = [
        f"{e['model']}: {e['status']}: {e.get('error', '')}" for e in entries if "rows" not in e
    ]
    notes += [f"{e['model']}: {'; '.join(e['errors'])}" for e in ran if e["not_ok"] and e["errors"]]
    notes += [
        f"{e['model']}: off the graph: {'; '.join(e['shape_mismatch_examples'])}"
        for e in ran
        if e.get("shape_mismatches")
    ]
    return [*lines, "", *(f"- {n}" for n in notes), *([""] if notes else [])]


HEADLINE_MARKER = "## Where each scenario stands"
RUN_ALL_MARKER = "## What `run_all.py` measured"


def _note_run(note: str) -> tuple[str, str]:
    """(date, commit) where a scenario row's note starts ``YYYY-MM-DD HH:MM... on abc1234``."""
    found = re.match(r"(\d{4}-\d{2}-\d{2})[^,]*? on ([0-9a-f]{7,40})\b", note or "")
    return (found.group(1), found.group(2)[:7]) if found else (_run_start(note)[:10], "")


def _ratio(a: Any, b: Any, fmt: str = "{:.2f}x") -> str:
    return fmt.format(a / b) if a and b else "—"


def headline_rows(logs: Path) -> list[dict[str, str]]:
    """Each scenario's current pick, one row: the real-data scenarios' last
    ``bench_scenarios.py`` run (``scenarios.json``) and the perception pipeline's last
    ``bench_perception.py`` run (``perception.json``). Speed-ups are measured here side by
    side with the uncompressed model, in the same rounds; accuracy on the test split."""
    rows: list[dict[str, str]] = []
    path = logs / "scenarios.json"
    for r in json.loads(path.read_text()) if path.exists() else []:
        b, p = r.get("baseline") or {}, r.get("picked") or {}
        if not p:
            continue
        date, commit = _note_run(r.get("note", ""))
        accuracy = [
            p.get("accuracy_test", p.get("accuracy")),
            b.get("accuracy_test", b.get("accuracy")),
        ]
        rows.append(
            {
                "scenario": r["scenario"],
                "pick": f"trial {p.get('trial')} ({_plan_words(p.get('plan') or {}) or 'plan'})",
                "accuracy change (test)": "—"
                if None in accuracy
                else f"{100 * (accuracy[0] - accuracy[1]):+.2f} points",
                "measured speed-up": _ratio(
                    b.get("latency_measured_ms"), p.get("latency_measured_ms")
                ),
                "size": _ratio(p.get("size_bytes"), b.get("size_bytes"), "{:.0%} of baseline"),
                "date": date or "—",
                "commit": commit or "—",
            }
        )
    path = logs / "perception.json"
    if path.exists():
        r = json.loads(path.read_text())
        teacher, pick, tests = r["teacher"], r.get("pick") or {}, r.get("test", {})
        drops = [
            f"{s} {100 * (tests['pick'][s] - tests['teacher'][s]):+.1f}"
            for s in PERCEPTION_STAGES
            if s in tests.get("pick", {}) and s in tests.get("teacher", {})
        ]
        compressed = [
            s for s, plan in (pick.get("plans") or {}).items() if _plan_words(plan) != "not pruned"
        ]
        where = ", ".join(f"{s} on {d}" for s, d in (pick.get("placement") or {}).items())
        rows.append(
            {
                "scenario": "perception-pipeline",
                "pick": (
                    "stages " + ", ".join(compressed) + " compressed; "
                    if compressed
                    else "uncompressed; "
                )
                + where,
                "accuracy change (test)": ", ".join(drops) + " points" if drops else "—",
                "measured speed-up": _ratio(teacher.get("measured_ms"), pick.get("measured_ms")),
                "size": _ratio(
                    (pick.get("values") or {}).get("size_bytes"),
                    (teacher.get("values") or {}).get("size_bytes"),
                    "{:.0%} of baseline",
                ),
                "date": str(r.get("date", ""))[:10] or "—",
                "commit": r.get("commit") or "—",
            }
        )
    return rows


def headline_section(logs: Path) -> list[str]:
    """The report's first section: each scenario's pick, what it cost in accuracy, what it
    gained measured here, its size, and the run it comes from."""
    rows = headline_rows(logs)
    if not rows:
        return []
    return [
        HEADLINE_MARKER,
        "",
        "Each scenario's current pick, from the latest run of its benchmark (the dated "
        "sections below give the command). Speed-up: the uncompressed model's latency over "
        "the pick's, both measured here in the same rounds; accuracy on the test split, "
        "which never chose anything. The 2026-11-23 quick run's scenarios (digits-mcu and "
        "the others on untrained or synthetic models) follow in their own part.",
        "",
        md_table(pd.DataFrame(rows)),
        "",
    ]


def _logged_on(path: Path, result: Any) -> str:
    """When a log was written, by which commit and command, from its own fields; where
    it has none, the date of the commit that last changed the file (``git log``)."""
    import subprocess

    own = result if isinstance(result, dict) else {}
    date = str(own.get("date") or "")[:16].replace("T", " ")
    commit = str(own.get("commit") or "")[:7]
    where = f"`report-logs/{path.name}`"
    if commit:
        where += f", run on commit {commit}"
    else:
        try:
            logged = subprocess.run(
                ["git", "log", "-1", "--format=%cs %h", "--", path.name],
                cwd=path.parent, capture_output=True, text=True, timeout=30, check=False,
            ).stdout.split()  # fmt: skip
        except OSError:
            logged = []
        if len(logged) == 2:
            date = date or logged[0]
            where += f", last changed by commit {logged[1]}"
    if not date:
        return ""
    command = f" Command: `{own['command']}`." if own.get("command") else ""
    return f"Logged {date} in {where}.{command}"


def _dated(lines: list[str], stamp: str) -> list[str]:
    """A section's lines with ``stamp`` under its heading."""
    if not stamp or not lines or not lines[0].startswith("#"):
        return lines
    return [lines[0], "", stamp, *lines[1:]]


def logged_sections(logs: Path) -> list[str]:
    """The part of the report rendered from the logs of benchmarks run on their own;
    every section says when its log was written."""
    lines = [LOGGED_MARKER, ""]
    for pattern, section in (
        ("latency-trust.json", latency_trust_section),
        ("residuals.json", residuals_section),
        ("own-calibration.json", own_calibration_section),
        ("every-model.json", every_model_section),
        ("first-table.json", first_table_section),
        ("cluster.json", cluster_section),
        ("remote-devices.json", remote_devices_section),
        ("remote-models.json", remote_models_section),
        ("runtimes.json", runtimes_section),
        ("learn.json", learn_section),
        ("scenarios.json", scenario_runs_section),
        ("reprice-*.json", reprice_section),  # bench_reprice.py: one file a scenario
        ("search.json", search_methods_section),
        ("baseline-threads.json", baseline_threads_section),
        ("pipeline.json", pipeline_section),
        ("perception.json", perception_section),
    ):
        for path in sorted(logs.glob(pattern)):
            result = json.loads(path.read_text())
            lines += _dated(section(result), _logged_on(path, result))
    own = sorted(logs.glob("own-model-*.json"))
    if own:
        first = logs / "first-table.json"
        lines += own_models_section(
            [json.loads(p.read_text()) for p in own],
            json.loads(first.read_text()) if first.exists() else None,
        )
    if (logs / "gpu-tables.json").exists():
        accel = logs / "accelerator.json"
        lines += gpu_section(
            json.loads((logs / "gpu-tables.json").read_text()),
            json.loads(accel.read_text()) if accel.exists() else None,
        )
    return lines


def _signed(value: float | None) -> str:
    return "—" if value is None else f"{value:+.1%}"


def _halves(every: dict[str, Any], own: dict[str, Any], half: str) -> str:
    """One half's median error, every / own, and by the measured times where logged."""
    key = f"{half}_half_median_error"
    text = f"{_signed(every[key])} / {_signed(own[key])}"
    if f"{key}_by_measured" in own:
        text += f" [{_signed(every[key + '_by_measured'])} / {_signed(own[key + '_by_measured'])}]"
    return text


def own_calibration_section(result: dict[str, Any]) -> list[str]:
    """Each space's plans calibrated on every space's models or its own
    (``bench_own_calibration.py``)."""
    lines = [
        "### A space calibrated on its own models (`benchmarks/bench_own_calibration.py`)",
        "",
        f"The `{result['device']}` table of {result['date'][:10]}, {result['folds']}-fold "
        "cross-validation over each space's calibration models: fitted with every other "
        "space's models as well (`every`) or on the space's own alone (`own`). The fast "
        "and slow halves are halved by the prediction; halved by the measured times they "
        "would show the rows' own noise as a bias (a row measured fast by its error lands "
        "in the fast half), so those are given in brackets. The fewer-MACs half: the more "
        "pruned plans.",
        "",
        "| space | models (others) | baseline ms | MAPE every / own | within 10% every / own "
        "| median error every / own | fast half every / own [by measured] "
        "| slow half every / own [by measured] | fewer-MACs half every / own |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for bundle, s in result["spaces"].items():
        e, o = s["every"], s["own"]
        lines.append(
            f"| {s.get('label', bundle)} | {s['models']} ({s['other_models']}) "
            f"| {s['baseline_ms']:.4g} "
            f"| {e['mape']:.1%} / {o['mape']:.1%} "
            f"| {e['within_10pct']:.0%} / {o['within_10pct']:.0%} "
            f"| {e['median_error']:+.1%} / {o['median_error']:+.1%} "
            f"| {_halves(e, o, 'fast')} | {_halves(e, o, 'slow')} "
            f"| {_signed(e.get('fewer_macs_half_median_error'))} "
            f"/ {_signed(o.get('fewer_macs_half_median_error'))} |"
        )
    return [*lines, ""]

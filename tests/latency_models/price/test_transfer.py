"""Few-shot tables: a subset of ops and a few whole models, predicted through a full
table of another device."""

import csv
import shutil
import statistics

import pytest

from frontier.latency_models import LatencyModel, TableError, write_bundle
from frontier.latency_models.price._transfer import few_shot_ops
from frontier.latency_models.runner import manifest_path


def test_few_shot_ops_cover_every_kind_from_small_to_large(ops) -> None:
    picked = few_shot_ops(ops.ops, 8)
    kinds = {f"{s.kind}/{s.precision}" for s in ops.ops}
    assert len(picked) == min(8, len(ops.ops))
    assert len({s.key for s in picked}) == len(picked)
    if len(kinds) <= 8:
        assert {f"{s.kind}/{s.precision}" for s in picked} == kinds
    # within the largest kind, the smallest and the largest op are both measured
    largest = max(kinds, key=lambda k: sum(f"{s.kind}/{s.precision}" == k for s in ops.ops))
    members = sorted(
        (s for s in ops.ops if f"{s.kind}/{s.precision}" == largest),
        key=lambda s: (s.macs, s.bytes_moved, s.key),
    )
    chosen = {s.key for s in picked}
    assert members[0].key in chosen and members[-1].key in chosen
    with pytest.raises(ValueError, match="at least 1"):
        few_shot_ops(ops.ops, 0)


def _new_device(measured, tmp_path, *, factor: float, keep_ops: set[str], name: str = "new"):
    """The measured table as a device ``factor`` times slower would measure it: every
    op (above the overhead), the overhead, and every whole model (the baseline timed
    beside each row among them), only ``keep_ops`` of the ops. Each row's ratio to the
    baseline follows, so a row restated against the baseline keeps the new device's speed:
    the runner's ratio (a median over rounds of per-round ratios, not median over median)
    scaled as the row and the baseline were."""
    whole_factor = factor
    out, _ = measured
    rows = list(csv.DictReader(out.open()))
    # the table's overhead (a median); every op kept 1 us above it, over the transfer's
    # floor on both devices, so that each op is ``factor`` times its base twin there too
    overhead = statistics.median(
        float(r["median_ms"]) for r in rows if r["kind"] == "overhead" and r["status"] == "ok"
    )
    kept = []
    for r in rows:
        before_ms = float(r["median_ms"] or "nan")
        if r["kind"] == "op":
            if r["key"] not in keep_ops:
                continue
            above = max(float(r["median_ms"]) - overhead, 1e-3)
            r["median_ms"] = f"{(above + overhead) * factor:.6g}"
        elif r["kind"] in ("calibration", "validation", "baseline", "overhead"):
            r["median_ms"] = f"{float(r['median_ms']) * whole_factor:.6g}"
        if r.get("baseline_ms"):  # the uncompressed model timed beside it runs slower too
            r["baseline_ms"] = f"{float(r['baseline_ms']) * whole_factor:.6g}"
            row_factor = float(r["median_ms"]) / before_ms
            r["relative"] = f"{float(r['relative']) * row_factor / whole_factor:.6g}"
        kept.append(r)
    path = tmp_path / f"{name}.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(kept)
    for suffix in (".meta.json", ".manifest.json", ".profiles.jsonl"):
        shutil.copyfile(str(out) + suffix, str(path) + suffix)
    return path


def test_a_few_shot_table_predicts_through_its_base(measured, ops, store, tmp_path) -> None:
    out, manifest = measured
    store.import_table(out, name="base")
    keep = {s.key for s in few_shot_ops(ops.ops, 6)}
    path = _new_device(measured, tmp_path, factor=1.5, keep_ops=keep)
    with pytest.raises(TableError, match="not a stored device"):
        store.import_table(path, name="new", few_shot_from="nowhere")
    table = store.import_table(path, name="new", few_shot_from="base")
    assert table.base is not None and table.base.name == "base"
    lm = LatencyModel(table)
    quality = lm.quality()
    assert quality["calibration"]["method"].startswith("few-shot from base")
    # the "device" is 1.5x the base one: its few-shot table predicts its validation
    # models as well as the base table predicts the base device's
    v = quality["stored_validation"]
    base = LatencyModel(store.load("base"))
    own = base.quality()["stored_validation"]
    assert v["samples"] == own["samples"] == 3
    # its scale is fitted on 8 measured models (timed for 20 ms each), so it differs from
    # 1.5 by the base's own calibration bias on them: a few points of MAPE, no more
    assert v["mape"] <= own["mape"] + 0.05
    # the same few ops and whole models of a device exactly like the base one, through
    # the same base: the base's own bias on its few calibration models (8 whole models of
    # ~0.02 ms, noisy on a busy machine) is in both, both choose the same method (each
    # method's leave-one-out error is blind to a uniform 1.5x), and their ratio is the
    # 1.5x, whether an op is measured or transferred through its kind's law
    same_path = _new_device(measured, tmp_path, factor=1.0, keep_ops=keep, name="same")
    same = LatencyModel(store.import_table(same_path, name="same", few_shot_from="base"))
    ratios = []
    for entry in manifest["models"]:
        if entry["kind"] == "validation":
            specs = [base.spec_of(k) for k in entry["op_keys"]]
            new = lm.predict_ops(specs)
            ratios.append(new.latency_ms / same.predict_ops(specs).latency_ms)
            assert new.coverage["transfer"] + new.coverage["table"] == len(specs)
            assert new.coverage["transfer"] > 0
    assert same.quality()["calibration"]["method"] == quality["calibration"]["method"]
    assert ratios == pytest.approx([1.5] * len(ratios), rel=0.01), ratios


def test_a_few_shot_bundle_holds_the_subset_and_its_ops_are_priced(mlp_setup, tmp_path) -> None:
    _task, model, x, space = mlp_setup
    path = tmp_path / "few.zip"
    manifest = write_bundle(
        path, model=model, example_inputs=x, space=space, few_shot=5, validation=2
    )
    kinds = [m["kind"] for m in manifest["models"]]
    assert manifest["few_shot"] == 5 and manifest["op_count"] <= 5 < manifest["space_op_count"]
    assert kinds.count("op") == manifest["op_count"] and kinds.count("calibration") == 10
    assert any(m.get("weights") for m in manifest["models"])  # seeded, not stored


def test_few_shot_needs_ops_shared_with_its_base(measured, store, tmp_path) -> None:
    out, _ = measured
    store.import_table(out, name="base")
    path = _new_device(measured, tmp_path, factor=1.0, keep_ops=set())
    with pytest.raises(TableError, match="shares 0 measured ops with its base table 'base'"):
        store.import_table(path, name="new", few_shot_from="base")
    assert manifest_path(path).exists() and not store.has("new")


def test_a_few_shot_cycle_is_refused(measured, store, tmp_path) -> None:
    out, _ = measured
    store.import_table(out, name="a")
    store.import_table(out, name="b", few_shot_from="a")
    with pytest.raises(
        TableError, match=r"'a' is predicted through 'b'|'b' is predicted through 'a'"
    ):
        store.import_table(out, name="a", few_shot_from="b")  # a would lean on b, b on a
    assert store.load("a").base is None and store.load("b").base.name == "a"

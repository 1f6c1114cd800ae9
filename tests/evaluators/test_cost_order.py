"""Scoring one plan: the order its metrics are measured in."""

from __future__ import annotations


def test_a_trial_counts_its_costs_once(tmp_path, monkeypatch) -> None:
    """Size first and MACs after it in the config: the model the accuracy was measured
    on is counted once, MACs included, and the size read from that count."""
    import frontier.evaluators._base as base
    from frontier.search import TrialRunner, load_config

    path = tmp_path / "order.yaml"
    path.write_text(
        "name: order\n"
        "task: {name: digits, options: {model: mlp}}\n"
        "space: {prune_ratios: [0.0, 0.5], weight_bits: [8, 32], act_bits: [32]}\n"
        "objectives: [{name: accuracy, options: {steps: 2}}, size_bytes, macs]\n"
        "search: {fidelity: {rungs: [short]}}\n"
    )
    evaluation = TrialRunner(load_config(path))
    counts: list[bool] = []
    count = base.model_cost
    monkeypatch.setattr(
        base, "model_cost", lambda *a, macs=True: counts.append(macs) or count(*a, macs=macs)
    )
    result = evaluation.evaluate(evaluation.space.sample(3), 0)
    assert counts == [True] and result.values["macs"] > 0 and result.values["size_bytes"] > 0
    assert list(result.values) == ["accuracy", "size_bytes", "macs"]

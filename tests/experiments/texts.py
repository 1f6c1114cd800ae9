"""A tiny BERT model folder and a tiny labelled corpus, written by the tests (nothing is
downloaded): a WordPiece tokenizer over a few dozen words, a 2-layer BERT with random
weights under Hugging Face's names, and a CSV whose label is given by sentiment words."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

POSITIVE = ["good", "great", "love", "happy", "nice"]
NEGATIVE = ["bad", "awful", "hate", "sad", "worst"]
FILLER = ["the", "car", "drives", "road", "today", "my", "a", "is", "this", "very"]
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
VOCAB = SPECIAL + POSITIVE + NEGATIVE + FILLER + ["##s", "##ly"]

TINY_BERT = {
    "vocab_size": len(VOCAB),
    "hidden_size": 32,
    "num_attention_heads": 2,
    "num_hidden_layers": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 40,
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
    "pad_token_id": 0,
    "model_type": "bert",
    "hidden_act": "gelu",
}


def write_tokenizer(path: Path) -> None:
    """A BERT-style WordPiece tokenizer.json: lower-cased, [CLS] ... [SEP]."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    tok = Tokenizer(WordPiece({w: i for i, w in enumerate(VOCAB)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tok.save(str(path))


def bert_weights(seed: int = 0) -> dict[str, torch.Tensor]:
    """Random weights of TINY_BERT under Hugging Face BertModel's tensor names."""
    gen = torch.Generator().manual_seed(seed)
    h, f, v = TINY_BERT["hidden_size"], TINY_BERT["intermediate_size"], TINY_BERT["vocab_size"]

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * 0.2

    w = {
        "embeddings.word_embeddings.weight": rnd(v, h),
        "embeddings.position_embeddings.weight": rnd(TINY_BERT["max_position_embeddings"], h),
        "embeddings.token_type_embeddings.weight": rnd(2, h),
        "embeddings.LayerNorm.weight": 1 + rnd(h),
        "embeddings.LayerNorm.bias": rnd(h),
        "pooler.dense.weight": rnd(h, h),
        "pooler.dense.bias": rnd(h),
    }
    for i in range(TINY_BERT["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        for name, shape in (
            ("attention.self.query", (h, h)),
            ("attention.self.key", (h, h)),
            ("attention.self.value", (h, h)),
            ("attention.output.dense", (h, h)),
            ("intermediate.dense", (f, h)),
            ("output.dense", (h, f)),
        ):
            w[p + name + ".weight"] = rnd(*shape)
            w[p + name + ".bias"] = rnd(shape[0])
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[p + name + ".weight"] = 1 + rnd(h)
            w[p + name + ".bias"] = rnd(h)
    return w


def write_bert(folder: Path, seed: int = 0) -> Path:
    """A model folder as the teacher package ships one: config, weights, tokenizer."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(TINY_BERT))
    save_file(bert_weights(seed), str(folder / "model.safetensors"))
    write_tokenizer(folder / "tokenizer.json")
    return folder


def write_corpus(path: Path, rows: int = 300, seed: int = 0) -> Path:
    """A CSV (text, label): positive words make 'pos', negative 'neg', neither 'neutral'."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for i in range(rows):
        label = ("pos", "neg", "neutral")[i % 3]
        words = list(rng.choice(FILLER, size=int(rng.integers(3, 12))))
        if label != "neutral":
            pool = POSITIVE if label == "pos" else NEGATIVE
            words.insert(int(rng.integers(0, len(words))), str(rng.choice(pool)))
        texts.append(" ".join(words) + f" {i}")  # the number keeps each text unique
        labels.append(label)
    pd.DataFrame({"text": texts, "label": labels}).to_csv(path, index=False)
    return path

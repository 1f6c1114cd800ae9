"""Built-in tasks (data, baseline model, training recipe) and experiment configs.

A task is the problem a search compresses a model for: ``build_task("digits",
model="mlp")``, a class registered with ``@register_task``, or a builder named by a
Python path in a config (``my_pkg.tasks:build``). ``builtin_configs()`` lists the
experiments ``frontier`` runs by name.
"""

from pathlib import Path

from . import perception as perception  # registers the scene-* tasks
from ._digits import (
    DigitsTask,
    Recipe,
    SwishBeta,
    load_digits_splits,
    train_classifier,
)
from ._fashion import IdxRecipe, IdxTask, adapt_model, train_idx_model
from ._idx import FASHION_MNIST_ROOT, load_idx_split, read_idx, write_idx
from ._imagefolder import ImageFolderTask, load_weights
from ._tasks import (
    Loaders,
    Task,
    TaskError,
    TensorTask,
    build_task,
    cache_dir,
    register_task,
    skip_training,
    task_baseline,
    task_names,
)
from ._text import CachedLogits, LengthBatches, TextRecipe, TextTask, train_text_model, trim
from ._text_data import load_bert, read_corpus, tokenize
from ._training import accelerator, evaluate, fit, pin_memory, progress_bar, use_accelerator

CONFIG_DIR = Path(__file__).parent / "configs"


def builtin_configs() -> dict[str, Path]:
    """The built-in experiment configs, by name (the file name without ``.yaml``)."""
    return {p.stem: p for p in sorted(CONFIG_DIR.glob("*.yaml"))}


__all__ = [
    "CONFIG_DIR",
    "FASHION_MNIST_ROOT",
    "CachedLogits",
    "DigitsTask",
    "IdxRecipe",
    "IdxTask",
    "ImageFolderTask",
    "LengthBatches",
    "Loaders",
    "Recipe",
    "SwishBeta",
    "Task",
    "TaskError",
    "TensorTask",
    "TextRecipe",
    "TextTask",
    "accelerator",
    "adapt_model",
    "build_task",
    "builtin_configs",
    "cache_dir",
    "evaluate",
    "fit",
    "load_bert",
    "load_digits_splits",
    "load_idx_split",
    "load_weights",
    "pin_memory",
    "progress_bar",
    "read_corpus",
    "read_idx",
    "register_task",
    "skip_training",
    "task_baseline",
    "task_names",
    "tokenize",
    "train_classifier",
    "train_idx_model",
    "train_text_model",
    "trim",
    "use_accelerator",
    "write_idx",
]

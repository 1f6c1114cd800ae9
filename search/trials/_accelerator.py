"""Which torch device a trial trains and is scored on (``backend.accelerator``).

The setting is resolved where the trial runs, from what that process can see:

- in the driver (``--workers 1``, the default) and in ``--workers N`` processes, the
  GPUs PyTorch sees, shared round-robin by worker slot;
- in a Ray task, the GPU Ray assigned to it (``backend.gpus_per_trial``; Ray hides the
  others, so it is ``cuda:0``), and none where Ray assigned none: a GPU Ray did not
  reserve for the trial is another trial's.

``auto`` takes a GPU where there is one and the CPU otherwise; ``cuda`` (or ``cuda:N``)
insists, and a trial that cannot have one fails with what to change. The driver never
needs a GPU: where its trials run elsewhere, it trains the baseline on a GPU it has,
else on the CPU.
"""

from __future__ import annotations

from frontier.spaces import CPU, Accelerator

from ..config._config import ConfigError


def visible_gpus() -> int:
    """How many CUDA GPUs PyTorch sees in this process (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve(
    setting: str,
    mixed_precision: str = "auto",
    *,
    slot: int = 0,
    gpus: int | None = None,
    required: bool = True,
    where: str = "this process",
) -> Accelerator:
    """The accelerator ``setting`` names for a trial in this process.

    Args:
        setting: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (``BackendSection`` checks it).
        mixed_precision: ``auto`` (bf16 autocast on a GPU that supports it, off on the
            CPU), ``bf16`` or ``off``.
        slot: this worker's number; ``cuda`` and ``auto`` take GPU ``slot % gpus``.
        gpus: the GPUs this trial may use (None: every GPU PyTorch sees).
        required: False where ``cuda`` without a GPU may fall back to the CPU (the
            driver, when its trials run in workers).
        where: the process, for the error message.

    Raises:
        ConfigError: ``cuda`` where ``required`` and there is no GPU, or ``cuda:N``
            beyond the GPUs there are.
    """
    import torch

    count = visible_gpus() if gpus is None else gpus
    device = "cpu"
    if setting != "cpu" and count > 0:
        index = int(setting.partition(":")[2] or slot % count)
        if index >= count:
            raise ConfigError(
                f"backend.accelerator is {setting!r}, but {where} sees {count} GPU(s) "
                f"(cuda:0 to cuda:{count - 1})"
            )
        device = f"cuda:{index}"
    elif setting.startswith("cuda") and required:
        raise ConfigError(
            f"backend.accelerator is {setting!r}, but {where} has no GPU "
            f"(torch.cuda.is_available() is {torch.cuda.is_available()}); set it to "
            "'auto' to train on a GPU where there is one and on the CPU elsewhere"
        )
    cuda = device != "cpu"
    bf16 = mixed_precision == "bf16" or (
        mixed_precision == "auto" and cuda and torch.cuda.is_bf16_supported()
    )
    if not cuda:
        return CPU if not bf16 else Accelerator("cpu", bf16=True)
    return Accelerator(device, bf16=bf16, name=torch.cuda.get_device_name(device))


def ray_gpus() -> int:
    """The GPUs Ray assigned to the running task (it hides the rest from CUDA)."""
    import ray

    return len(ray.get_gpu_ids())

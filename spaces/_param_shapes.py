"""A model's parameters as shapes: what a technique changes to say how it reshapes a
model without building it (``Technique.reshape``, counted by ``ShapeCounter``)."""

from __future__ import annotations

from torch import nn


class ParamShapes:
    """A model's parameters as shapes, which ``Technique.reshape`` changes the way its
    ``apply`` changes the model, so a plan's size is counted without building it.

    Attributes:
        model: the uncompressed model, to read module attributes from (never changed).
    """

    def __init__(self, model: nn.Module, params: dict[str, tuple[tuple[int, ...], int]]) -> None:
        self.model = model
        #: parameter name -> (shape, bytes an element)
        self.params = params

    def __contains__(self, name: str) -> bool:
        return name in self.params

    def shape(self, name: str) -> tuple[int, ...]:
        """The shape of parameter ``name`` under the plan so far."""
        return self.params[name][0]

    def resize(self, module: str, axis: int, size: int) -> None:
        """``module``'s weight holds ``size`` along ``axis`` (and its bias too, axis 0)."""
        shape = list(self.shape(f"{module}.weight"))
        shape[axis] = size
        self.params[f"{module}.weight"] = (tuple(shape), self.params[f"{module}.weight"][1])
        if axis == 0 and f"{module}.bias" in self.params:
            self.params[f"{module}.bias"] = ((size,), self.params[f"{module}.bias"][1])

    def add(self, name: str, shape: tuple[int, ...], element_bytes: int) -> None:
        self.params[name] = (tuple(shape), element_bytes)

    def remove(self, module: str) -> None:
        """Every parameter of ``module`` and of the modules inside it is gone."""
        for name in [n for n in self.params if n.startswith(module + ".")]:
            del self.params[name]

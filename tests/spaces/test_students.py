import pytest
import torch
from torch import nn

from frontier.spaces import (
    PlanError,
    StudentSpec,
    build_student,
    register_student,
    student_families,
)

SPECS = [
    StudentSpec("mlp", 0.5, 2.0),
    StudentSpec("cnn", 0.5, 0.5),
    StudentSpec("mobilenet_v2", 0.5),
    StudentSpec("mobilenet_v3_small", 0.75),
    StudentSpec("resnet18"),
    StudentSpec("resnet50", width_mult=0.5),
    StudentSpec("efficientnet_b0", 0.5, 0.5),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.key)
def test_builtin_students_build_and_run(spec: StudentSpec) -> None:
    x = torch.randn(2, 3, 32, 32)
    model = build_student(spec, num_classes=7, example_inputs=x).eval()
    with torch.no_grad():
        assert model(x).shape == (2, 7)


def test_width_and_depth_shrink_students() -> None:
    x = torch.randn(1, 1, 8, 8)
    sizes = {
        (w, d): sum(
            p.numel()
            for p in build_student(
                StudentSpec("cnn", w, d), num_classes=10, example_inputs=x
            ).parameters()
        )
        for w, d in [(1.0, 1.0), (0.5, 1.0), (1.0, 0.34)]
    }
    assert sizes[(0.5, 1.0)] < sizes[(1.0, 1.0)] and sizes[(1.0, 0.34)] < sizes[(1.0, 1.0)]
    big = build_student(StudentSpec("efficientnet_b3"), num_classes=10, example_inputs=x)
    small = build_student(StudentSpec("efficientnet_b0"), num_classes=10, example_inputs=x)
    assert sum(p.numel() for p in small.parameters()) < sum(p.numel() for p in big.parameters())


def test_register_own_family() -> None:
    @register_student("test-tiny")
    def tiny(*, num_classes, width_mult, depth_mult, example_inputs) -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(example_inputs[0].numel(), num_classes))

    assert "test-tiny" in student_families()
    out = build_student(StudentSpec("test-tiny"), num_classes=3, example_inputs=torch.randn(1, 4))
    assert out(torch.randn(2, 4)).shape == (2, 3)
    with pytest.raises(ValueError, match="already registered"):
        register_student("test-tiny")(tiny)


def test_unknown_family_and_fixed_depth() -> None:
    x = torch.randn(1, 3, 32, 32)
    with pytest.raises(PlanError, match="unknown family 'vit'"):
        build_student(StudentSpec("vit"), num_classes=2, example_inputs=x)
    with pytest.raises(PlanError, match="fixed depth"):
        build_student(StudentSpec("resnet18", depth_mult=0.5), num_classes=2, example_inputs=x)

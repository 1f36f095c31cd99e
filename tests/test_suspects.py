"""Suspect outputs (what a known bug would give) are built on the inputs' device.

A tensor made on the CPU next to CUDA inputs breaks a diagnosis on a GPU only. Inputs on PyTorch's
"meta" device reproduce that mistake on a CPU: meta and CPU tensors do not mix either.
"""

import pytest
import torch

from grader.checks import (
    ex01_tiled_matmul,
    ex02_safe_softmax,
    ex03_online_softmax,
    ex05_backward_preprocess,
    ex08_benchmarks,
)


def _meta(*shape):
    return torch.empty(*shape, device="meta")


SUSPECT_BUILDERS = {
    "01": lambda: ex01_tiled_matmul._suspects(_meta(70, 90), _meta(50, 90).t(), transposed=True),
    "02": lambda: ex02_safe_softmax._suspects(_meta(4, 300)),
    "03 y": lambda: ex03_online_softmax._y_suspects(_meta(4, 300)),
    "03 lse": lambda: ex03_online_softmax._lse_suspects(_meta(4, 300), _meta(4).double()),
    "05": lambda: ex05_backward_preprocess._suspects(_meta(1, 2, 100, 64), _meta(1, 100, 2, 64).transpose(1, 2)),
    "08 causal": lambda: ex08_benchmarks._naive_suspects(*(_meta(1, 2, 50, 16) for _ in "qkv"), True, 0.3),
    "08": lambda: ex08_benchmarks._naive_suspects(*(_meta(1, 2, 50, 16) for _ in "qkv"), False, None),
}


def test_inputs_with_a_dominant_first_key_are_built_on_the_inputs_device():
    from grader.checks import layouts

    for causal in (False, True):
        q, k = layouts.dominant_first_key(_meta(1, 2, 50, 16), _meta(1, 2, 50, 16), 0.3, causal)
        assert q.device.type == k.device.type == "meta"


@pytest.mark.parametrize("name", SUSPECT_BUILDERS)
def test_suspects_are_built_on_the_inputs_device(name):
    suspects = SUSPECT_BUILDERS[name]()
    assert suspects, f"exercise {name}: these inputs should have suspects"
    assert all(t.device.type == "meta" for t in suspects.values())

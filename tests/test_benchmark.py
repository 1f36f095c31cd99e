"""The benchmark harness's CPU-checkable parts: the FLOPs convention and loading a course."""

from common.benchmark import flops, load_course
from grader.runner import ROOT


def test_flops_convention():
    assert flops(4, 32, 4096, 64, causal=False) == 4 * 4 * 32 * 4096**2 * 64
    assert flops(4, 32, 4096, 64, causal=True) == flops(4, 32, 4096, 64, causal=False) / 2
    assert flops(1, 1, 8, 16, causal=False, backward=True) == 2.5 * flops(1, 1, 8, 16, causal=False)


def test_loads_the_four_kernels_of_a_course():
    functions = load_course(ROOT / "solutions")
    names = [f.__name__ for f in functions]
    assert names == ["flash_attention_forward", "attention_backward_preprocess",
                     "attention_backward_dkdv", "attention_backward_dq"]

"""Checks that run only on a GPU, tested here with fakes of the student's functions: their verdicts
and messages. (On a GPU, tests/test_exercises.py grades their mutants for real.)

07's `deterministic` has no mutant at all: no small edit of the solution races (one program owns
each query block), so a fake dQ stands in for a kernel whose programs add into the same rows in a
varying order."""

from types import SimpleNamespace

import pytest
import torch

from common.compare import CheckFailed
from grader.checks import backward
from grader.checks.ex04_flash_forward import memory_linear
from grader.checks.ex07_backward_dq import deterministic
from grader.core import Context
from grader.loader import LocalImplementation


@pytest.fixture(autouse=True)
def no_reference(monkeypatch):
    """The check compares the kernel with itself: skip the float64 reference attention its inputs carry."""
    monkeypatch.setattr(
        backward.reference, "attention", lambda q, k, v, causal, sm_scale: (q.double(), q.new_zeros(q.shape[:3]))
    )


def _fake_dq(last_bit_flips: bool):
    calls = iter(range(1000))

    def attention_backward_dq(q, k, v, do, lse, delta, causal=False, sm_scale=None):
        dq = torch.zeros_like(q)
        dq[0, 0, 0, 0] = 1 + (next(calls) % 2 if last_bit_flips else 0) * 2**-10  # fp16's last bit at 1
        return dq

    return SimpleNamespace(attention_backward_dq=attention_backward_dq)


def test_race_is_caught_and_explained():
    with pytest.raises(CheckFailed, match="differs between two runs.*a race"):
        deterministic.run(_fake_dq(last_bit_flips=True), Context("cpu", 1))


def test_repeatable_dq_passes():
    assert deterministic.run(_fake_dq(last_bit_flips=False), Context("cpu", 1)) is None


def _forward_holding(extra_bytes):
    """A student's 04 forward (run in this process) that holds `extra_bytes` more at its peak."""

    def flash_attention_forward(q, k, v, causal=False, sm_scale=None):
        return q.clone(), q.new_zeros(q.shape[:3], dtype=torch.float32)

    class Implementation(LocalImplementation):
        def execute(self, fn, args, kwargs, guarded, backward):
            outcome = super().execute(fn, args, kwargs, guarded, backward)
            outcome.peak_extra = extra_bytes(args[0].shape[2]) if extra_bytes else None
            return outcome

    return Implementation({"flash_attention_forward": flash_attention_forward}, "04", kernels_only=False)


def test_an_n_by_n_allocation_is_caught():
    scores = lambda N: 4 * N * N * 4  # noqa: E731 - float32 scores for 4 heads
    with pytest.raises(CheckFailed, match="at N=4096 the call allocated 258.0 MiB.*N x N"):
        memory_linear.run(_forward_holding(lambda N: scores(N) + N * 4 * 64 * 2), Context("cpu", 1))


def test_outputs_alone_pass():
    outputs = lambda N: N * 4 * 64 * 2 + 4 * N * 4  # noqa: E731 - o and lse
    assert memory_linear.run(_forward_holding(outputs), Context("cpu", 1)) is None


def test_an_unread_peak_is_not_a_pass():
    with pytest.raises(CheckFailed, match="could not be read"):
        memory_linear.run(_forward_holding(None), Context("cpu", 1))

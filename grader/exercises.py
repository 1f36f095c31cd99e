"""The course map: every graded exercise, where its code lives, and which checks grade it."""

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Exercise:
    number: str  # "01"
    folder: str  # "01_tiled_matmul": the same name under exercises/, solutions/ and any TARGET
    title: str
    module: str  # the file the student edits, without .py
    functions: tuple  # what the checks take from that module
    kernels_only: bool = True  # answers must be computed by Triton kernels (PyTorch ops outside them fail)
    extra_imports: tuple = ()  # modules graded code may import beyond grader.static.BASE_IMPORTS
    timed: bool = False  # its checks time kernels: they are autotuned fully (else one config each, see common.tuning)

    @property
    def checks(self) -> list:
        return importlib.import_module(f"grader.checks.ex{self.folder}").CHECKS

    @property
    def points(self) -> float:
        return sum(c.points for c in self.checks)


EXERCISES = (
    Exercise("01", "01_tiled_matmul", "tiled matmul", "matmul", ("matmul",)),
    Exercise("02", "02_safe_softmax", "safe softmax", "safe_softmax", ("softmax",)),
    Exercise("03", "03_online_softmax", "online softmax", "online_softmax", ("online_softmax",)),
    Exercise("04", "04_flash_forward", "FlashAttention forward", "flash_forward", ("flash_attention_forward",)),
    Exercise(
        "05",
        "05_backward_preprocess",
        "backward preprocess (delta)",
        "backward_preprocess",
        ("attention_backward_preprocess",),
    ),
    Exercise("06", "06_backward_dkdv", "backward dK, dV", "backward_dkdv", ("attention_backward_dkdv",)),
    Exercise(
        "07", "07_backward_dq", "backward dQ and autograd", "backward_dq", ("attention_backward_dq", "flash_attention")
    ),
    Exercise(
        "08",
        "08_benchmarks",
        "benchmarks",
        "benchmarks",
        ("attention_flops", "attention_memory", "naive_attention", "measure", "sweep", "plot"),
        kernels_only=False,
        extra_imports=("time", "statistics", "matplotlib.figure"),
        timed=True,
    ),
)


def find(key: str) -> Exercise:
    """The exercise named by its number ("4", "04") or folder ("04_flash_forward")."""
    for ex in EXERCISES:
        if key in (ex.number, ex.folder) or (key.isdigit() and int(key) == int(ex.number)):
            return ex
    known = ", ".join(ex.number for ex in EXERCISES)
    raise ValueError(f"no exercise {key!r}: choose one of {known}")

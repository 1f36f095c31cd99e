"""Device detection and the Triton interpreter switch.

Triton reads TRITON_INTERPRET when it is first imported, so `setup()` must run before anything
imports triton. Every entry point of the course (the grader, the tests, the notebooks) calls it.
"""

import os
import platform
import sys
from dataclasses import dataclass


class BrokenEnvironment(RuntimeError):
    """The installed versions are known not to work together."""


@dataclass(frozen=True)
class Mode:
    gpu: bool
    device: str  # "cuda" or "cpu"
    description: str  # e.g. "GPU: NVIDIA H200" or "CPU: Triton interpreter"


COURSE_PACKAGES = ("torch", "triton", "numpy")


def missing_packages(names=COURSE_PACKAGES) -> list:
    """The packages among `names` that this Python cannot import (found without importing them)."""
    import importlib.util

    return [name for name in names if importlib.util.find_spec(name) is None]


def missing_packages_message(missing, module: str) -> str:
    """What to do when `python -m <module>` runs in a Python without the course's packages."""
    from pathlib import Path

    venv = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "python"
    where = (
        "the course's environment is there: run .venv/bin/python -m " + module + " ... instead "
        "(or `source .venv/bin/activate` first)"
        if venv.is_file()
        else "`make grade EX=01` (or `make test`) builds the course's environment, .venv, on first use; "
        "then run .venv/bin/python -m " + module + " ..."
    )
    return (
        f"error: {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed for this Python "
        f"({sys.executable}): {where}. The make targets (make grade, make doctor, ...) pick the right "
        "Python themselves."
    )


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def setup() -> Mode:
    """Choose GPU or interpreter mode; turn the interpreter on where there is no CUDA GPU."""
    forced = os.environ.get("TRITON_INTERPRET") == "1"
    if not forced and not _cuda_available():
        if "triton" in sys.modules:
            raise BrokenEnvironment(
                "triton was imported before common.env.setup() could turn on the interpreter; "
                "call setup() first (or export TRITON_INTERPRET=1)"
            )
        os.environ["TRITON_INTERPRET"] = "1"
    if interpreting():
        return Mode(gpu=False, device="cpu", description="CPU: Triton interpreter (TRITON_INTERPRET=1)")
    import torch

    # Create the GPU's context now, and make it current in autograd's GPU thread too. That thread
    # starts at the first backward pass; if its first GPU call is cuBLAS (a matmul's backward), no
    # context is current there yet and cuBLAS warns "no current CUDA context" while it sets one up.
    # A first backward whose kernels are elementwise sets it up quietly.
    x = torch.zeros(1, device="cuda", requires_grad=True)
    (x * 2).sum().backward()
    return Mode(gpu=True, device="cuda", description=f"GPU: {torch.cuda.get_device_name()}")


def versions() -> str:
    import numpy
    import torch
    import triton

    return (
        f"python {platform.python_version()}, torch {torch.__version__}, "
        f"triton {triton.__version__}, numpy {numpy.__version__}"
    )


def check_interpreter() -> None:
    """Run a tiny kernel with a runtime loop bound; explain the known-broken version pairs.

    triton 3.6 with numpy >= 2.4 fails in the interpreter on any loop whose bound is a runtime
    argument, which every kernel of this course has (triton issue 9171).
    """
    try:
        total = _loop_probe()
    except Exception as exc:  # noqa: BLE001 - any failure here means the environment is unusable
        import numpy

        raise BrokenEnvironment(
            f"the Triton interpreter cannot run a loop with a runtime bound here ({versions()}): "
            f"{type(exc).__name__}: {exc}\n"
            f"triton 3.6 is known to fail this way with numpy >= 2.4 (you have numpy {numpy.__version__}). "
            "Fix: pip install 'numpy<2.4' (the course pins numpy 2.2.6), or run `make` targets, "
            "which build a virtual environment with pinned versions."
        ) from exc
    if total != [3.0] * 8 + [2.0] * 8:
        raise BrokenEnvironment(f"the Triton interpreter computed a wrong sum ({versions()}): {total}")


def _loop_probe() -> list:
    """Sum 40 ones in blocks of 16 with a runtime loop bound: [3.0] * 8 + [2.0] * 8 when it works."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _probe(x_ptr, n, BLOCK: tl.constexpr):
        total = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, n, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            total += tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        tl.store(x_ptr + tl.arange(0, BLOCK), total)

    x = torch.ones(40)
    _probe[(1,)](x, 40, BLOCK=16)
    return x[:16].tolist()

"""Checks and the context they run in.

A check is a plain function of the student's implementation (an object exposing their functions)
and a Context. It passes by returning and fails by raising CheckFailed with a message for the
student. pytest, `make grade` and nbgrader all run these same functions.
"""

import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch

from common import inputs
from common.compare import CheckFailed

NOT_IMPLEMENTED = "not implemented yet"


@dataclass(frozen=True)
class Check:
    name: str
    points: float
    run: callable
    description: str
    gpu_only: bool = False


def check(points: float, gpu_only: bool = False):
    """Decorator: turn `fn(impl, ctx)` into a Check worth `points`; its docstring describes it."""

    def wrap(fn):
        description = (fn.__doc__ or fn.__name__).strip().splitlines()[0]
        return Check(fn.__name__, points, fn, description, gpu_only)

    return wrap


@dataclass
class Context:
    device: str  # "cuda" or "cpu"
    seed: int

    @property
    def gpu(self) -> bool:
        return self.device == "cuda"

    def randn(self, shape, dtype, tag: str, scale: float = 1.0):
        """Reproducible random inputs: the same seed and tag give the same data on any device."""
        return inputs.randn(shape, dtype, self.device, inputs.generator(self.seed, tag), scale)


@dataclass
class Result:
    name: str
    points: float
    earned: float
    status: str  # "passed", "failed", "not implemented", "needs a GPU"
    message: str = ""
    seconds: float = 0.0
    description: str = ""


@dataclass(frozen=True)
class Fixture:
    """An argument that stands for a callable built on the student's side of the grader: the call
    receives `common.fixtures.<name>(**params)` in its place (a function of known cost, a fake clock).
    Only tensors, plain data and these markers cross into student code."""

    name: str
    params: dict = field(default_factory=dict)


@dataclass
class OutputFile:
    """An argument that is the path of a file the student's function writes (a plot): after the
    call, `content` holds the file's bytes (None when it was not written)."""

    name: str
    content: bytes = None


class MissingFunction(Exception):
    """The student's module does not define a function the exercise needs."""


def run_check(chk: Check, impl, ctx: Context) -> Result:
    """Run one check, turning every way student code can fail into a Result with a message."""
    result = Result(chk.name, chk.points, 0.0, "failed", description=chk.description)
    if chk.gpu_only and not ctx.gpu:
        result.status = "needs a GPU"
        result.message = "runs only on a CUDA GPU (the interpreter cannot check this); not counted here"
        return result
    start = time.perf_counter()
    try:
        chk.run(impl, ctx)
        result.earned, result.status = chk.points, "passed"
    except CheckFailed as exc:
        result.message = str(exc)
    except MissingFunction as exc:
        result.message = str(exc)
    except Exception as exc:  # noqa: BLE001 - student code may raise anything
        result.status, result.message = explain_exception(exc)
    finally:
        result.seconds = time.perf_counter() - start
        if ctx.gpu:
            torch.cuda.empty_cache()
    return result


def explain_exception(exc: BaseException) -> tuple:
    """(status, message) for an exception raised by student code."""
    text = _exception_text(exc)
    if NOT_IMPLEMENTED in text:
        return "not implemented", "not implemented yet: fill in the code marked TODO in the exercise"
    where = _student_frame(exc)
    if where is None:
        return "failed", f"the grader failed while checking your result ({_last_line(text)}); please report this"
    first_line = text.strip().splitlines()[0]
    hint = _hint_for(text)
    return "failed", f"your code raised {first_line}\n  at {where}" + (f"\n{hint}" if hint else "")


def _last_line(text: str) -> str:
    return text.strip().splitlines()[-1] if text.strip() else "no message"


def _exception_text(exc: BaseException) -> str:
    parts = []
    while exc is not None:
        parts.append(f"{type(exc).__name__}: {exc}")
        exc = exc.__cause__ or exc.__context__
    return "\n".join(parts)


_NOT_STUDENT_CODE = (str(Path(__file__).resolve().parent), str(Path(inputs.__file__).resolve().parent), "site-packages")


def _student_frame(exc: BaseException) -> str:
    """'folder/file.py:line: source' for the innermost frame of student code, or None."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not any(part in f.filename for part in _NOT_STUDENT_CODE)]
    if not frames:
        return None
    f = frames[-1]
    return f"{Path(f.filename).parent.name}/{Path(f.filename).name}:{f.lineno}: {(f.line or '').strip()}"


_HINTS = {
    "out of bounds": "a load or store reached outside its tensor: check the masks on the ragged edge",
    "illegal memory access": "a load or store reached outside its tensor: check the masks and the offsets",
    "OutOfResources": "the tiles need more shared memory or registers than this GPU has: use smaller BLOCK sizes or fewer stages",
    "must be a power of 2": "tl.arange and block sizes must be powers of two: pad with a mask instead",
    "only 0-dimensional arrays": "your triton/numpy pair is known broken in the interpreter: run `make doctor`",
}


def _hint_for(text: str) -> str:
    return next((hint for key, hint in _HINTS.items() if key in text), "")

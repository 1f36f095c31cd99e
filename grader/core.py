"""Checks and the context they run in.

A check is a plain function of the student's implementation (an object exposing their functions)
and a Context. It passes by returning and fails by raising CheckFailed with a message for the
student. pytest, `make grade` and nbgrader all run these same functions.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from common import inputs
from common.compare import CheckFailed
from common.tuning import one_config

NOT_IMPLEMENTED = "not implemented yet"


@dataclass(frozen=True)
class Check:
    name: str
    points: float
    run: Callable
    description: str
    gpu_only: bool = False
    timed: bool = False  # it times kernels: it has the GPU to itself among graders (grader.turns)


def check(points: float, gpu_only: bool = False, timed: bool = False):
    """Decorator: turn `fn(impl, ctx)` into a Check worth `points`; its docstring describes it.
    A timed check runs on a GPU only."""

    def wrap(fn):
        description = (fn.__doc__ or fn.__name__).strip().splitlines()[0]
        return Check(fn.__name__, points, fn, description, gpu_only or timed, timed)

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

    def wire_marker(self, encode) -> dict:
        return {"fixture": {"name": self.name, "params": encode(self.params)}}


@dataclass
class OutputFile:
    """An argument that is the path of a file the student's function writes (a plot): after the
    call, `content` holds the file's bytes (None when it was not written)."""

    name: str
    content: bytes | None = None

    def wire_marker(self, encode) -> dict:
        return {"outfile": self.name}


def markers_in(value) -> list:
    """The OutputFile markers in an argument, also inside a Fixture's parameters or containers."""
    if isinstance(value, OutputFile):
        return [value]
    if isinstance(value, Fixture):
        return markers_in(value.params)
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [m for v in value for m in markers_in(v)]
    return []


class MissingFunction(Exception):
    """The student's module does not define a function the exercise needs."""


class StudentCodeFailed(Exception):
    """The student's code raised: `info` holds its type, text and the student's line (all strings)."""

    def __init__(self, info: dict):
        self.info = {k: str(info.get(k) or "")[:4000] for k in ("type", "text", "where")}
        super().__init__(self.info["text"])


def raised(exc: BaseException) -> str:
    """'ValueError: message' for what the student's code raised (the last line of its text)."""
    if isinstance(exc, StudentCodeFailed):
        lines = exc.info["text"].strip().splitlines()
        return lines[0] if lines else exc.info["type"]
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"


class ProcessEnded(Exception):
    """The student's process ended, hung or broke the protocol; the message says what happened."""


def run_check(chk: Check, impl, ctx: Context) -> Result:
    """Run one check, turning every way student code can fail into a Result with a message."""
    result = Result(chk.name, chk.points, 0.0, "failed", description=chk.description)
    if chk.gpu_only and not ctx.gpu:
        result.status = "needs a GPU"
        result.message = "runs only on a CUDA GPU (the interpreter cannot check this); not counted here"
        return result
    start = time.perf_counter()
    try:
        with one_config():  # kernels run here (a notebook's, the solution 08 compares with) as a student's do
            note = chk.run(impl, ctx)  # a check may return a line for the student (a measured ratio)
        result.earned, result.status = chk.points, "passed"
        result.message = note if isinstance(note, str) else ""
    except (CheckFailed, MissingFunction, ProcessEnded) as exc:
        result.message = str(exc)
    except StudentCodeFailed as exc:
        result.status, result.message = explain_failure(exc.info)
    except Exception as exc:  # noqa: BLE001 - a bug of the grader's own: say so, grade the rest
        result.message = (
            f"the grader failed while checking your result ({type(exc).__name__}: {exc}); please report this"
        )
    finally:
        result.seconds = time.perf_counter() - start
        if ctx.gpu:
            torch.cuda.empty_cache()
    return result


def explain_failure(info: dict) -> tuple:
    """(status, message) for an exception raised by student code, described by the student's side
    (grader.sandbox.StudentCodeFailed.info: type, text, where)."""
    text = info["text"]
    if NOT_IMPLEMENTED in text:
        return "not implemented", "not implemented yet: fill in the code marked TODO in the exercise"
    first_line = (text.strip().splitlines() or ["an exception"])[0]
    where = f"\n  at {info['where']}" if info["where"] else ""
    hint = _hint_for(text)
    return "failed", f"your code raised {first_line}{where}" + (f"\n{hint}" if hint else "")


_HINTS = {
    "out of bounds": "a load or store reached outside its tensor: check the masks on the ragged edge",
    "illegal memory access": "a load or store reached outside its tensor: check the masks and the offsets",
    "OutOfResources": "the tiles need more shared memory or registers than this GPU has: use smaller BLOCK sizes or fewer stages",
    "must be a power of 2": "tl.arange and block sizes must be powers of two: pad with a mask instead",
    "must be same dtype": "tl.dot needs both inputs in one dtype: cast to the other input's dtype (p.to(v.dtype)), "
    "not to a fixed tl.float16, so that bf16 inputs work too",
    "only 0-dimensional arrays": "your triton/numpy pair is known broken in the interpreter: run `make doctor`",
}


def _hint_for(text: str) -> str:
    return next((hint for key, hint in _HINTS.items() if key in text), "")

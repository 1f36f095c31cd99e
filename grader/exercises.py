"""The course map, found rather than listed: every module grader/checks/ex<folder>.py is an
exercise, graded on <folder>/<MODULE>.py, with its CHECKS and its description (TITLE, MODULE,
FUNCTIONS and, where they differ from the defaults, KERNELS_ONLY, EXTRA_IMPORTS)."""

import importlib
from dataclasses import dataclass

from grader import ROOT


@dataclass(frozen=True)
class Exercise:
    number: str  # "01"
    folder: str  # "01_tiled_matmul": the same name under exercises/, solutions/ and any TARGET
    title: str
    module: str  # the file the student edits, without .py
    functions: tuple  # what the checks take from that module
    kernels_only: bool = True  # answers must be computed by Triton kernels (PyTorch ops outside them fail)
    extra_imports: tuple = ()  # modules graded code may import beyond grader.static.BASE_IMPORTS

    @property
    def checks(self) -> list:
        return _check_module(self.folder).CHECKS

    @property
    def points(self) -> float:
        return sum(c.points for c in self.checks)


def _check_module(folder: str):
    return importlib.import_module(f"grader.checks.ex{folder}")


def _discover() -> tuple:
    exercises = []
    for path in sorted((ROOT / "grader" / "checks").glob("ex[0-9][0-9]_*.py")):
        folder = path.stem[2:]
        m = _check_module(folder)
        exercises.append(
            Exercise(
                folder[:2],
                folder,
                m.TITLE,
                m.MODULE,
                tuple(m.FUNCTIONS),
                kernels_only=getattr(m, "KERNELS_ONLY", True),
                extra_imports=tuple(getattr(m, "EXTRA_IMPORTS", ())),
            )
        )
    return tuple(exercises)


EXERCISES = _discover()


def find(key: str) -> Exercise:
    """The exercise named by its number ("4", "04") or folder ("04_flash_forward")."""
    for ex in EXERCISES:
        if key in (ex.number, ex.folder) or (key.isdigit() and int(key) == int(ex.number)):
            return ex
    known = ", ".join(ex.number for ex in EXERCISES)
    raise ValueError(f"no exercise {key!r}: choose one of {known}")

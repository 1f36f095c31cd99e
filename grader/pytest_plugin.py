"""pytest as a front end to the grader: each check of an exercise is a pytest item.

    pytest exercises/04_flash_forward                  # every check of exercise 04
    pytest exercises -k "causal"                       # checks whose name matches, in every exercise
    pytest exercises/04_flash_forward --target solutions --seed 7 --junitxml=grades.xml

The items are the same checks as `make grade`, run the same way (the student's code in its
sandboxed process, one process per exercise, the same time limits and messages): the selected
checks of an exercise are graded together when its first item runs. Each item records its points
(`user_properties`, so JUnit XML carries them), and the summary lists the points per exercise.
pyproject.toml loads it (`-p grader.pytest_plugin`).
"""

import random
from pathlib import Path

import pytest

from common import env

POINTS = pytest.StashKey[dict]()


def pytest_addoption(parser):
    group = parser.getgroup("course", "grading the course's exercises")
    group.addoption(
        "--target",
        default=None,
        help="grade this course folder (e.g. solutions) instead of the one holding the collected files",
    )
    group.addoption("--seed", type=int, default=None, help="random seed of the inputs (default: a fresh one)")
    group.addoption("--time-limit", type=float, default=None, help="seconds per check (default 120 on CPU, 300 on GPU)")


def pytest_configure(config):
    env.setup()  # before anything imports triton: the interpreter where there is no GPU
    if config.getoption("--seed", None) is None:
        config.option.seed = random.randrange(1, 10**6)
    config.stash[POINTS] = {}


def pytest_report_header(config):
    return f"course grader: seed {config.getoption('--seed')} (--seed reproduces this run)"


def pytest_collect_file(file_path: Path, parent):
    from grader.exercises import EXERCISES

    for exercise in EXERCISES:
        if file_path.name == f"{exercise.module}.py" and file_path.parent.name == exercise.folder:
            return ExerciseFile.from_parent(parent, path=file_path, exercise=exercise)
    return None


class ExerciseFile(pytest.File):
    def __init__(self, *, exercise, **kwargs):
        super().__init__(**kwargs)
        self.exercise = exercise

    def collect(self):
        for chk in self.exercise.checks:
            yield CheckItem.from_parent(self, name=chk.name, check=chk)


class CheckFailedHere(Exception):
    """A check of the grader did not pass: the message is the grader's."""


class CheckItem(pytest.Item):
    def __init__(self, *, check, **kwargs):
        super().__init__(**kwargs)
        self.check = check
        self.exercise = self.parent.exercise

    def runtest(self):
        result = _results(self)[self.name]
        self.user_properties.append(("points", f"{result.earned:g}/{result.points:g}"))
        self.config.stash[POINTS][(self.exercise.number, self.name)] = result
        if result.status == "needs a GPU":
            pytest.skip(f"{result.points:g} points pending: this check needs a CUDA GPU")
        if result.status != "passed":
            raise CheckFailedHere(f"{result.earned:g}/{result.points:g} {self.check.description}\n{result.message}")

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, CheckFailedHere):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"{self.exercise.number} {self.name} ({self.check.points:g} points)"


def _results(item: CheckItem) -> dict:
    """The results of the selected checks of the item's exercise, graded together once."""
    from grader.runner import grade_exercise

    cache = item.session.stash.setdefault(_GRADED, {})
    key = item.exercise.folder
    if key not in cache:
        selected = [i.name for i in item.session.items if isinstance(i, CheckItem) and i.exercise is item.exercise]
        option = item.config.getoption("--target")
        target = Path(option) if option else item.path.parent.parent
        if not target.is_dir():
            raise pytest.UsageError(f"--target {option}: no such folder")
        limit = item.config.getoption("--time-limit") or (300.0 if env.setup().gpu else 120.0)
        graded = grade_exercise(item.exercise, target.resolve(), item.config.getoption("--seed"), limit, only=selected)
        cache[key] = {r.name: r for r in graded}
    return cache[key]


_GRADED = pytest.StashKey[dict]()


def pytest_terminal_summary(terminalreporter, config):
    points = config.stash.get(POINTS, {})
    if not points:
        return
    terminalreporter.section("course points")
    for number in sorted({n for n, _ in points}):
        results = [r for (n, _), r in points.items() if n == number]
        earned = sum(r.earned for r in results)
        possible = sum(r.points for r in results)
        pending = sum(r.points for r in results if r.status == "needs a GPU")
        note = f" ({pending:g} need a GPU)" if pending else ""
        terminalreporter.write_line(f"exercise {number}: {earned:g}/{possible:g}{note}")

"""The grader graded: solutions earn full points, skeletons zero, and every mutant loses points."""

import os
import shutil

import pytest

from common import env
from grader.exercises import EXERCISES
from grader.runner import ROOT, grade_exercise
from grader.skeletons import expected_skeletons
from tests.mutants import mutants_of

SEED = int(os.environ.get("COURSE_TEST_SEED", 1234))  # another seed: COURSE_TEST_SEED=7 make test
TIME_LIMIT = 300 if env.setup().gpu else 60  # seconds per check; a GPU autotunes every new shape
CASES = [(ex, m) for ex in EXERCISES for m in mutants_of(ex.folder)]
TESTED_WITH_FAKES = {"deterministic"}  # no small edit of 07 races: tests/test_gpu_checks.py


def _counted(results):
    return [r for r in results if r.status != "needs a GPU"]


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.folder)
def test_solution_earns_full_points(exercise):
    results = grade_exercise(exercise, ROOT / "solutions", SEED, time_limit=TIME_LIMIT)
    failed = {r.name: r.message for r in _counted(results) if r.status != "passed"}
    assert not failed, failed
    assert sum(r.earned for r in _counted(results)) > 0


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.folder)
def test_untouched_skeleton_earns_zero(exercise):
    results = grade_exercise(exercise, ROOT / "exercises", SEED, time_limit=TIME_LIMIT)
    assert all(r.earned == 0 for r in results)
    assert {r.status for r in _counted(results)} == {"not implemented"}, [r.message for r in results]
    assert all("not implemented yet" in r.message for r in _counted(results))


def test_skeletons_are_generated_from_solutions():
    drift = [str(p) for p, text in expected_skeletons().items() if not p.exists() or p.read_text() != text]
    assert not drift, f"run `make skeletons`: {drift}"


@pytest.mark.parametrize("exercise,mutant", CASES, ids=lambda c: getattr(c, "name", getattr(c, "number", "")))
def test_mutant_loses_points(exercise, mutant, tmp_path):
    shutil.copytree(ROOT / "solutions", tmp_path, dirs_exist_ok=True)  # 07 also uses 04-06
    mutant.plant(tmp_path, exercise)
    results = _counted(grade_exercise(exercise, tmp_path, SEED, time_limit=TIME_LIMIT, only=mutant.fails))
    if not results:
        pytest.skip(f"every check this mutant fails needs a GPU: {', '.join(mutant.fails)}")
    for result in results:
        assert result.status == "failed" and result.earned == 0, f"{result.name} passed mutant {mutant.name}"
        assert mutant.says.lower() in result.message.lower(), result.message


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.folder)
def test_every_check_has_a_mutant_that_fails_it(exercise):
    asserted = {name for m in mutants_of(exercise.folder) for name in m.fails} | TESTED_WITH_FAKES
    unasserted = [c.name for c in exercise.checks if c.name not in asserted]
    assert not unasserted, f"no mutant in tests/mutants/{exercise.folder}.py is declared to fail {unasserted}"

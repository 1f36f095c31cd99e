"""Credit per concept: a one-slip mutant loses the points of its idea only, and each lesson's table of
checks matches the checks the grader runs (names, points, total)."""

import re
import shutil

import pytest

from grader.exercises import EXERCISES
from grader.runner import ROOT, grade_exercise
from tests.mutants import mutants_of
from tests.test_exercises import SEED, TIME_LIMIT, _counted

ONE_SLIP = [(ex, m) for ex in EXERCISES for m in mutants_of(ex.folder) if m.only]
ROW = re.compile(r"^\| `(\w+)` \| (\d+(?:\.\d+)?) \|", re.M)
TOTAL = re.compile(r"^\| \*\*total\*\* \| \*\*(\d+)\*\* \|", re.M)


@pytest.mark.parametrize("exercise,mutant", ONE_SLIP, ids=lambda c: getattr(c, "name", getattr(c, "number", "")))
def test_one_slip_loses_only_its_concept(exercise, mutant, tmp_path):
    shutil.copytree(ROOT / "solutions", tmp_path, dirs_exist_ok=True)
    mutant.plant(tmp_path, exercise)
    results = _counted(grade_exercise(exercise, tmp_path, SEED, time_limit=TIME_LIMIT))
    lost = {r.name for r in results if r.earned < r.points}
    assert lost == set(mutant.fails), {r.name: r.message for r in results if r.name in lost ^ set(mutant.fails)}
    for r in results:
        if r.name in mutant.fails:
            assert mutant.says.lower() in r.message.lower(), r.message


@pytest.mark.parametrize("exercise", [e for e in EXERCISES if e.number in ("04", "06", "07")], ids=lambda e: e.folder)
def test_lesson_table_matches_the_checks(exercise):
    lesson = (ROOT / "exercises" / exercise.folder / "README.md").read_text()
    section = lesson[lesson.index("## What the grader checks") :]
    table = {name: float(points) for name, points in ROW.findall(section)}
    assert table == {c.name: float(c.points) for c in exercise.checks}
    total = TOTAL.search(section)
    assert total and int(total.group(1)) == sum(c.points for c in exercise.checks)

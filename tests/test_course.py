"""The course's documents agree with the grader."""

import re

from grader.exercises import EXERCISES
from grader.runner import ROOT


def test_readme_course_map_matches_the_grader():
    rows = re.findall(
        r"^\| \[(\d\d_\w+)\]\(exercises/\1/README.md\) \| .* \| (\d+) \|$",
        (ROOT / "README.md").read_text(),
        re.MULTILINE,
    )
    assert [(f, float(p)) for f, p in rows] == [(ex.folder, ex.points) for ex in EXERCISES]


def test_every_lesson_lists_its_checks_and_points():
    for ex in EXERCISES:
        lesson = (ROOT / "exercises" / ex.folder / "README.md").read_text()
        for c in ex.checks:
            assert re.search(rf"`?{c.name}`?\s*\|\s*{c.points:g}\s*\|", lesson), f"{ex.folder}: {c.name} ({c.points:g})"
        assert f"make grade EX={ex.number}" in lesson

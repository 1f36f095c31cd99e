"""The nbgrader path end to end: release the course, let a small class submit, autograde, read grades.csv.

Every exercise is released and checked for leaked solutions; only exercises 01 and 03 are graded
here (each graded notebook starts a kernel that imports torch and triton: the whole class on all
seven exercises would take minutes on CI's two CPU cores).
"""

import csv
import html
import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

from grader.exercises import EXERCISES, find
from grader.runner import ROOT, grade_exercise
from grader.skeletons import BEGIN, END, expected_skeletons
from tests.mutants import mutants_of

GRADED = [find("01"), find("03")]
BUG = next(m for m in mutants_of("01_tiled_matmul") if m.name == "strides_ignored")


def _require_nbgrader():
    if importlib.util.find_spec("nbgrader") is None:
        message = "nbgrader is not installed (pip install nbgrader==0.9.6 ipykernel)"
        if os.environ.get("COURSE_REQUIRE_NBGRADER") == "1":
            pytest.fail(f"{message}, and COURSE_REQUIRE_NBGRADER=1 requires it", pytrace=False)
        pytest.skip(message)


def _run(*args):
    """Run `python -m <args>` from the repository; return (exit status, stdout + stderr)."""
    proc = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=900)
    return proc.returncode, proc.stdout + proc.stderr


def _read(path):
    import nbformat

    return nbformat.read(path, as_version=4)


def _write(nb, path):
    import nbformat

    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    _require_nbgrader()
    course = tmp_path_factory.mktemp("course")
    status, output = _run("grader.nbgrader", "release", "--course", str(course))
    assert status == 0, output
    return course


def test_autograde_a_small_class(course, bug_points):
    """alice submits the solutions (with a test cell deleted), bob the untouched release, carol
    exercise 01 with a planted bug, dave exercise 03 with a line that kills the kernel, eve the
    untouched release of 01 with a cell that makes every test cell report full points."""
    import nbformat

    for exercise in GRADED:
        name = f"{exercise.folder}/{exercise.folder}.ipynb"
        solution = _read(course / "source" / name)
        if exercise.number == "01":
            solution.cells.remove(next(c for c in solution.cells if c.metadata.get("nbgrader", {}).get("grade")))
        _write(solution, course / "submitted/alice" / name)
        shutil.copytree(course / "release" / exercise.folder, course / "submitted/bob" / exercise.folder)
    _write(
        _planted(course, "01_tiled_matmul", BUG.old, BUG.new),
        course / "submitted/carol/01_tiled_matmul/01_tiled_matmul.ipynb",
    )
    killer = _planted(course, "03_online_softmax", "import torch\n", "import torch\nimport os\nos._exit(1)\n")
    _write(killer, course / "submitted/dave/03_online_softmax/03_online_softmax.ipynb")
    forger = _read(course / "release/01_tiled_matmul/01_tiled_matmul.ipynb")
    forger.cells.insert(
        len(forger.cells) // 2,
        nbformat.v4.new_code_cell(
            "import grader.notebooks\ngrader.notebooks.run_check_cell = lambda exercise, name, namespace: 10.0"
        ),
    )
    _write(forger, course / "submitted/eve/01_tiled_matmul/01_tiled_matmul.ipynb")

    status, output = _run("grader.nbgrader", "autograde", "--course", str(course))

    full = {ex.folder: ex.points for ex in GRADED}
    expected = {("alice", f): p for f, p in full.items()} | {("carol", "01_tiled_matmul"): bug_points}
    assert 0 < bug_points < full["01_tiled_matmul"]
    rows = list(csv.DictReader((course / "grades.csv").open()))
    graded = {(r["student_id"], r["assignment"]): float(r["score"]) for r in rows if r["assignment"] in full}
    students = ("alice", "bob", "carol", "dave", "eve")
    assert graded == {(s, f): expected.get((s, f), 0.0) for s in students for f in full}, output
    assert {r["assignment"] for r in rows} == {ex.folder for ex in EXERCISES}
    assert status == 1 and "NOT GRADED: dave, 03_online_softmax" in output, output
    feedback = html.unescape((course / "feedback/carol/01_tiled_matmul/01_tiled_matmul.html").read_text())
    assert BUG.says in feedback and "[FAIL]" in feedback


def _planted(course, folder, old, new):
    """The source notebook of `folder` with `old` replaced by `new` in the one cell holding it."""
    nb = _read(course / "source" / folder / f"{folder}.ipynb")
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and old in c.source]
    cell.source = cell.source.replace(old, new)
    return nb


@pytest.fixture(scope="module")
def bug_points(tmp_path_factory):
    """What `make grade` gives the solution of 01 with the planted bug, on the notebooks' inputs."""
    from grader.notebooks import SEED

    target = tmp_path_factory.mktemp("bug")
    shutil.copytree(ROOT / "solutions" / "01_tiled_matmul", target / "01_tiled_matmul")
    module = target / "01_tiled_matmul" / "matmul.py"
    module.write_text(BUG.apply(module.read_text()))
    return sum(r.earned for r in grade_exercise(find("01"), target, SEED, time_limit=60))


def test_release_holds_no_solution_code(course):
    secret = set()
    for solution in (ROOT / "solutions").glob("*/*.py"):
        secret |= _solution_lines(solution.read_text())
    given = {line.strip() for text in expected_skeletons().values() for line in text.splitlines()}
    secret -= given  # lines that also occur outside the regions are given to students anyway
    for notebook in (course / "release").glob("*/*.ipynb"):
        code = [line.strip() for c in _read(notebook).cells if c.cell_type == "code" for line in c.source.splitlines()]
        leaked = secret.intersection(code)
        assert not leaked, f"{notebook.name} holds solution lines: {sorted(leaked)[:5]}"
    assert sorted(p.name for p in (course / "release").glob("*/*")) == sorted(f"{ex.folder}.ipynb" for ex in EXERCISES)


def _solution_lines(source):
    lines, inside = set(), False
    for line in source.splitlines():
        marker = line.strip()
        if marker in (BEGIN, END):
            inside = marker == BEGIN
        elif inside and marker:
            lines.add(marker)
    return lines


def test_kernels_get_compilable_stubs(course):
    cells = _read(course / "release/01_tiled_matmul/01_tiled_matmul.ipynb").cells
    kernel = next(c.source for c in cells if "@triton.jit" in c.source)
    assert 'tl.static_assert(False, "not implemented yet: matmul_kernel")' in kernel
    assert "raise NotImplementedError()" not in "".join(c.source for c in cells)


def test_execute_command_prints_each_test_cell(course):
    status, output = _run("grader.notebooks", str(course / "source/03_online_softmax/03_online_softmax.ipynb"))
    assert status == 0, output
    points = find("03").points
    assert "03_online_softmax-long_rows: 3/3" in output and f"Total: {points:g}/{points:g}" in output


def test_a_kernel_that_died_at_start_is_started_again():
    """Kernels started side by side can collide on a port: the notebook runs again, a few times at
    most; any other error is not retried."""
    from grader.notebooks import KERNEL_STARTS, with_kernel_restarts

    starts = []

    def run(failures, error="Kernel died before replying to kernel_info"):
        def start():
            starts.append(1)
            if len(starts) <= failures:
                raise RuntimeError(error)
            return "ran"

        starts.clear()
        return start

    assert with_kernel_restarts(run(KERNEL_STARTS - 1)) == "ran" and len(starts) == KERNEL_STARTS
    with pytest.raises(RuntimeError, match="kernel_info"):
        with_kernel_restarts(run(KERNEL_STARTS))
    assert len(starts) == KERNEL_STARTS
    with pytest.raises(RuntimeError, match="something else"):
        with_kernel_restarts(run(1, "something else"))
    assert len(starts) == 1


def test_clear_errors_before_release_and_without_submissions(tmp_path, course):
    status, output = _run("grader.nbgrader", "autograde", "--course", str(tmp_path))
    assert status != 0 and "-m grader.nbgrader release --course" in output
    empty = tmp_path / "empty"
    shutil.copytree(course, empty, ignore=shutil.ignore_patterns("submitted", "autograded", "feedback"))
    status, output = _run("grader.nbgrader", "autograde", "--course", str(empty))
    assert status != 0 and "nothing to grade" in output


def test_release_again_keeps_the_class_work(course, tmp_path):
    """`make release` on a course in use rewrites the notebooks it is asked for and nothing else: the
    gradebook's students and submissions, submitted/, autograded/, feedback/, grades.csv, the other
    exercises' notebooks and an nbgrader_config.py edited by hand stay as they were."""
    from nbgrader.api import Gradebook

    live = tmp_path / "course"
    shutil.copytree(course, live, ignore=shutil.ignore_patterns("submitted", "autograded", "feedback", "grades.csv"))
    with Gradebook(f"sqlite:///{live / 'gradebook.db'}") as gradebook:
        for student in ("ann", "ben", "cat", "dan", "eva", "fay"):
            gradebook.add_student(student)
            gradebook.add_submission("01_tiled_matmul", student)
        before = _class(gradebook)
    work = {
        live / "submitted/ann/01_tiled_matmul/01_tiled_matmul.ipynb": "{}",
        live / "autograded/ann/01_tiled_matmul/01_tiled_matmul.ipynb": "{}",
        live / "feedback/ann/01_tiled_matmul/01_tiled_matmul.html": "<p>",
        live / "grades.csv": "student_id,score\n",
    }
    for path, text in work.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    config = live / "nbgrader_config.py"
    config.write_text(config.read_text() + "# the instructor's own setting\n")
    other = live / "release/03_online_softmax/03_online_softmax.ipynb"
    other_text = other.read_text()
    stale = live / "release/01_tiled_matmul/01_tiled_matmul.ipynb"
    stale.write_text("stale")

    status, output = _run("grader.nbgrader", "release", "--course", str(live), "01")

    assert status == 0, output
    assert _read(stale).cells, "the released notebook was not rewritten"
    with Gradebook(f"sqlite:///{live / 'gradebook.db'}") as gradebook:
        assert _class(gradebook) == before and {"ann", "fay"} <= set(before[0])
    assert all(path.read_text() == text for path, text in work.items())
    assert other.read_text() == other_text
    assert config.read_text().endswith("# the instructor's own setting\n") and "kept" in output
    assert (live / "nbgrader_config.py.new").is_file()


def _class(gradebook):
    """The gradebook's students and the submissions of exercise 01."""
    submissions = gradebook.find_assignment("01_tiled_matmul").submissions
    return sorted(s.id for s in gradebook.students), sorted(s.student.id for s in submissions)

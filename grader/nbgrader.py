"""`python -m grader.nbgrader release|autograde --course DIR`: the course through nbgrader.

release    writes DIR/nbgrader_config.py and DIR/source/<folder>/<folder>.ipynb for each exercise
           (grader.notebooks), then runs `nbgrader generate_assignment`, which writes the student
           notebooks to DIR/release/<folder>/. Solution regions become the stubs of exercises/
           (grader.skeletons), which compile inside a @triton.jit kernel on a GPU.
autograde  runs `nbgrader autograde`, `generate_feedback` and `export` on everything in
           DIR/submitted/<student>/<folder>/: DIR/grades.csv and DIR/feedback/<student>/<folder>/.

nbgrader runs in child processes (`python -m nbgrader ...` in DIR), exactly as an instructor would
run it by hand there; the notebooks' kernels find the course package through PYTHONPATH.
"""

import argparse
import csv
import os
import subprocess
import sys
from pathlib import Path

from grader import ROOT
from grader.notebooks import CELL_TIMEOUT, course_environment, source_notebook
from grader.skeletons import BEGIN, make_skeleton

try:
    from nbgrader.converters import GenerateAssignment
    from nbgrader.preprocessors import ClearSolutions
except ModuleNotFoundError:
    from common import env

    raise SystemExit(env.missing_packages_message(["nbgrader"], "grader.nbgrader")) from None

CONFIG = """\
# nbgrader settings of this course directory, written by `python -m grader.nbgrader release`.
import os
import sys

# The course repository: nbgrader imports the course's stubs from it, the notebooks' kernels the grader.
COURSE_REPOSITORY = {root!r}
sys.path.insert(0, COURSE_REPOSITORY)
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [COURSE_REPOSITORY, os.environ.get("PYTHONPATH")]))

from grader.nbgrader import generate_assignment_preprocessors  # noqa: E402

c = get_config()  # noqa: F821
# Solution regions become tl.static_assert inside @triton.jit kernels, NotImplementedError elsewhere.
c.GenerateAssignment.preprocessors = generate_assignment_preprocessors()
# Seconds per cell: a first Triton compile + autotune on a GPU, or the CPU interpreter.
c.Execute.timeout = {timeout}
# A test cell a student deleted is put back before grading.
c.OverwriteCells.add_missing_cells = True
# zip_collect: files named <student>_<folder>.ipynb, e.g. alice_01_tiled_matmul.ipynb.
c.FileNameCollectorPlugin.named_regexp = r".*/(?P<student_id>[^/]+?)_(?P<file_id>\\d\\d_[^/]+\\.ipynb)$"
"""


class ClearSolutionsWithCourseStubs(ClearSolutions):
    """nbgrader's ClearSolutions, with the stubs of exercises/ in code cells: a raise does not
    compile inside a @triton.jit kernel on a GPU, so kernels get tl.static_assert instead."""

    def _replace_solution_region(self, cell, language):
        if cell.cell_type != "code" or BEGIN not in cell.source:
            return super()._replace_solution_region(cell, language)
        cell.source = make_skeleton(cell.source).rstrip("\n")
        return True


def generate_assignment_preprocessors() -> list:
    """nbgrader's generate_assignment pipeline with ClearSolutions replaced by the course's stubs."""
    default = GenerateAssignment.class_traits()["preprocessors"].default()
    return [ClearSolutionsWithCourseStubs if p is ClearSolutions else p for p in default]


def run_nbgrader(course: Path, *args) -> int:
    print(f"$ nbgrader {' '.join(args)}", flush=True)
    return subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=course_environment()).returncode


# ----------------------------------------------------------------------------- release
def release(course: Path, exercises) -> None:
    """Write the source notebooks of `exercises` and nbgrader's student versions of them. On an
    existing course only those notebooks change: the gradebook (students, grades), submitted/,
    autograded/, feedback/, grades.csv and an nbgrader_config.py edited by hand are kept."""
    import nbformat

    course.mkdir(parents=True, exist_ok=True)
    _write_config(course)
    for exercise in exercises:
        path = course / "source" / exercise.folder / f"{exercise.folder}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(source_notebook(exercise), path)
    from grader.exercises import EXERCISES

    # One nbgrader run for the whole course ("*": every assignment in source/), else one per exercise.
    folders = ["*"] if set(exercises) == set(EXERCISES) else [ex.folder for ex in exercises]
    for folder in folders:
        if run_nbgrader(course, "generate_assignment", folder, "--force") != 0:
            raise SystemExit(
                f"error: nbgrader generate_assignment {folder} failed (its log is above). The gradebook "
                "and submissions are untouched; if nbgrader refuses to drop a test cell that students "
                "were already graded on, release into a new course: make release COURSE=<new folder>"
            )
    for exercise in exercises:
        _check_stubs(course, exercise.folder)
    print(f"\nStudent notebooks: {course / 'release'}/<folder>/<folder>.ipynb")


def _write_config(course: Path) -> None:
    """nbgrader_config.py, unless the instructor edited the one written before: that one is kept
    and the new one written beside it. A hidden copy of what was written tells the two apart."""
    config, written = course / "nbgrader_config.py", course / ".nbgrader_config.py.written"
    text = CONFIG.format(root=str(ROOT), timeout=CELL_TIMEOUT)
    edited = config.is_file() and not (written.is_file() and written.read_text() == config.read_text())
    if edited and config.read_text() != text:
        config.with_name("nbgrader_config.py.new").write_text(text)
        print(
            f"kept {config}: it was edited by hand. The configuration this release would write is in "
            f"{config.name}.new: merge what you need.",
            flush=True,
        )
        return
    config.write_text(text)
    written.write_text(text)


def _check_stubs(course: Path, folder: str) -> None:
    """Fail unless every solution cell of the release holds the course's stubs (nbgrader only logs
    a config file it cannot load, then goes on with its own stubs)."""
    import nbformat

    def solution_cells(stage):
        nb = nbformat.read(course / stage / folder / f"{folder}.ipynb", as_version=4)
        return {
            c.metadata.nbgrader["grade_id"]: c.source
            for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("solution")
        }

    expected = {grade_id: make_skeleton(source).rstrip("\n") for grade_id, source in solution_cells("source").items()}
    if solution_cells("release") != expected:
        raise SystemExit(
            f"error: release/{folder} does not hold the course's stubs: did nbgrader_config.py load? "
            "(see the log above)"
        )


# ----------------------------------------------------------------------------- autograde
def autograde(course: Path) -> int:
    if not (course / "nbgrader_config.py").is_file() or not (course / "release").is_dir():
        raise SystemExit(
            f"error: {course} has no release: run `{_python()} -m grader.nbgrader release --course {course}` "
            "first (or `make release COURSE=...`)"
        )
    submitted = _submissions(course)
    if not submitted:
        raise SystemExit(
            f"error: nothing to grade in {course / 'submitted'}: put each notebook at "
            "submitted/<student>/<folder>/<folder>.ipynb (`nbgrader zip_collect <folder>` does it "
            "from downloaded files)"
        )
    failed = []
    for folder, students in submitted.items():
        run_nbgrader(course, "autograde", folder, "--force")
        failed += [
            (s, folder) for s in students if not (course / "autograded" / s / folder / f"{folder}.ipynb").is_file()
        ]
        regrade(course, folder, [s for s in students if (s, folder) not in failed])
        run_nbgrader(course, "generate_feedback", folder, "--force")
    grades = course / "grades.csv"
    if run_nbgrader(course, "export", "--to", str(grades)) != 0:
        raise SystemExit("error: nbgrader export failed (its log is above)")
    print(_summary(grades, course))
    for student, folder in failed:
        print(
            f"NOT GRADED: {student}, {folder}: nbgrader could not run this notebook (its log is above), so it "
            f"scores 0. A kernel that died (os._exit, a segfault, out of memory) does this; to see where, run "
            f"{_python()} -m grader.notebooks {course / 'submitted' / student / folder / f'{folder}.ipynb'}"
        )
    return 1 if failed else 0


def regrade(course: Path, folder: str, students) -> None:
    """Scores for credit come from the grader's own run on the code of each submitted notebook, in
    the sandbox (grader.runner), not from test cells that ran in the student's kernel, where the
    student's code could have patched them: they replace nbgrader's scores in the gradebook."""
    import tempfile

    from nbgrader.api import Gradebook, MissingEntry

    from grader.__main__ import choose_seed
    from grader.exercises import EXERCISES, find
    from grader.notebooks import SEED
    from grader.report import exercise_report
    from grader.runner import grade_exercise
    from grader.submission import write_notebook_module

    exercise = find(folder)
    seed = (
        SEED
        if "COURSE_GRADING_SEED" not in os.environ and "COURSE_GRADING_SEED_FILE" not in os.environ
        else choose_seed(None)[0]
    )
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for student in students:
            with tempfile.TemporaryDirectory() as target:
                for ex in EXERCISES:  # 07 uses the student's 04-06
                    notebook = course / "submitted" / student / ex.folder / f"{ex.folder}.ipynb"
                    if notebook.is_file() and not notebook.is_symlink():
                        write_notebook_module(notebook, Path(target) / ex.folder / f"{ex.module}.py")
                results = grade_exercise(exercise, Path(target), seed, time_limit=CELL_TIMEOUT)
            print(f"\n[{student}] " + exercise_report(exercise, results), flush=True)
            for r in results:
                try:
                    grade = gradebook.find_grade(f"{folder}-{r.name}", folder, folder, student)
                except MissingEntry:
                    continue
                grade.manual_score = min(max(r.earned, 0.0), r.points)
            gradebook.db.commit()


def _python() -> str:
    """This Python as a command to type in the repository: .venv/bin/python when it is the course's."""
    path = Path(sys.executable)
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _submissions(course: Path) -> dict:
    """{folder: [students]} for every released assignment someone submitted."""
    submitted: dict[str, list[str]] = {}
    for path in sorted((course / "submitted").glob("*/*/")):
        student, folder = path.parent.name, path.name
        if (course / "release" / folder).is_dir():
            submitted.setdefault(folder, []).append(student)
        else:
            print(f"warning: skipping submitted/{student}/{folder}: no such assignment in release/", file=sys.stderr)
    return dict(sorted(submitted.items()))


def _summary(grades: Path, course: Path) -> str:
    """A table of the scores in grades.csv: one row per student, one column per exercise."""
    rows = list(csv.DictReader(grades.open()))
    folders = sorted({r["assignment"] for r in rows})
    students = sorted({r["student_id"] for r in rows})
    score = {(r["student_id"], r["assignment"]): float(r["score"]) for r in rows}
    best = {r["assignment"]: float(r["max_score"]) for r in rows}
    width = max(len(name) for name in students + ["student"])

    def line(name, values):
        return f"{name:<{width}} " + " ".join(f"{v:>5g}" for v in values) + f" {sum(values):>6g}"

    lines = [
        "",
        f"{'student':<{width}} " + " ".join(f"{f[:2]:>5}" for f in folders) + "  total",
        line("(max)", [best[f] for f in folders]),
    ]
    lines += [line(s, [score.get((s, f), 0.0) for f in folders]) for s in students]
    lines.append(f"\nGrades: {grades}\nFeedback: {course / 'feedback'}/<student>/<folder>/<folder>.html")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- command line
def main(argv=None) -> int:
    from grader.exercises import EXERCISES, find

    parser = argparse.ArgumentParser(prog="python -m grader.nbgrader", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("release", "autograde"))
    parser.add_argument("exercises", nargs="*", help="release only these exercises (numbers or folders); default: all")
    parser.add_argument("--course", type=Path, required=True, help="the nbgrader course directory")
    args = parser.parse_intermixed_args(argv)
    course = args.course.resolve()
    if args.command == "autograde":
        return autograde(course)
    try:
        exercises = [find(e) for e in args.exercises] or list(EXERCISES)
        release(course, exercises)
    except (ValueError, FileNotFoundError, ModuleNotFoundError) as exc:
        raise SystemExit(f"error: {exc}") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The course's commands never destroy work, and explain wrong arguments before grading anything."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader import bench, clean, skeletons
from grader.__main__ import main as grade_main

ROOT = Path(__file__).resolve().parent.parent

SOLUTION = """\
import triton


@triton.jit
def kernel(x):
    ### BEGIN SOLUTION
    y = x + 1
    ### END SOLUTION


def helper():
    ### BEGIN SOLUTION
    return 2
    ### END SOLUTION
"""


def _git(repo, *args):
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=course", "-c", "user.email=course@example.com", *args],
        check=True,
        capture_output=True,
    )


@pytest.fixture
def course_repo(tmp_path):
    """A repository with one solution and its generated skeleton, committed."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    (tmp_path / "solutions/09_toy").mkdir(parents=True)
    (tmp_path / "solutions/09_toy/toy.py").write_text(SOLUTION)
    (tmp_path / "exercises/09_toy").mkdir(parents=True)
    (tmp_path / "exercises/09_toy/toy.py").write_text(skeletons.make_skeleton(SOLUTION))
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "course")
    return tmp_path


# ----------------------------------------------------------------------------- make skeletons
def test_skeletons_never_overwrite_a_students_edits(course_repo):
    exercise = course_repo / "exercises/09_toy/toy.py"
    mine = exercise.read_text().replace('raise NotImplementedError("not implemented yet: helper")', "return 2")
    exercise.write_text(mine)
    (course_repo / "solutions/09_toy/toy.py").write_text(SOLUTION.replace("return 2", "return 3"))
    assert skeletons.write_skeletons(course_repo) == [exercise]
    assert exercise.read_text() == mine

    _git(course_repo, "commit", "-q", "-am", "my work")  # committed work is still work
    assert skeletons.write_skeletons(course_repo) == [exercise]
    assert exercise.read_text() == mine


def test_skeletons_write_elsewhere_or_when_forced(course_repo, tmp_path_factory):
    exercise = course_repo / "exercises/09_toy/toy.py"
    exercise.write_text(exercise.read_text() + "# my notes\n")
    out = tmp_path_factory.mktemp("out")
    assert skeletons.write_skeletons(course_repo, out=out) == []
    assert (out / "09_toy/toy.py").read_text() == skeletons.make_skeleton(SOLUTION)
    assert exercise.read_text().endswith("# my notes\n")
    assert skeletons.write_skeletons(course_repo, force=True) == []
    assert exercise.read_text() == skeletons.make_skeleton(SOLUTION)


def test_skeletons_follow_an_edited_solution(course_repo):
    """The instructor's workflow: edit a solution, regenerate; the old skeleton is replaced."""
    changed = SOLUTION.replace("y = x + 1", "y = x + 2\n    z = y")
    (course_repo / "solutions/09_toy/toy.py").write_text(changed)
    assert skeletons.write_skeletons(course_repo) == []
    _git(course_repo, "commit", "-q", "-am", "solution changed, skeleton regenerated")
    (course_repo / "solutions/09_toy/toy.py").write_text(SOLUTION)
    assert skeletons.write_skeletons(course_repo) == []
    assert (course_repo / "exercises/09_toy/toy.py").read_text() == skeletons.make_skeleton(SOLUTION)


def test_make_skeletons_refuses_and_says_how(course_repo):
    """The command line, writing elsewhere (OUT=): a file edited there is refused, with the way out."""

    def skeletons_to_out():
        return subprocess.run(
            [sys.executable, "-m", "grader.skeletons", "--out", str(course_repo / "out")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )

    proc = skeletons_to_out()
    assert proc.returncode == 0 and "wrote" in proc.stdout, proc.stdout + proc.stderr
    proc = skeletons_to_out()
    assert proc.returncode == 0 and "wrote" not in proc.stdout  # nothing changed, nothing written
    stray = next((course_repo / "out").glob("*/*.py"))
    stray.write_text("# edited\n")
    proc = skeletons_to_out()
    assert proc.returncode == 1 and "FORCE=1" in proc.stderr and stray.read_text() == "# edited\n"


def test_make_help_separates_instructor_commands():
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    text = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    students, instructors = text.split("For instructors")
    for command in ("make grade", "make doctor", "make test"):
        assert command in students
    for command in ("make skeletons", "make release", "make autograde", "make clean"):
        assert command in instructors and command not in students


def test_make_bench_passes_its_switches_to_the_benchmark():
    if shutil.which("make") is None:
        pytest.skip("make is not installed")

    def command(*assignments):
        lines = subprocess.run(
            ["make", "-n", "bench", *assignments], cwd=ROOT, capture_output=True, text=True, timeout=60
        ).stdout.splitlines()
        return next(line for line in lines if "-m grader.bench" in line).split("-m grader.bench", 1)[1].split()

    plain, both = command(), command("GRAPHS=1", "AUTOGRAD_THREADS=0")
    assert "--graphs" not in plain and "--no-autograd-threads" not in plain
    assert "--no-autograd-threads" not in command("AUTOGRAD_THREADS=1")
    args = bench.parse_args(both)
    assert args.graphs and args.no_autograd_threads


# ----------------------------------------------------------------------------- make clean
def test_clean_keeps_courses_with_grading_work(tmp_path):
    course = tmp_path / "build/course"
    (course / "submitted/alice/01_tiled_matmul").mkdir(parents=True)
    (course / "submitted/alice/01_tiled_matmul/01_tiled_matmul.ipynb").write_text("{}")
    (course / "gradebook.db").write_text("students")
    other = tmp_path / "build/other_course"
    (other / "feedback/bob").mkdir(parents=True)
    (tmp_path / "build/fresh/release").mkdir(parents=True)  # a release nobody has submitted to
    (tmp_path / "build/notes.txt").write_text("scratch")
    (tmp_path / ".pytest_cache").mkdir()

    kept = clean.clean(tmp_path)

    assert kept == [course, other]
    assert (course / "gradebook.db").read_text() == "students"
    assert (course / "submitted/alice/01_tiled_matmul/01_tiled_matmul.ipynb").is_file()
    assert (other / "feedback/bob").is_dir()
    assert not (tmp_path / "build/fresh").exists() and not (tmp_path / "build/notes.txt").exists()
    assert not (tmp_path / ".pytest_cache").exists()


def test_clean_removes_build_without_grading_work(tmp_path):
    (tmp_path / "build/course/source/01_tiled_matmul").mkdir(parents=True)
    assert clean.clean(tmp_path) == []
    assert not (tmp_path / "build").exists()
    assert clean.clean(tmp_path) == []  # nothing to clean is fine


def test_make_clean_runs_the_careful_cleaner():
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    recipe = subprocess.run(["make", "-n", "clean"], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    assert "-m grader.clean" in recipe and "rm -rf build" not in recipe


# ----------------------------------------------------------------------------- python -m grader
def _grade(capsys, *argv):
    """Exit status and error text of `python -m grader ARGV`, run in this process."""
    with pytest.raises(SystemExit) as stopped:
        grade_main(list(argv))
    return stopped.value.code, capsys.readouterr().err


def test_unwritable_json_is_refused_before_grading(capsys, tmp_path):
    code, _ = _grade(capsys, "01", "--target", "solutions", "--json", str(tmp_path / "missing_dir/x.json"))
    assert "missing_dir does not exist" in str(code)
    code, _ = _grade(capsys, "01", "--target", "solutions", "--json", str(tmp_path))
    assert "is a folder" in str(code)


def test_target_one_level_too_deep_is_explained(capsys):
    code, _ = _grade(capsys, "01", "--target", "exercises/01_tiled_matmul")
    assert "is the folder of exercise 01 itself" in str(code) and "TARGET=exercises" in str(code)


def test_target_one_level_too_shallow_is_explained(capsys, tmp_path):
    shutil.copytree(ROOT / "exercises/01_tiled_matmul", tmp_path / "submission/01_tiled_matmul")
    code, _ = _grade(capsys, "01", "--target", str(tmp_path))
    assert f"TARGET={tmp_path / 'submission'}" in str(code)


def test_wrong_target_with_json_writes_why(capsys, tmp_path):
    """An autograder shows the student the reason: results.json says it, with score 0."""
    import json

    (tmp_path / "empty").mkdir()
    code, _ = _grade(capsys, "--target", str(tmp_path / "empty"), "--json", str(tmp_path / "results.json"))
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["score"] == 0 and results["output"] == code and "it is empty" in code


def test_empty_or_missing_target_is_explained(capsys, tmp_path):
    code, _ = _grade(capsys, "01", "--target", str(tmp_path))
    assert "it is empty" in str(code) and "01_tiled_matmul/matmul.py" in str(code)
    code, _ = _grade(capsys, "01", "--target", str(tmp_path / "nowhere"))
    assert "nothing exists there" in str(code)


def test_missing_exercise_folders_are_announced(tmp_path):
    from grader.__main__ import parse_args, validate
    from grader.exercises import EXERCISES

    (tmp_path / EXERCISES[0].folder).mkdir()
    notes = validate(parse_args(["--target", str(tmp_path)]), list(EXERCISES), tmp_path)
    assert len(notes) == 1 and EXERCISES[1].folder in notes[0] and "score 0" in notes[0]
    assert EXERCISES[0].folder not in notes[0].split(":")[1]


# A Python without torch (or nbgrader): the module is hidden from import and from find_spec.
WITHOUT = """
import importlib.util, runpy, sys
hidden, module = sys.argv[1], sys.argv[2]
real = importlib.util.find_spec
importlib.util.find_spec = lambda name, *rest: None if name == hidden else real(name, *rest)
sys.modules[hidden] = None
sys.argv = [module, *sys.argv[3:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize(
    "hidden, command",
    [
        ("torch", "grader 01"),
        ("torch", "grader.doctor"),
        ("torch", "grader.notebooks x.ipynb"),
        ("nbgrader", "grader.nbgrader release --course build/x"),
    ],
)
def test_entry_points_explain_a_python_without_the_course_packages(hidden, command):
    """`python -m ...` from a Python that lacks a package: which Python to use instead, no traceback."""
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT, hidden, *command.split()], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    out = proc.stdout + proc.stderr
    module = command.split()[0]
    assert proc.returncode != 0 and "Traceback" not in out, out
    assert f"{hidden} is not installed for this Python" in out and f"-m {module} ..." in out, out
    assert not (ROOT / "build/x").exists()


# ----------------------------------------------------------------------------- one source of pins
def test_pins_live_in_pyproject_only():
    """pyproject.toml's dependency groups pin the packages; the Makefile, the container and CI install
    them from there and pin nothing themselves."""
    import tomllib

    groups = tomllib.loads((ROOT / "pyproject.toml").read_text())["dependency-groups"]
    pinned = {req.split("==")[0] for name in ("course", "test", "nbgrader") for req in groups[name]}
    assert {"torch", "triton", "numpy", "matplotlib", "pytest", "nbgrader"} <= pinned
    assert all("==" in req for name in ("course", "test", "nbgrader") for req in groups[name])
    assert not (ROOT / "requirements.txt").exists()
    makefile, dockerfile = (ROOT / "Makefile").read_text(), (ROOT / "docker/Dockerfile").read_text()
    assert "pip install $$index --group all" in makefile
    assert "make venv VENV=/opt/venv" in dockerfile and "pip install" not in dockerfile
    for text in (makefile, dockerfile, (ROOT / "README.md").read_text(), (ROOT / ".ci/run").read_text()):
        assert not any(f"{package}==" in text for package in pinned)


def test_readme_commands_exist_as_printed():
    """Every `make X` in README is a target, every `python -m M` names the course's Python and a
    module that exists."""
    import importlib.util
    import re

    readme = (ROOT / "README.md").read_text()
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    assert set(re.findall(r"`make ([a-z][\w-]*)", readme)) <= targets
    for prefix, module in re.findall(r"(\S*)python -m ([\w.]+)", readme):
        assert prefix.endswith(".venv/bin/"), f"`{prefix}python -m {module}`: name .venv/bin/python"
        if module.strip("."):
            assert importlib.util.find_spec(module) is not None, module

"""What students and Gradescope get: the course without solutions, and an autograder that grades
a submission with the instructor's seed."""

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile

from grader.pack import ROOT, gradescope, student_pack
from grader.skeletons import BEGIN, END, expected_skeletons


def test_student_pack_holds_no_solutions(tmp_path):
    with tarfile.open(student_pack(tmp_path / "pack.tar.gz")) as tar:
        names = tar.getnames()
        texts = [tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()]
    assert "flash-attention-course/exercises/01_tiled_matmul/matmul.py" in names
    assert "flash-attention-course/grader/checks/ex04_flash_forward.py" in names
    assert not [n for n in names if "/solutions/" in n or "/tests/" in n]
    secret = set()
    for solution in (ROOT / "solutions").glob("*/*.py"):
        secret |= _runs(_solution_regions(solution.read_text()))
    secret -= {run for text in expected_skeletons().values() for run in _runs([text])}
    shipped = {run for t in texts for run in _runs([t.decode(errors="replace")])}
    assert secret and not secret & shipped, sorted(secret & shipped)[:3]


def _solution_regions(source: str) -> list:
    return [region.split(END)[0] for region in source.split(BEGIN)[1:]]


def _runs(texts, length=3) -> set:
    """Every run of `length` consecutive non-blank lines (stripped): a leak of solution code shows as one."""
    runs = set()
    for text in texts:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        runs |= {"\n".join(lines[i : i + length]) for i in range(len(lines) - length + 1)}
    return runs


def test_gradescope_autograder_grades_a_submission_with_the_instructor_seed(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_GRADING_SEED", "424242")
    archive = gradescope(tmp_path / "build" / "autograder.zip", ["01"])
    with zipfile.ZipFile(archive) as z:
        names = z.namelist()
        assert {"setup.sh", "run_autograder", "grading_seed"} <= set(names)
        assert not [n for n in names if n.startswith(("course/solutions/", "course/tests/"))]
        z.extractall(tmp_path / "source")
    submission = tmp_path / "submission" / "handed_in"
    submission.mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / "01_tiled_matmul" / "matmul.py", submission)
    env = os.environ | {"AUTOGRADER": str(tmp_path), "PYTHON": sys.executable}
    env.pop("COURSE_GRADING_SEED")
    run = subprocess.run(
        ["bash", str(tmp_path / "source" / "run_autograder")], env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stdout + run.stderr
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    assert results["score"] == 10 and "424242" not in json.dumps(results) + run.stdout
    assert "instructor's grading seed" in results["output"]

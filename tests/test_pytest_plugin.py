"""`pytest exercises/NN_*`: the checks as pytest items, with the grader's messages and points."""

import subprocess
import sys

from grader.runner import ROOT


def _pytest(*args, tmp_path):
    xml = tmp_path / "grades.xml"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider", f"--junitxml={xml}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return run.returncode, run.stdout + run.stderr, xml.read_text()


def test_solutions_pass_as_items_with_their_points(tmp_path):
    status, output, xml = _pytest(
        "solutions/02_safe_softmax", "-k", "short_rows or long_rows", "--seed", "3", tmp_path=tmp_path
    )
    assert status == 0, output
    assert "2 passed, 3 deselected" in output and "exercise 02: 5/5" in output
    assert 'name="points" value="2/2"' in xml and 'name="points" value="3/3"' in xml


def test_a_skeleton_fails_each_item_with_the_graders_message(tmp_path):
    status, output, xml = _pytest("exercises/01_tiled_matmul", "-k", "many_tiles", tmp_path=tmp_path)
    assert status == 1 and "not implemented yet" in output and "exercise 01: 0/1" in output
    assert 'name="points" value="0/1"' in xml


def test_target_grades_another_course_folder(tmp_path):
    status, output, _ = _pytest(
        "exercises/02_safe_softmax", "--target", "solutions", "-k", "negative_infinity", tmp_path=tmp_path
    )
    assert status == 0 and "exercise 02: 2/2" in output, output

"""The course autograder: checks per exercise, run in isolated processes, reported for people,
pytest, Gradescope and nbgrader alike."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the course repository

"""The course autograder: checks per exercise, run in isolated processes, reported for people,
pytest, Gradescope and nbgrader alike."""

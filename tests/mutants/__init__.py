"""Deliberately wrong kernels, written as small text edits of the instructor solutions.

Each exercise's module lists MUTANTS. A mutant names the checks that must lose points on it and a
phrase the diagnosis must contain, so the grader is tested on the bugs students really write. A
mutant marked `only` is one slip in one idea of the lesson: it must lose the points of its checks and
no others (credit per concept).
"""

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    old: str  # text that occurs exactly once in the solution module
    new: str  # what it becomes
    fails: tuple  # checks that must lose their points
    says: str  # a phrase expected in the failure messages of those checks (case-insensitive)
    only: bool = False  # one slip: every other check that runs here must still earn its points

    def apply(self, source: str) -> str:
        count = source.count(self.old)
        if count != 1:
            raise AssertionError(f"mutant {self.name}: expected its text once in the solution, found it {count} times")
        return source.replace(self.old, self.new)


def mutants_of(folder: str) -> list:
    try:
        return importlib.import_module(f"tests.mutants.{folder}").MUTANTS
    except ModuleNotFoundError:
        return []

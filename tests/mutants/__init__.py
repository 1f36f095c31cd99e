"""Deliberately wrong kernels, written as small text edits of the instructor solutions.

Each exercise's module lists MUTANTS. A mutant names the checks that must lose points on it and a
phrase the diagnosis must contain, so the grader is tested on the bugs students really write. A
mutant marked `only` is one slip in one idea of the lesson: it must lose the points of its checks and
no others (credit per concept).
"""

import importlib
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    old: str  # text that occurs exactly once in the solution module
    new: str  # what it becomes
    fails: tuple  # checks that must lose their points
    says: str  # a phrase expected in the failure messages of those checks (case-insensitive)
    only: bool = False  # one slip: every other check that runs here must still earn its points
    file: str = ""  # the module it edits, under the course folder, when not the exercise's own

    def plant(self, course, exercise) -> None:
        """Edit this mutant into the course folder `course` (a copy of solutions/)."""
        module = course / (self.file or f"{exercise.folder}/{exercise.module}.py")
        module.write_text(self.apply(module.read_text()))

    def apply(self, source: str) -> str:
        """`source` with `old` replaced by `new`. `old` must occur exactly once; if it does not occur
        as written, whitespace is ignored, so a solution whose lines were re-wrapped or re-indented
        still takes its mutants."""
        if source.count(self.old) == 1:
            return source.replace(self.old, self.new)
        loose = re.compile(r"\s*".join(re.escape(ch) for ch in self.old if not ch.isspace()))
        found = len(loose.findall(source)) if self.old not in source else source.count(self.old)
        if found != 1:
            raise AssertionError(
                f"mutant {self.name} no longer applies: its text occurs {found} times in the solution "
                f"(whitespace aside), not once. Update `old` in tests/mutants/ to the solution's code:\n{self.old}"
            )
        return loose.sub(lambda _: self.new, source)


# Exercises 04, 06 and 07 share their conventions (common.shapes.attention_scale, lse in natural
# log), so the slips that break them are written once.
def sm_scale_ignored(check: str) -> Mutant:
    """Given code, but the bug students make in their own wrappers: the default scale always wins."""
    return Mutant(
        "sm_scale_argument_ignored",
        "sm_scale = attention_scale(d, sm_scale)",
        "sm_scale = attention_scale(d)",
        fails=(check,),
        says="sm_scale argument is ignored",
        only=True,
    )


def lse_not_converted(fails: tuple) -> Mutant:
    """06 and 07: the natural-log lse subtracted inside exp2 without its * LOG2E."""
    return Mutant("lse_not_converted", "other=0.0) * LOG2E", "other=0.0)", fails=fails, says="natural-log")


def cast_to_fixed_fp16(dot: str) -> Mutant:
    """04, 06 and 07: a tile cast to tl.float16 before tl.dot instead of to its partner's dtype. Right
    for fp16 inputs; with bf16 inputs tl.dot gets two dtypes and does not compile (GPU only)."""
    fixed = re.sub(r"\.to\(\w+\.dtype\)", ".to(tl.float16)", dot, count=1)
    return Mutant("cast_to_fixed_fp16", dot, fixed, fails=("bf16_inputs",), says="one dtype")


def mutants_of(folder: str) -> list:
    try:
        return importlib.import_module(f"tests.mutants.{folder}").MUTANTS
    except ModuleNotFoundError:
        return []

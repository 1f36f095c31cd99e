"""Mutants survive cosmetic edits of the solutions and say clearly when they no longer apply."""

import pytest

from tests.mutants import Mutant

SWAP = Mutant("swapped", "scores = tl.dot(q, k)\nacc += p", "scores = tl.dot(k, q)\nacc += p", fails=(), says="")


def test_a_rewrapped_solution_takes_its_mutant():
    source = "def f():\n    scores = tl.dot(\n        q, k\n    )\n    acc += p\n    return acc\n"
    assert SWAP.apply(source) == "def f():\n    scores = tl.dot(k, q)\nacc += p\n    return acc\n"


@pytest.mark.parametrize("source", ["scores = tl.dot(q, v)\n", "scores = tl.dot(q, k)\nacc += p\n" * 2])
def test_a_mutant_that_no_longer_applies_says_so(source):
    with pytest.raises(AssertionError, match="mutant swapped no longer applies: its text occurs [02] times"):
        SWAP.apply(source)

from tests.mutants import Mutant

MUTANTS = [
    Mutant(
        "denominator_not_rescaled",
        "l = l * tl.exp(m - m_shift) + ",
        "l = l + ",
        fails=("long_rows", "large_values_fp16"),
        says="not rescaled",
    ),
    Mutant(
        "lse_in_base_2",
        "m_shift + tl.log(l_safe)",
        "(m_shift + tl.log(l_safe)) * 1.4426950408889634",
        fails=("lse_convention", "short_rows"),
        says="base 2",
    ),
    Mutant(
        "lse_without_max",
        "m_shift + tl.log(l_safe)",
        "tl.log(l_safe)",
        fails=("lse_convention",),
        says="without the running max",
    ),
    Mutant(
        "first_blocks_all_neg_inf",
        'm_shift = tl.where(m_new == float("-inf"), 0.0, m_new)',
        "m_shift = m_new",
        fails=("negative_infinity",),
        says="NaN",
    ),
]

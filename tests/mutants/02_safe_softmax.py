from tests.mutants import Mutant

MUTANTS = [
    Mutant(
        "max_not_subtracted",
        "m_row = tl.max(m, axis=0)\n",
        "m_row = tl.max(m, axis=0) * 0.0\n",
        fails=("large_values",),
        says="row max",
    ),
    Mutant(
        "all_neg_inf_row_unguarded",
        'm_row = tl.where(m_row == float("-inf"), 0.0, m_row)',
        "m_row = m_row",
        fails=("negative_infinity",),
        says="entirely -inf",
    ),
    Mutant(
        "sum_over_first_block",
        "l += tl.exp(x - m_row)",
        "l += tl.where(start == 0, tl.exp(x - m_row), 0.0)",
        fails=("long_rows", "fp16_io"),
        says="column",
    ),
    Mutant(
        "padding_counts_in_sum",
        'x = tl.load(x_row + c * stride_xc, mask=c < n_cols, other=float("-inf")).to(tl.float32)\n        l +=',
        "x = tl.load(x_row + c * stride_xc, mask=c < n_cols, other=0.0).to(tl.float32)\n        l +=",
        fails=("short_rows", "long_rows", "fp16_io"),
        says="padded columns",
    ),
]

"""Maps of a kernel's output on probe inputs, drawn per (block of rows, range of columns).

The attention diagnoses (04's forward, 06's and 07's backward) run the student's kernel once more
on inputs chosen so that each output column counts what one range of keys (or queries) contributes,
then compare it with the expected counts region by region: the map shows which tiles are wrong.
"""


def probe_width(N: int, d: int) -> int:
    """Columns per range: the ranges must fit in the head dimension (and stay at most 16 per row)."""
    return next(w for w in (16, 32, 64, 128, 256, 512, 1024, 4096, 16384) if -(-N // w) <= min(d, 16))


def region_map(got, expected, block: int, width: int, header: str, rows_name: str, tolerance: float) -> str:
    """`header`, then one line per block of `block` rows, one character per range of `width` columns:
    '.' right, '-' nothing expected and nothing there, 'm' too little, '+' too much, '?' NaN."""
    N, ranges = got.shape[-2], got.shape[-1]
    lines = [header]
    for start in range(0, N, block):
        g, e = got[..., start : start + block, :], expected[..., start : start + block, :]
        cells = []
        for c in range(ranges):
            gc, ec = g[..., c], e[..., c]
            if gc.isnan().any():
                cells.append("?")
            elif (gc - ec).max() > tolerance:
                cells.append("+")
            elif (ec - gc).max() > tolerance:
                cells.append("m")
            else:
                cells.append("." if ec.max() > 0 else "-")
        lines.append(f"  {rows_name} {start:>5}..{min(start + block, N) - 1:<5} " + " ".join(cells))
    return "\n".join(lines)

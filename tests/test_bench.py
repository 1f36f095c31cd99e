"""The benchmark tool (grader.bench) on a CPU: its simulated run goes through exercise 08's
sweep and plot and writes the table, the PNG, the CSV and the JSON; the real run refuses to
time anything without a GPU."""

import csv
import json

import pytest

from common import env
from grader import bench
from grader.runner import ROOT


def test_simulated_run_writes_the_figure_and_the_numbers(tmp_path, capsys):
    code = bench.main(
        [
            "--simulate",
            "--shape",
            "1,2,64",
            "--sizes",
            "256,512,1024",
            "--causal",
            "no",
            "--methods",
            "naive,sdpa,course",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "flops: forward 4*B*H*N^2*d" in printed and "vs SDPA" in printed and "[1/" in printed
    png = tmp_path / "bench_B1_H2_d64_float16_noncausal.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = list(csv.DictReader(open(tmp_path / "bench.csv")))
    assert len(rows) == 3 * 3 * 2  # methods x sizes x modes
    assert {r["method"] for r in rows} == {"naive", "sdpa", "course"} and {r["mode"] for r in rows} == {
        "fwd",
        "fwd+bwd",
    }
    meta = json.loads((tmp_path / "bench.json").read_text())
    assert meta["simulated"] is True and set(meta["conventions"]) == {"flops", "time", "memory"}
    sdpa = next(r for r in meta["rows"] if r["method"] == "sdpa" and r["mode"] == "fwd" and r["N"] == 512)
    assert sdpa["tflops"] == pytest.approx(440.0, rel=1e-6)


def test_the_table_gives_ratios_to_sdpa():
    rows = [
        {"method": m, "mode": "fwd", "label": "", "N": 1024, "ms": ms, "tflops": 1.0, "peak_mib": 1.0, "status": "ok"}
        for m, ms in (("sdpa", 1.0), ("course", 2.0))
    ]
    rows.append(
        {
            "method": "naive",
            "mode": "fwd",
            "label": "",
            "N": 1024,
            "ms": None,
            "tflops": None,
            "peak_mib": None,
            "status": "OOM",
        }
    )
    text = bench.table(rows)
    assert "0.50x" in text and "1.00x" in text and "OOM" in text


@pytest.mark.skipif(env.setup().gpu, reason="on a GPU the real benchmark runs")
def test_without_a_gpu_the_real_run_refuses(tmp_path, capsys):
    assert bench.main(["--out", str(tmp_path), "--target", str(ROOT / "solutions")]) == 2
    assert "--simulate" in capsys.readouterr().err

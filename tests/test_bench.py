"""The benchmark tool (grader.bench) on a CPU: its simulated run goes through exercise 08's
sweep and plot and writes the table, the PNG, the CSV and the JSON; the real run refuses to
time anything without a GPU."""

import csv
import json
import types

import pytest
import torch

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


def test_graphed_methods_capture_once_then_replay_and_report_the_captured_memory():
    calls, captured, peaks = [], [], {}

    def capture(fn):
        fn()  # the call recorded in the graph
        captured.append(fn)
        return types.SimpleNamespace(replay=lambda: calls.append("replay")), 12.5

    make = bench.graphed(lambda q, k, v, causal: ((lambda: calls.append("eager")), "triton (04)"), peaks, capture)
    q = torch.empty(1, 2, 300, 16)
    fn, label = make(q, q, q, True)
    assert label == "triton (04), CUDA graph" and calls == []  # nothing runs before the first call
    fn(), fn(), fn()
    assert len(captured) == 1 and calls == ["eager", "replay", "replay", "replay"]
    assert peaks == {(300, True): 12.5}
    rows = [{"method": "course", "N": 300, "causal": True, "status": "ok", "peak_mib": 0.0}]
    assert bench.with_captured_peaks(rows, {"course": peaks})[0]["peak_mib"] == 12.5


def test_simulated_run_with_graphs_labels_every_method_and_states_the_convention(tmp_path, capsys):
    argv = ["--simulate", "--graphs", "--shape", "1,2,64", "--sizes", "256,512", "--causal", "yes"]
    assert bench.main(argv + ["--methods", "sdpa,course", "--out", str(tmp_path)]) == 0
    assert "graphs: each call replays a CUDA graph" in capsys.readouterr().out
    meta = json.loads((tmp_path / "bench.json").read_text())
    assert "graphs" in meta["conventions"] and len(meta["rows"]) == 2 * 2 * 2
    assert all(r["label"].endswith(", CUDA graph") and r["status"] == "ok" for r in meta["rows"])


def test_no_autograd_threads_runs_backwards_on_the_calling_thread_and_says_so(tmp_path, capsys, monkeypatch):
    """--no-autograd-threads holds while every method is made and timed, is stated with the
    conventions, and is undone afterwards (torch's switch is per thread: the caller's is restored)."""
    seen = []
    original = bench.simulated_methods

    def spy(*args, **kwargs):
        seen.append(torch.autograd.is_multithreading_enabled())
        return original(*args, **kwargs)

    monkeypatch.setattr(bench, "simulated_methods", spy)
    argv = ["--simulate", "--shape", "1,2,64", "--sizes", "256", "--causal", "no", "--methods", "sdpa,course"]
    assert bench.main(argv + ["--out", str(tmp_path / "plain")]) == 0
    assert bench.main(argv + ["--out", str(tmp_path / "one"), "--no-autograd-threads"]) == 0
    assert seen == [True, True, False, False] and torch.autograd.is_multithreading_enabled()
    out = capsys.readouterr().out
    assert out.count("--no-autograd-threads: every method's backward runs on the calling thread") == 1
    meta = json.loads((tmp_path / "one" / "bench.json").read_text())
    assert (
        "autograd" in meta["conventions"]
        and "autograd" not in json.loads((tmp_path / "plain" / "bench.json").read_text())["conventions"]
    )

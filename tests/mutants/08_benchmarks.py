from tests.mutants import Mutant

MUTANTS = [
    # FLOP and memory formulas
    Mutant("causal_not_halved", "    if causal:\n        forward /= 2\n", "", fails=("formulas",), says="causal"),
    Mutant(
        "backward_twice_forward",
        '"bwd": 2.5, "fwd+bwd": 3.5}[mode]',
        '"bwd": 2.0, "fwd+bwd": 3.0}[mode]',
        fails=("formulas",),
        says="2.5 times",
    ),
    Mutant(
        "one_flop_per_term",
        "forward = 4.0 * B * H * N * N * d",
        "forward = 2.0 * B * H * N * N * d",
        fails=("formulas",),
        says="one multiply and one add",
    ),
    Mutant(
        "naive_memory_without_p",
        "(2 * N * N + N * d) * element_size",
        "(N * N + N * d) * element_size",
        fails=("formulas",),
        says="S and P are both alive",
    ),
    Mutant(
        "flash_memory_without_lse",
        "B * H * N * (d * element_size + 4)",
        "B * H * N * d * element_size",
        fails=("formulas",),
        says="lse",
    ),
    # the naive baseline
    Mutant("naive_masks_the_diagonal", ".triu(1)", ".triu(0)", fails=("naive_baseline",), says="diagonal"),
    Mutant(
        "naive_ignores_sm_scale",
        "sm_scale = d**-0.5 if sm_scale is None else sm_scale",
        "sm_scale = d**-0.5",
        fails=("naive_baseline",),
        says="sm_scale is ignored",
    ),
    Mutant(
        "naive_softmax_over_queries",
        "torch.softmax(s, dim=-1)",
        "torch.softmax(s, dim=-2)",
        fails=("naive_baseline",),
        says="dim=-2",
    ),
    # measure: the clock
    Mutant(
        "mean_not_median",
        "ms = statistics.median(times_ms)",
        "ms = statistics.mean(times_ms)",
        fails=("measure_timing",),
        says="median",
    ),
    Mutant(
        "no_warmup",
        "for _ in range(warmup):",
        "for _ in range(0):",
        fails=("measure_timing", "measure_memory_oom"),
        says="warm-up",
    ),
    Mutant(
        "no_sync_after_call",
        "            fn()\n            device.sync()\n            times_ms",
        "            fn()\n            times_ms",
        fails=("measure_timing", "honest_timing"),  # honest_timing: on a GPU only
        says="device.sync() after fn()",
    ),
    Mutant(
        "flush_timed",
        "            device.flush_cache()\n            device.sync()\n            start = device.clock()\n",
        "            start = device.clock()\n            device.flush_cache()\n",
        fails=("measure_timing",),
        says="flush is in your timing",
    ),
    Mutant("warm_cache", "            device.flush_cache()\n", "", fails=("measure_timing",), says="warm cache"),
    Mutant(
        "own_clock",
        "            start = device.clock()\n",
        "            start = time.perf_counter()\n",
        fails=("measure_timing",),
        says="device.clock()",
    ),
    Mutant(
        "seconds_not_ms",
        "(device.clock() - start) * 1e3",
        "(device.clock() - start)",
        fails=("measure_timing",),
        says="seconds",
    ),
    Mutant(
        "gigaflops",
        "tflops = flops / (ms * 1e-3) / 1e12",
        "tflops = flops / (ms * 1e-3) / 1e9",
        fails=("measure_timing",),
        says="TFLOPS is flops / seconds / 1e12",
    ),
    # measure: memory and OOM
    Mutant(
        "inputs_counted",
        "peak_mib = (device.peak() - baseline) / MIB",
        "peak_mib = device.peak() / MIB",
        fails=("measure_memory_oom", "memory_linear"),  # memory_linear: on a GPU only
        says="device.allocated()",
    ),
    Mutant("peak_not_reset", "        device.reset_peak()\n", "", fails=("measure_memory_oom",), says="reset_peak()"),
    Mutant(
        "oom_crashes",
        "except torch.OutOfMemoryError:",
        "except KeyError:",
        fails=("measure_memory_oom",),
        says="not a crash",
    ),
    # sweep
    Mutant(
        "sweep_ignores_causal",
        "attention_flops(B, H, N, d, is_causal, mode)",
        "attention_flops(B, H, N, d, False, mode)",
        fails=("sweep_rows",),
        says="non-causal",
    ),
    Mutant(
        "sweep_counts_forward_only",
        "attention_flops(B, H, N, d, is_causal, mode)",
        'attention_flops(B, H, N, d, is_causal, "fwd")',
        fails=("sweep_rows",),
        says="wrong mode",
    ),
    Mutant(
        "sweep_loses_label",
        'fn, config["label"] = make(q, k, v, is_causal)',
        "fn, _ = make(q, k, v, is_causal)",
        fails=("sweep_rows",),
        says="label",
    ),
    # plot
    Mutant(
        "two_panels",
        '    ("peak_mib", "peak extra memory (MiB)", "log"),\n',
        "",
        fails=("plot_figure",),
        says="three panels",
    ),
    Mutant("linear_axes", '        ax.set_xscale("log", base=2)\n', "", fails=("plot_figure",), says="log scale"),
    Mutant("no_units", '"latency per call (ms)"', '"latency per call"', fails=("plot_figure",), says="unit"),
    Mutant(
        "oom_drawn_as_zero",
        'done = [r for r in rows if r["status"] == "ok"]',
        'done = [r | {"ms": r["ms"] or 0.0, "tflops": r["tflops"] or 0.0, "peak_mib": r["peak_mib"] or 0.0} '
        "for r in rows]",
        fails=("plot_figure",),
        says="an OOM is not a number",
    ),
    Mutant("no_versions_in_title", '\\n{versions()}")', '")', fails=("plot_figure",), says="versions"),
    # your 04, as 08's speed check times it (on a GPU only): 16 x 16 tiles, too small for the tensor cores
    Mutant(
        "forward_with_tiny_tiles",
        "        (64, 32, 4, 3),\n        (64, 64, 4, 3),\n        (128, 32, 4, 3),\n        (128, 64, 4, 3),\n"
        "        (128, 64, 8, 3),\n        (128, 64, 4, 4),\n        (128, 128, 8, 2),\n        (128, 128, 8, 3),\n",
        "        (16, 16, 4, 2),\n",
        fails=("forward_speed",),
        says="smaller than the course",
        file="04_flash_forward/flash_forward.py",
    ),
]

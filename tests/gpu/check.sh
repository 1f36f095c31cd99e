#!/usr/bin/env bash
# On a CUDA machine: grade the solutions and the untouched skeletons in GPU mode, execute every
# nbgrader source notebook with nbclient, then time 04-07 against torch SDPA.
# Usage: bash tests/gpu/check.sh OUTDIR   (from the repository root; build/course must hold the
# output of `make release`). Exercises and notebooks run in parallel processes; each step has a
# time limit (GRADE_LIMIT, BENCH_LIMIT seconds). Writes OUTDIR/{grade,notebooks,bench}.txt and
# OUTDIR/results-solutions.json, and prints a short summary last.
set -u
out=${1:?usage: bash tests/gpu/check.sh OUTDIR}
tmp=$(mktemp -d)
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; python3 -m grader.doctor; } > "$out/grade.txt" 2>&1
for ex in 01 02 03 04 05 06 07; do
  timeout "${GRADE_LIMIT:-300}" python3 -m grader "$ex" --target solutions --seed 2026 --json "$tmp/sol-$ex.json" > "$tmp/sol-$ex.txt" 2>&1 &
  timeout "${GRADE_LIMIT:-300}" python3 -m grader.notebooks build/course/source/"$ex"_*/*.ipynb > "$tmp/nb-$ex.txt" 2>&1 &
done
timeout "${GRADE_LIMIT:-300}" python3 -m grader --target exercises --seed 2026 > "$tmp/skeletons.txt" 2>&1 &
wait
cat "$tmp"/sol-*.txt "$tmp/skeletons.txt" >> "$out/grade.txt"
cat "$tmp"/nb-*.txt > "$out/notebooks.txt"
python3 -c "import json,sys; print(json.dumps([json.load(open(f)) for f in sys.argv[1:]], indent=1))" "$tmp"/sol-*.json > "$out/results-solutions.json"
timeout "${BENCH_LIMIT:-240}" python3 -m common.benchmark --target solutions --shape 4,32,4096,64 --shape 4,16,4096,128 > "$out/bench.txt" 2>&1
echo "== grades (solutions, then skeletons)"; grep -E "^Exercise|Total|FAIL|^  [0-9]{2} " "$out/grade.txt"
echo "== notebooks"; grep -E "^==|^Total|^!!" "$out/notebooks.txt"
echo "== benchmark"; cat "$out/bench.txt"

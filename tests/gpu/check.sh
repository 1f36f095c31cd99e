#!/usr/bin/env bash
# On a CUDA machine, in GPU mode: grade the solutions and the untouched skeletons; execute the
# nbgrader notebooks with nbclient (source notebooks earn full marks, release notebooks, what
# students get, zero); grade every mutant of tests/mutants (each must lose points with its
# diagnosis, which runs the grader's failure paths on the GPU); run exercise 08's benchmark over
# N = 512..16384 (naive PyTorch, SDPA, the course kernels), writing its figures to OUTDIR/bench/;
# run the red-team suite (tests/test_redteam.py: every attack must earn 0, in the sandbox); first,
# alone on the machine, time `python -m grader NN --target solutions` for each exercise (latency:
# each exercise cold, from an empty compile cache, then warm, reusing what the cold run compiled).
# Usage: bash tests/gpu/check.sh OUTDIR   (from the repository root; build/course must hold the
# output of `make release`). Optional: EXERCISES="03 04" and STEPS="grade notebooks mutants redteam bench"
# pick a subset (add "latency" to time each exercise); GRADE_LIMIT, MUTANT_LIMIT, BENCH_LIMIT bound each step
# (seconds). Steps after latency run in parallel processes. Writes OUTDIR/{latency,latency-detail,grade,notebooks,mutants,bench}.txt and
# OUTDIR/results-solutions.json, OUTDIR/redteam.txt, and prints a short summary last.
set -u
out=${1:?usage: bash tests/gpu/check.sh OUTDIR}
exercises=${EXERCISES:-01 02 03 04 05 06 07 08}
steps=" ${STEPS:-grade notebooks mutants redteam bench} "
tmp=$(mktemp -d)
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; python3 -m grader.doctor
  python3 -c "from grader.sandbox import describe_isolation; print('Isolation:', describe_isolation())"; } > "$out/grade.txt" 2>&1
if [[ $steps == *" latency "* ]]; then
  rm -rf "${XDG_CACHE_HOME:-$HOME/.cache}/flash-attention-course"  # cold: no kernel compiled yet
  for run in cold warm; do
    for ex in $exercises; do
      start=$(date +%s%N)
      timeout "${GRADE_LIMIT:-300}" python3 -m grader "$ex" --target solutions --seed 2026 > "$tmp/lat-$ex-$run.txt" 2>&1
      printf "%s %s  %6d ms  %s\n" "$ex" "$run" $(( ($(date +%s%N) - start) / 1000000 )) "$(grep -m1 'Total:' "$tmp/lat-$ex-$run.txt")"
    done
  done > "$out/latency.txt"
  grep -h "cuBLAS\|Traceback" "$tmp"/lat-*.txt >> "$out/latency.txt"
  cat "$tmp"/lat-*.txt > "$out/latency-detail.txt"
fi
for ex in $exercises; do
  if [[ $steps == *" grade "* ]]; then
    timeout "${GRADE_LIMIT:-300}" python3 -m grader "$ex" --target solutions --seed 2026 --json "$tmp/sol-$ex.json" > "$tmp/sol-$ex.txt" 2>&1 &
    timeout "${GRADE_LIMIT:-300}" python3 -m grader "$ex" --target exercises --seed 2026 > "$tmp/skel-$ex.txt" 2>&1 &
  fi
  if [[ $steps == *" notebooks "* ]]; then
    timeout "${GRADE_LIMIT:-300}" python3 -m grader.notebooks build/course/source/"$ex"_*/*.ipynb > "$tmp/nb-$ex.txt" 2>&1 &
    timeout "${GRADE_LIMIT:-300}" python3 -m grader.notebooks build/course/release/"$ex"_*/*.ipynb > "$tmp/nbr-$ex.txt" 2>&1 &
  fi
done
if [[ $steps == *" mutants "* ]]; then
  selected=$(printf " or %s" $exercises); selected=${selected# or }
  timeout "${MUTANT_LIMIT:-420}" python3 -m pytest tests/test_exercises.py -k "mutant and ($selected)" -q -rf \
    -p no:cacheprovider -p no:benchmark $(python3 -c "import xdist" 2>/dev/null && printf -- "-n 12") > "$out/mutants.txt" 2>&1 &
fi
if [[ $steps == *" redteam "* ]]; then
  timeout "${MUTANT_LIMIT:-420}" python3 -m pytest tests/test_redteam.py -q -rfs -p no:cacheprovider -p no:benchmark \
    $(python3 -c "import xdist" 2>/dev/null && printf -- "-n 8") > "$out/redteam.txt" 2>&1 &
fi
wait
cat "$tmp"/sol-*.txt "$tmp"/skel-*.txt >> "$out/grade.txt" 2>/dev/null
cat "$tmp"/nb-*.txt "$tmp"/nbr-*.txt > "$out/notebooks.txt" 2>/dev/null
python3 -c "import json,sys; print(json.dumps([json.load(open(f)) for f in sys.argv[1:]], indent=1))" "$tmp"/sol-*.json > "$out/results-solutions.json" 2>/dev/null
if [[ $steps == *" bench "* ]]; then
  timeout "${BENCH_LIMIT:-600}" python3 -m grader.bench --target solutions --out "$out/bench" > "$out/bench.txt" 2>&1
fi
[[ $steps == *" latency "* ]] && { echo "== grading time per exercise, solutions, sequential"; cat "$out/latency.txt"; }
echo "== grades (solutions, then skeletons)"; grep -E "^Exercise|Total|FAIL|grader failed" "$out/grade.txt"
echo "== notebooks"; grep -E "^==|^Total|^!!" "$out/notebooks.txt"
[[ $steps == *" mutants "* ]] && { echo "== mutants"; tail -n 25 "$out/mutants.txt"; }
[[ $steps == *" redteam "* ]] && { echo "== red team"; tail -n 15 "$out/redteam.txt"; }
[[ $steps == *" bench "* ]] && { echo "== benchmark"; grep -v "^  \[" "$out/bench.txt"; }
exit 0

#!/usr/bin/env bash
# On a CUDA machine: time `python -m grader.classroom` on a class of STUDENTS copies of the
# solutions of 04-07 (each must earn 90 points), with WORKERS workers on the visible GPUs.
# Usage: bash tests/gpu/classroom.sh OUTDIR   (from the repository root)
# Optional: STUDENTS=20 WORKERS=8 (default: grader.classroom's own choice), CUDA_VISIBLE_DEVICES=0
# to use one GPU. Writes OUTDIR/classroom.txt (one line per student, then the total) and
# OUTDIR/grades.csv.
set -u
out=${1:?usage: bash tests/gpu/classroom.sh OUTDIR}
mkdir -p "$out"
class=$(mktemp -d)
for i in $(seq -w 1 "${STUDENTS:-20}"); do
  mkdir -p "$class/submitted/s$i"
  cp solutions/0[4567]_*/*.py "$class/submitted/s$i/"
done
start=$(date +%s)
PYTHONUNBUFFERED=1 python3 -m grader.classroom "$class/submitted" 04 05 06 07 --out "$class/grades" --seed 2026 \
  ${WORKERS:+--workers "$WORKERS"} > "$out/classroom.txt" 2>&1
status=$?
echo "exit $status; GPUs ${CUDA_VISIBLE_DEVICES:-all visible}; workers ${WORKERS:-default}:" \
  "$(( $(date +%s) - start )) s for $(ls "$class"/grades/s*.json 2>/dev/null | wc -l) students" | tee -a "$out/classroom.txt"
cp "$class/grades/grades.csv" "$out/" 2>/dev/null || status=1
rm -rf "$class"
[[ $status == 0 ]] || { echo "grader.classroom failed: see $out/classroom.txt"; exit 1; }
awk -F, '{ sub(/\r$/, "") } NR > 1 && $NF != 90 {print "did not earn 90 points:", $0; bad = 1} END {exit bad}' "$out/grades.csv" \
  && echo "every student earned 90 points"

#!/usr/bin/env bash
# The CPU loop's held-out check (docs/results.md, "Calibration"): fresh fit captures of this
# machine, a profile fitted on them, and held-out captures under conditions the fit never saw
# (the hard prompt mix, group size 2, batch cap 24, another seed, each SD policy's own schedule),
# taken between the fit captures so no kind waits minutes for its check; then tlt validate.
# Usage: traces/reference/heldout-check.sh OUT_DIR [HELD_OUT_SEED]   (from the checkout; ~5 min)
set -euo pipefail
OUT=${1:?usage: heldout-check.sh OUT_DIR [HELD_OUT_SEED]}
SEED=${2:-7}
T=${TLT:-.venv/bin/tlt}
M=traces/reference/model
D=traces/reference/drafter
NGRAM=traces/reference/policies/ngram-sd.yaml
mkdir -p "$OUT"

fit() {  # NAME POLICY CAP SEED: the documented fit set, 16 prompts x 4 up to 1024 tokens
  echo "capturing $1" >&2
  $T capture --model $M --policy "$2" --drafter $D --prompts 16 --samples 4 --max-tokens 1024 \
    --seed "$4" --max-num-seqs "$3" --out "$OUT/$1" > "$OUT/$1.log" 2>&1
}
held() {  # NAME POLICY: 24 hard prompts x 2 up to 768 tokens, 24 in flight
  echo "capturing $1" >&2
  $T capture --model $M --policy "$2" --drafter $D --prompts 24 --samples 2 --max-tokens 768 \
    --seed "$SEED" --mix hard --max-num-seqs 24 --out "$OUT/$1" > "$OUT/$1.log" 2>&1
}

fit fit-none baseline 64 0;      held held-none baseline
fit fit-ngram "$NGRAM" 64 0;     held held-ngram "$NGRAM"
fit fit-eagle static-sd 64 0;    held held-eagle static-sd
# SD from a response's first token (16 in flight, under the threshold): acceptance early in a
# response, which the 64-wide captures only see with SD off.
fit fit-ngram-16 "$NGRAM" 16 1;  fit fit-eagle-16 static-sd 16 1
held held-tlt tlt-vllm

$T calibrate "$OUT"/fit-none "$OUT"/fit-ngram "$OUT"/fit-eagle "$OUT"/fit-ngram-16 \
  "$OUT"/fit-eagle-16 \
  --out "$OUT/machine.yaml" > "$OUT/calibrate.log" 2>&1
$T validate --profile "$OUT/machine.yaml" "$OUT"/held-none "$OUT"/held-ngram "$OUT"/held-eagle \
  "$OUT"/held-tlt --out "$OUT/validate"

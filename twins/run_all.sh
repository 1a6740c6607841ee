#!/usr/bin/env bash
# Runs the seven reference curves one after another (one thread each), logs in runs/twins/.
# Usage (from the repository root): nohup bash twins/run_all.sh [NAME...] > runs/twins/run_all.out 2>&1 &
# With NAMEs (e.g. logic-gumbel sst2-gumbel), runs only those.
set -u
cd "$(dirname "$0")/.."
mkdir -p runs/twins
L="--dim 64 --batch 32 --lr 2e-3 --steps 2000 --every 250 --dropout 0 --threads 1"
S="--dim 100 --batch 64 --lr 1e-3 --steps 2000 --every 250 --dropout 0.1 --threads 1"
ONLY=" $* "
run() {
  local name=$1; shift
  if [ "$ONLY" != "  " ] && [[ "$ONLY" != *" $name "* ]]; then return; fi
  echo "$(date -Is) start $name: python3 $*"
  local t0=$(date +%s)
  python3 "$@" > "runs/twins/$name.log" 2>&1
  echo "$(date -Is) done $name rc=$? in $(( $(date +%s) - t0 )) s: $(tail -1 runs/twins/$name.log)"
}
run logic-spinn-pi-nt twins/logic.py --encoder spinn-pi-nt $L
run logic-lstm        twins/logic.py --encoder lstm $L
run logic-on-lstm     twins/logic.py --encoder on-lstm $L
run logic-gumbel      twins/logic.py --encoder gumbel $L
run sst2-lstm         twins/sst2.py --encoder lstm $S
run sst2-gumbel       twins/sst2.py --encoder gumbel $S
# 8,842 training pairs = 139 batches of 64 per epoch: 2,000 steps need 15 epochs (arbor's and the
# twin's default --epochs 5 stops at step 695).
run snli-gumbel       twins/snli.py --encoder gumbel $S --holdout 1000 --epochs 15
echo "$(date -Is) all done"

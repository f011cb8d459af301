#!/usr/bin/env bash
# The whole suite on a busy machine: one CPU-bound loop pinned to each core for as long as the
# runs last, then RUNS full pytest runs in a row, one line each with its time and its summary.
#
#   bash benchmarks/under_load.sh [RUNS] [-- PYTEST ARGS...]     (default: 3 runs of `pytest`)
#
# No test's verdict may depend on how fast the machine is; this is how that claim is checked
# (issue 14). The loops are stopped on exit, Ctrl-C or SIGTERM. Logs: benchmarks/results/load-N.log.
set -uo pipefail
cd "$(dirname "$0")/.."

runs=3
if [[ $# -gt 0 && $1 != "--" ]]; then runs=$1; shift; fi
[[ ${1:-} == "--" ]] && shift
python=${PYTHON:-$(command -v python)}
mkdir -p benchmarks/results

busy=()
stop_busy() { [[ ${#busy[@]} -gt 0 ]] && kill "${busy[@]}" 2>/dev/null; wait 2>/dev/null; }
trap stop_busy EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
for ((core = 0; core < $(nproc); core++)); do
  taskset -c "$core" "$python" -c "while True: pass" &
  busy+=($!)
done
echo "load: ${#busy[@]} busy loop(s), one pinned to each core"

failed=0
for ((run = 1; run <= runs; run++)); do
  log=benchmarks/results/load-$run.log
  start=$(date +%s)
  "$python" -m pytest -p no:cacheprovider "$@" >"$log" 2>&1
  code=$?
  summary=$(grep -E '^=+ .*(passed|failed|error).* =+$' "$log" | tail -1 | tr -d '=' | xargs)
  echo "run $run: exit $code, $(( $(date +%s) - start )) s wall: ${summary:-no summary, see $log}"
  [[ $code -ne 0 ]] && failed=1
done
exit $failed

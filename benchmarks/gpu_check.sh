#!/usr/bin/env bash
# The device check (docs/gpu.md): on a machine with a CUDA GPU and trainchaos installed
# (`make install`, or pip install -e . with a CUDA build of torch), run the CUDA scenarios of
# scenarios/gpu/, the detectors' overhead with both ranks on the GPU, and the tests marked
# gpu (the unit ones: the scenario runs are the integration check), and write every result
# under --out. Installs nothing; each step is bounded by its own timeout (260 + 60 + 100 + 50 s)
# so that the whole stays under 8 minutes (not yet timed on a GPU: docs/gpu.md).
#
#   benchmarks/gpu_check.sh [--out DIR]      run it (DIR: reports/gpu-check)
#   benchmarks/gpu_check.sh --dry-run        say what it would run, and check what can be
#                                            checked without a GPU: the scripts exist and
#                                            every scenario validates (where torch sees no
#                                            CUDA device, each must be refused for that
#                                            alone, located: exit 2 from validate)
#
# Results: DIR/summary.md (each step, its exit code and seconds), DIR/env.txt (the card, the
# driver, torch), DIR/runs/ (each scenario's run record and reports, junit.xml),
# DIR/sdc_bench.json (detector overhead on the GPU), DIR/gpu_tests.xml (the gpu tests).
# Exit 0 when every step passed, 1 otherwise.
set -uo pipefail

cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT=reports/gpu-check
DRY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --out) OUT=$2; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done

HARNESS_SCENARIOS=(exponent-flip-device-weight mantissa-flip-shared-device cuda-oom kernel-hang
                   context-poison mixed-kill-cuda-rank)
MEGATRON_SCENARIOS=(megatron-kill-rank megatron-hang-rank megatron-bitflip-escapes)
# What validation may refuse on a host without CUDA or megatron-core, and nothing else.
EXPECTED_REFUSALS='workload\.harness\.device: cuda: |workload\.megatron: (the megatron package is not installed|Megatron-Core.s models allocate CUDA buffers)'

paths() { for name in "$@"; do printf 'scenarios/gpu/%s.yaml ' "$name"; done; }

# step NAME TIMEOUT_S COMMAND...: run it (or print it), record its exit code and seconds
step() {
  local name=$1 limit=$2; shift 2
  if [ "$DRY" = 1 ]; then
    printf '  %-18s (%ss at most)' "$name" "$limit"
    printf ' %q' "$@"
    echo
    return 0
  fi
  local began rc
  began=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  printf '| %s | %s | %s |\n' "$name" "$rc" "$(( $(date +%s) - began ))" >>"$OUT/summary.md"
  echo "gpu_check: $name exit $rc ($(( $(date +%s) - began )) s)"
  [ "$rc" = 0 ] || FAILED=1
}

has_megatron() { "$PY" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("megatron") is None)' 2>/dev/null; }

# The check itself, step by step (printed, not run, by --dry-run).
plan() {
  step scenarios 260 "$PY" -m chaos.cli run $(paths "${HARNESS_SCENARIOS[@]}") --out "$OUT/runs" --junit "$OUT/runs/junit.xml"
  step sdc_bench 60 "$PY" benchmarks/sdc_bench.py --device cuda --rounds 3 --block 40 --out "$OUT"
  if [ "$DRY" = 1 ] || has_megatron; then
    step megatron 100 "$PY" -m chaos.cli run $(paths "${MEGATRON_SCENARIOS[@]}") --out "$OUT/megatron" --junit "$OUT/megatron/junit.xml"
  else
    echo "| megatron | skipped: megatron-core not installed (pip install 'trainchaos[megatron]') | 0 |" >>"$OUT/summary.md"
  fi
  step gpu_tests 50 "$PY" -m pytest -m "gpu and not integration" tests -q -p no:cacheprovider --junitxml "$OUT/gpu_tests.xml"
}

# What can be checked without a GPU: the files are there, and every scenario validates, or is
# refused only for the device or megatron-core this host lacks.
dry_run() {
  echo "gpu_check.sh --dry-run: would write $OUT/env.txt (nvidia-smi, torch, the device) and run:"
  plan
  echo "  (megatron only where megatron-core is installed)"
  local missing=0
  for file in benchmarks/sdc_bench.py examples/megatron/train.py $(paths "${HARNESS_SCENARIOS[@]}" "${MEGATRON_SCENARIOS[@]}"); do
    [ -f "$file" ] || { echo "missing: $file"; missing=1; }
  done
  [ "$missing" = 0 ] || return 1
  echo "validating scenarios/gpu/ here:"
  local report rc unexpected
  report=$("$PY" -m chaos.cli validate scenarios/gpu 2>&1 | grep -v 'pynvml')
  rc=${PIPESTATUS[0]}
  if [ "$rc" = 0 ]; then
    echo "  every scenario validates (a CUDA device and megatron-core are here)"
    return 0
  fi
  unexpected=$(printf '%s\n' "$report" | grep -Ev "$EXPECTED_REFUSALS" | grep -v '^$')
  if [ "$rc" = 2 ] && [ -z "$unexpected" ]; then
    echo "  refused as expected here (exit 2), each for a missing CUDA device or megatron-core alone:"
    printf '%s\n' "$report" | sed 's/^/    /'
    return 0
  fi
  echo "  validation found more than the missing device (exit $rc):"
  printf '%s\n' "${unexpected:-$report}" | sed 's/^/    /'
  return 1
}

if [ "$DRY" = 1 ]; then
  dry_run
  exit $?
fi

mkdir -p "$OUT"
FAILED=0
printf '# gpu_check %s\n\n| step | exit | seconds |\n|---|---|---|\n' "$(date -u +%FT%TZ)" >"$OUT/summary.md"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 || echo "nvidia-smi: not found"
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
      "device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)'
} >"$OUT/env.txt" 2>&1
plan
cat "$OUT/summary.md"
exit "$FAILED"

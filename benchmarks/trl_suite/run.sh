#!/usr/bin/env bash
# Run TRL's tests/test_grpo_trainer.py twice, stock and with only its import swapped to trl_loo_gspo, offline,
# and compare per-test outcomes. See README.md in this folder.
#
#   benchmarks/trl_suite/run.sh [--mirror GIT_DIR] [--ref REF] [--work DIR] [--part all|notool|tool]
#                               [--variant both|stock|ours] [--timeout SECONDS] [--ours-only OUTCOMES]
#                               [--small-vocab N]
#                               [-- EXTRA_PYTEST_ARGS...]
#
# --mirror  a git mirror of huggingface/trl (default /work/.mirror/huggingface+trl/repo, what `fetch` gives)
# --ref     the TRL ref whose tests to run (default: tag v<installed trl version> if the mirror has it, else main)
# --work    scratch folder, never inside the repository (default /tmp/trl-suite)
# --part    all tests, the tests whose names do not contain "tool", or only those (default all)
# --ours-only passed,skipped   run ours only on the tests with these outcomes in this part's stock report
#           (saves the time of tests that fail on stock anyway; the comparison lists how many were not run)
# --small-vocab N  stand-in vocabularies of N tokens (default 1024; 0 = the real sizes and special-token ids,
#           about 15x slower on CPU: the 128k-262k-way output layers dominate every training step)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$REPO/benchmarks/trl_suite"
MIRROR=/work/.mirror/huggingface+trl/repo
REF=""
WORK=/tmp/trl-suite
PART=all
VARIANT=both
TIMEOUT=600
OURS_ONLY=""
SMALL_VOCAB=1024
EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --mirror) MIRROR="$2"; shift 2 ;;
    --ref) REF="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --part) PART="$2"; shift 2 ;;
    --variant) VARIANT="$2"; shift 2 ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    --ours-only) OURS_ONLY="$2"; shift 2 ;;
    --small-vocab) SMALL_VOCAB="$2"; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$WORK" in "$REPO"|"$REPO"/*) echo "--work must be outside the repository" >&2; exit 2 ;; esac

export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
TRL_VERSION="$(python -c 'import trl; print(trl.__version__)')"
if [[ -z "$REF" ]]; then
  if git --git-dir="$MIRROR" rev-parse -q --verify "refs/tags/v$TRL_VERSION" >/dev/null; then REF="v$TRL_VERSION"; else REF=main; fi
fi
COMMIT="$(git --git-dir="$MIRROR" rev-parse "$REF^{commit}")"
echo "trl $TRL_VERSION installed; TRL tests from $REF ($COMMIT)"

# 1. TRL's tests (and the scripts the stand-ins are built from), one tree per variant.
mkdir -p "$WORK"
if [[ "$(cat "$WORK/commit" 2>/dev/null)" != "$COMMIT" ]]; then
  rm -rf "$WORK/stock" "$WORK/ours" "$WORK"/hf-v*
  mkdir -p "$WORK/stock"
  git --git-dir="$MIRROR" archive "$COMMIT" tests scripts pyproject.toml | tar -x -C "$WORK/stock"
  cp -r "$WORK/stock" "$WORK/ours"
  echo "$COMMIT" > "$WORK/commit"
fi
IMPORT_STOCK='from trl import GRPOConfig, GRPOTrainer'
IMPORT_OURS='from trl_loo_gspo import LooGspoTrainer as GRPOTrainer, LooGspoConfig as GRPOConfig'
MODULE=tests/test_grpo_trainer.py
[[ "$(grep -cxF "$IMPORT_STOCK" "$WORK/stock/$MODULE")" == 1 ]] || { echo "import line not found once" >&2; exit 1; }
cp "$WORK/stock/$MODULE" "$WORK/ours/$MODULE"
sed -i "s/^$IMPORT_STOCK\$/$IMPORT_OURS/" "$WORK/ours/$MODULE"
echo "the only change to the test module:"
diff "$WORK/stock/$MODULE" "$WORK/ours/$MODULE" || true
[[ "$(diff "$WORK/stock/$MODULE" "$WORK/ours/$MODULE" | grep -c '^[<>]')" == 2 ]] || { echo "swap is not one line" >&2; exit 1; }

# 2. Offline stand-ins for the Hub ids (models and the zen dataset), pytest-timeout and jmespath, outside the repo.
HF="$WORK/hf-v$SMALL_VOCAB"
if [[ ! -f "$HF/standins.json" ]]; then
  HF_HUB_OFFLINE=1 python "$HERE/build_standins.py" --trl-src "$WORK/stock" --hf-home "$HF" --small-vocab "$SMALL_VOCAB" \
    >"$WORK/standins.log" 2>&1 \
    || { tail -20 "$WORK/standins.log"; exit 1; }
fi
if ! python -c 'import pytest_timeout' 2>/dev/null && [[ ! -f "$WORK/pydeps/pytest_timeout.py" ]]; then
  python -m pip install -q --no-deps --target "$WORK/pydeps" pytest-timeout
fi
# jmespath: TRL's tool-calling tests skip without it (13 tests of the module), on stock and ours alike
if ! python -c 'import jmespath' 2>/dev/null && [[ ! -d "$WORK/pydeps/jmespath" ]]; then
  python -m pip install -q --no-deps --target "$WORK/pydeps" jmespath
fi

# 3. The runs.
case "$PART" in
  all) SELECT=() ;;
  notool) SELECT=(-k "not tool") ;;
  tool) SELECT=(-k "tool") ;;
  *) echo "--part must be all, notool or tool" >&2; exit 2 ;;
esac
VARIANTS=(stock ours); [[ "$VARIANT" != both ]] && VARIANTS=("$VARIANT")
mkdir -p "$WORK/results"
for v in "${VARIANTS[@]}"; do
  start=$(date +%s)
  ONLY=""
  if [[ "$v" == ours && -n "$OURS_ONLY" ]]; then
    ONLY="$WORK/results/ours-$PART.ids"
    python "$HERE/compare.py" --stock "$WORK/results/stock-$PART.xml" --ids "$OURS_ONLY" >"$ONLY"
    echo "ours ($PART): only the $(wc -l <"$ONLY") tests $OURS_ONLY on stock"
  fi
  (
    cd "$WORK/$v"
    TRL_SUITE_ONLY="$ONLY" \
    HF_HOME="$HF" HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    PYTHONPATH="$REPO:$HERE:$WORK/pydeps${PYTHONPATH:+:$PYTHONPATH}" \
      python -m pytest "$MODULE" -p trl_suite_shim -p no:cacheprovider -q -rA --timeout="$TIMEOUT" \
        --junitxml="$WORK/results/$v-$PART.xml" "${SELECT[@]}" "${EXTRA[@]}" >"$WORK/results/$v-$PART.log" 2>&1 || true
  )
  echo "$v ($PART): $(tail -1 "$WORK/results/$v-$PART.log") [wall $(( $(date +%s) - start )) s]"
done

# 4. The comparison (when both variants' reports for this part exist).
if [[ -f "$WORK/results/stock-$PART.xml" && -f "$WORK/results/ours-$PART.xml" ]]; then
  python "$HERE/compare.py" --stock "$WORK/results/stock-$PART.xml" --ours "$WORK/results/ours-$PART.xml"
fi

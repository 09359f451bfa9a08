#!/usr/bin/env bash
# The action's check step: `loadtune check --against REF` with the inputs as flags, the step's outputs
# set from the check's JSON, and the check's exit code returned (an inconclusive check's per
# fail-on-inconclusive). The inputs arrive as environment variables (action.yml), never as shell text.
#   INPUT_SPEC, INPUT_AGAINST, INPUT_TOLERANCE, INPUT_CURRENT (--config), INPUT_ARGS (more flags, split at
#   whitespace, nothing expanded), INPUT_FAIL_ON_INCONCLUSIVE (true/false), INPUT_JUNIT_XML, INPUT_JSON
#   GITHUB_BASE_REF, GITHUB_EVENT_NAME, GITHUB_OUTPUT, GITHUB_STEP_SUMMARY: set by the runner
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=$(command -v python || command -v python3)

fail_on_inconclusive=${INPUT_FAIL_ON_INCONCLUSIVE:-true}
case "$fail_on_inconclusive" in
  true | false) ;;
  *) echo "::error::fail-on-inconclusive: '$fail_on_inconclusive' is neither true nor false"; exit 2 ;;
esac

against=${INPUT_AGAINST:-}
if [ -z "$against" ]; then
  if [ -z "${GITHUB_BASE_REF:-}" ]; then
    echo "::error::loadtune check needs a revision to compare with: this run is a '${GITHUB_EVENT_NAME:-unknown}' event, not a pull request, so it has no base branch; give the action 'against:' (e.g. origin/main), or run it on pull_request"
    exit 2
  fi
  against="origin/$GITHUB_BASE_REF"
fi

args=(check)
if [ -n "${INPUT_SPEC:-}" ]; then args+=("$INPUT_SPEC"); fi
args+=(--against "$against")
if [ -n "${INPUT_TOLERANCE:-}" ]; then args+=(--tolerance "$INPUT_TOLERANCE"); fi
if [ -n "${INPUT_CURRENT:-}" ]; then args+=(--config "$INPUT_CURRENT"); fi
json=${INPUT_JSON:-loadtune-check.json}
junit=${INPUT_JUNIT_XML:-}
args+=(--json "$json")
if [ -n "$junit" ]; then args+=(--junit-xml "$junit"); fi
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then args+=(--markdown "$GITHUB_STEP_SUMMARY"); fi
set -f
# shellcheck disable=SC2206  # word splitting is what is wanted: the extra flags of `loadtune check`
args+=(${INPUT_ARGS:-})
set +f

rm -f "$json"  # outputs from this check's result only, never an earlier one's
echo "loadtune ${args[*]}"
code=0
loadtune "${args[@]}" || code=$?

"$python" "$here/outputs.py" "$json" "$junit"

if [ "$code" -eq 4 ]; then
  if [ "$fail_on_inconclusive" = true ]; then
    echo "::error::loadtune check is inconclusive (exit 4): the change sits near the tolerance or the runner was too noisy to tell; re-run the job, or set fail-on-inconclusive: false to let it pass"
  else
    echo "::warning::loadtune check is inconclusive: the job passes because fail-on-inconclusive is false"
    code=0
  fi
fi
exit "$code"

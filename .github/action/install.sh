#!/usr/bin/env bash
# The action's install step: torch, then loadtune from the action's own checkout, then the dataset's
# requirements. The inputs arrive as environment variables (action.yml), never as shell text.
#   INPUT_TORCH          pip arguments for torch, split at whitespace (nothing is expanded); empty: no torch installed
#   INPUT_REQUIREMENTS   the dataset's requirements file; empty: requirements.txt when there is one
#   GITHUB_ACTION_PATH   the action's checkout (set by the runner): loadtune's source
set -euo pipefail

python=$(command -v python || command -v python3 || true)
if [ -z "$python" ]; then
  echo "::error::no python on PATH: set the action's python-version input, or put a Python on PATH before this step"
  exit 2
fi

if [ -n "${INPUT_TORCH:-}" ]; then
  set -f  # split the words, expand no pattern in them
  # shellcheck disable=SC2206  # word splitting is what is wanted: a requirement and pip's options
  torch_args=($INPUT_TORCH)
  set +f
  "$python" -m pip install "${torch_args[@]}"
fi

"$python" -m pip install "${GITHUB_ACTION_PATH:?the runner sets it to the checkout of the action}"

requirements=${INPUT_REQUIREMENTS:-}
if [ -n "$requirements" ] && [ ! -f "$requirements" ]; then
  echo "::error::requirements: no file '$requirements' in $(pwd); name the dataset's requirements file, or leave the input out"
  exit 2
fi
if [ -z "$requirements" ] && [ -f requirements.txt ]; then
  requirements=requirements.txt
fi
if [ -n "$requirements" ]; then
  "$python" -m pip install -r "$requirements"
fi

loadtune --version

#!/usr/bin/env bash
# steadax on an accelerator in one call (issue 33 §4; docs/performance.md, "On a GPU").
#
#   PYTHONPATH=src benchmarks/device.sh [OUT_DIR]            # writes OUT_DIR/device.json, device.md
#   PYTHONPATH=src benchmarks/device.sh --dry-run /tmp/dev    # toy sizes, on a CPU, under a minute
#
# OUT_DIR defaults to $OUT. Needs JAX (with CUDA or another accelerator), Optax, Flax and Equinox
# installed; no network, no installs. Run from anywhere: it changes to the repository root. The
# sections and their time caps are in benchmarks/device.py (7.5 minutes in all); `timeout` here is
# the backstop that keeps the whole within 8 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"
PYTHON="${PYTHON:-$(command -v python || command -v python3)}"
exec timeout --signal=TERM --kill-after=10 480 "$PYTHON" -m benchmarks.device "$@"

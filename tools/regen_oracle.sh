#!/bin/sh
# Regenerates the PyTorch oracle fixture for lab 00 (tests/oracle/*.safetensors) with one command.
#   tools/regen_oracle.sh           rewrite the committed files
#   tools/regen_oracle.sh --check   regenerate into a temporary directory and fail if the
#                                   committed files differ (the oracle is deterministic)
# Needs PyTorch in the system interpreter (Debian's python3-torch); the C++ tests do not.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "regen_oracle.sh: $py cannot import torch; install python3-torch (apt-get install python3-torch)" >&2
  exit 1
fi
if [ "${1:-}" = "--check" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "$py" "$root/tools/torch_oracle.py" --out "$tmp"
  status=0
  for f in gpt_tiny_init.safetensors gpt_tiny_oracle.safetensors; do
    if cmp -s "$tmp/$f" "$root/tests/oracle/$f"; then
      echo "tests/oracle/$f: up to date"
    else
      echo "tests/oracle/$f: differs from what tools/torch_oracle.py writes now; run tools/regen_oracle.sh" >&2
      status=1
    fi
  done
  exit $status
fi
"$py" "$root/tools/torch_oracle.py" --out "$root/tests/oracle"

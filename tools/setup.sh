#!/usr/bin/env bash
# Sets up a Debian 12 machine for scalelab and builds it: installs the Debian packages that are
# missing (a no-op when all are present), then configures and builds a CMake preset.
#   bash tools/setup.sh                 # packages + the release build (build/release)
#   bash tools/setup.sh --preset NAME   # another preset from CMakePresets.json
#   bash tools/setup.sh --with-python   # also PyTorch, Jupyter, matplotlib (oracle, notebooks, peers)
#   bash tools/setup.sh --no-build      # packages only
# Nothing is downloaded except Debian packages through apt.
set -euo pipefail
cd "$(dirname "$0")/.."

preset=release
build=1
python=0
while [ $# -gt 0 ]; do
  case "$1" in
    --preset) preset="$2"; shift 2 ;;
    --with-python) python=1; shift ;;
    --no-build) build=0; shift ;;
    *) echo "setup.sh: unknown option '$1' (use --preset NAME, --with-python, --no-build)" >&2; exit 2 ;;
  esac
done

packages=(build-essential cmake git python3 catch2 libbenchmark-dev libopenmpi-dev openmpi-bin
          libopenblas-dev libdnnl-dev libblis-dev nlohmann-json3-dev libcli11-dev clang-format ccache lld
          ninja-build)
if [ "$python" = 1 ]; then
  packages+=(python3-torch python3-numpy python3-matplotlib python3-pandas jupyter-nbconvert python3-ipykernel)
fi

missing=()
for p in "${packages[@]}"; do
  if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then missing+=("$p"); fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  if [ "$(id -u)" != 0 ]; then sudo_cmd=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q "${missing[@]}"
else
  echo "setup: all Debian packages present"
fi

if [ "$build" = 1 ]; then
  # The presets use Ninja (it keeps both cores busy across targets, where make waits for each
  # library to link). A build folder made with another generator is configured afresh; its
  # objects come back from ccache.
  bindir=$(python3 - "$preset" <<'EOF_PY'
import json, sys
for p in json.load(open("CMakePresets.json"))["configurePresets"]:
    if p["name"] == sys.argv[1]:
        print(p["binaryDir"].replace("${sourceDir}/", ""))
EOF_PY
)
  if [ -n "$bindir" ] && [ -f "$bindir/CMakeCache.txt" ] &&
     ! grep -qx 'CMAKE_GENERATOR:INTERNAL=Ninja' "$bindir/CMakeCache.txt"; then
    echo "setup: $bindir was configured with another generator; configuring it for Ninja"
    rm -rf "$bindir/CMakeCache.txt" "$bindir/CMakeFiles"
  fi
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset"
  echo "setup: built preset '$preset'"
fi

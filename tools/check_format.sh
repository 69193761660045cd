#!/usr/bin/env bash
# Checks that the tracked C++/CUDA sources are formatted as .clang-format says (clang-format 14,
# Debian 12's; tools/setup.sh installs it). CI runs it first (.ci/run).
#   bash tools/check_format.sh            # list the files that differ; exit 1 if any
#   bash tools/check_format.sh --diff     # also show what would change
#   bash tools/check_format.sh --fix      # reformat them in place
#   bash tools/check_format.sh [--fix|--diff] FILE...   # only these files
# Not checked: labs/ (written by tools/labgen.py from reference/: after --fix, regenerate them
# with `python3 tools/labgen.py`) and bench/peers/ (the peers, kept as they were measured).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=check
files=()
for arg in "$@"; do
  case "$arg" in
    --fix) mode=fix ;;
    --diff) mode="diff" ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "check_format.sh: unknown option '$arg' (use --fix, --diff or --help)" >&2; exit 2 ;;
    *) files+=("$arg") ;;
  esac
done

command -v clang-format >/dev/null || {
  echo "check_format.sh: clang-format is not installed; run: apt-get install clang-format (or bash tools/setup.sh)" >&2
  exit 2
}
version=$(clang-format --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p')
if [ "$version" != 14 ]; then
  echo "check_format.sh: note: clang-format $version, but the style is checked with 14 (Debian 12); other versions" \
       "may format some lines differently" >&2
fi

if [ ${#files[@]} -eq 0 ]; then
  # Tracked files only (a build directory or a scratch file is not the project's).
  mapfile -t files < <(git ls-files -- '*.cpp' '*.hpp' '*.h' '*.cc' '*.cu' '*.cuh' ':!:labs/**' ':!:bench/peers/**')
fi
[ ${#files[@]} -gt 0 ] || { echo "check_format.sh: no C++/CUDA files to check" >&2; exit 2; }

if [ "$mode" = fix ]; then
  clang-format -i --style=file "${files[@]}"
  echo "check_format.sh: formatted ${#files[@]} files"
  exit 0
fi

clang-format --style=file --dump-config >/dev/null || { echo "check_format.sh: .clang-format is not valid" >&2; exit 2; }
# One clang-format run over all files; every violation is reported as `path:line:col: error: ...`.
status=0
report=$(clang-format --dry-run -Werror --style=file "${files[@]}" 2>&1) || status=$?
mapfile -t bad < <(printf '%s\n' "$report" | sed -n 's/^\([^ :]*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' | sort -u)
if [ "$status" != 0 ] && [ ${#bad[@]} -eq 0 ]; then
  printf '%s\n' "$report" >&2  # clang-format failed for another reason (an unreadable file, ...)
  exit 2
fi
if [ ${#bad[@]} -eq 0 ]; then
  echo "check_format.sh: ${#files[@]} files formatted as .clang-format says"
  exit 0
fi
echo "check_format.sh: ${#bad[@]} of ${#files[@]} files are not formatted as .clang-format says:"
for f in "${bad[@]}"; do
  echo "  $f"
  if [ "$mode" = diff ]; then clang-format --style=file "$f" | diff -u --label "$f" --label "$f (formatted)" "$f" - | sed 's/^/    /' || true; fi
done
echo "fix: bash tools/check_format.sh --fix   (then python3 tools/labgen.py if reference/ changed)"
exit 1

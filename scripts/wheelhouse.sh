#!/usr/bin/env bash
# Downloads the wheels of scripts/wheelhouse.txt into wheelhouse/ (or DIR) for a lent GPU machine's Python,
# CPython 3.12 on manylinux x86-64, each without its dependencies (the list names every one the machine
# lacks), at requirements.txt's version where the list names none. A package published only as source is
# built here into a wheel, kept only if it is pure Python. Fails if the wheels pass WHEELHOUSE_MAX_MIB (40):
# they travel with the working tree, 64 MiB in all.
#
# Usage: scripts/wheelhouse.sh [DIR]      (make wheelhouse; PYTHON: whose pip downloads, default python3)
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
DIR=${1:-wheelhouse}
MAX_MIB=${WHEELHOUSE_MAX_MIB:-40}
TARGET=(--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
        --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64)

normalised() {  # a distribution's name as pip compares them: lower case, runs of - _ . as one -
  tr 'A-Z' 'a-z' <<<"$1" | sed -E 's/[-_.]+/-/g'
}

pinned() {  # pinned NAME: NAME==VERSION, the version of requirements.txt's line for NAME
  local name line
  name=$(normalised "$1")
  while IFS= read -r line; do
    if [[ $line == *==* && $(normalised "${line%%==*}") == "$name" ]]; then
      echo "$1==${line#*==}"
      return
    fi
  done <requirements.txt
  echo "wheelhouse.sh: $1 names no version and requirements.txt pins none: name one in scripts/wheelhouse.txt" >&2
  return 1
}

built() {  # built SPEC: the wheel pip builds here from SPEC's source, refused unless pure Python
  local scratch wheel
  scratch=$(mktemp -d)
  "$PYTHON" -m pip wheel -q --no-deps --no-binary=:all: -w "$scratch" "$1"
  wheel=$(echo "$scratch"/*.whl)
  if [[ $wheel != *-none-any.whl ]]; then
    echo "wheelhouse.sh: $1 has no wheel for the machine and builds to $(basename "$wheel"), not pure Python" >&2
    return 1
  fi
  mv "$wheel" "$DIR"/
  rm -rf "$scratch"
}

rm -rf "$DIR"
mkdir -p "$DIR"
while read -r name _; do
  [[ -z $name || $name == \#* ]] && continue
  spec=$name
  [[ $name == *==* ]] || spec=$(pinned "$name")
  if ! "$PYTHON" -m pip download -q --no-deps --only-binary=:all: "${TARGET[@]}" -d "$DIR" "$spec" 2>/dev/null; then
    echo "$spec: no wheel for the machine; building one from its source"
    built "$spec"
  fi
done <scripts/wheelhouse.txt

bytes=$(cat "$DIR"/*.whl | wc -c)
mib=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 2^20 }')
echo "$DIR/: $(ls "$DIR"/*.whl | wc -l) wheels, $mib MiB"
if ((bytes > MAX_MIB * 2**20)); then
  echo "wheelhouse.sh: $DIR/ holds $mib MiB, over WHEELHOUSE_MAX_MIB=$MAX_MIB: with the working tree it may not" \
       "travel (64 MiB in all)" >&2
  exit 1
fi

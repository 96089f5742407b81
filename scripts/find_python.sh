#!/usr/bin/env sh
# Prints the path of a Python 3.12 interpreter, the lab's one version (the accelerator image's, where jax 0.11
# needs 3.12 or later): python3.12 on the PATH, else one that pyenv or uv installed. Exits 1 saying so if none.
for candidate in python3.12 "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12 \
                 "$HOME"/.local/share/uv/python/cpython-3.12*/bin/python3.12 /usr/local/bin/python3.12 /usr/bin/python3.12; do
    if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1; then
        command -v "$candidate" 2>/dev/null || echo "$candidate"
        exit 0
    fi
done
echo "no Python 3.12 found (tried python3.12 on the PATH, pyenv's and uv's): install it, or name one with" \
     "make PYTHON=/path/to/python3.12" >&2
exit 1

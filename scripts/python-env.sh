#!/usr/bin/env bash
# Creates (once) the virtualenv the Python package is built against and tested
# in, with python/requirements-test.txt. Usage: scripts/python-env.sh DIR
set -euo pipefail
venv=$1
req=python/requirements-test.txt
stamp="$venv/.requirements"
if [ -x "$venv/bin/python" ] && cmp -s "$req" "$stamp"; then exit 0; fi
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q -r "$req"
cp "$req" "$stamp"

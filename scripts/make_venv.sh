#!/usr/bin/env bash
# Create the virtualenv $2 with Python $1 if it does not exist. A stock Debian/Ubuntu Python lacks `venv`
# (package python3-venv / python3.X-venv): say exactly what to install instead of failing obscurely.
set -u
python=$1 venv=$2
[ -x "$venv/bin/python" ] && exit 0
if ! "$python" -c 'import sys; assert sys.version_info >= (3, 10)' 2>/dev/null; then
  echo "cudamagic needs Python 3.10 or newer; '$python' is $("$python" --version 2>&1 || echo missing)." >&2
  echo "Give another one: make demo PYTHON=python3.11" >&2
  exit 1
fi
if ! "$python" -m venv "$venv" 2>/dev/null; then
  rm -rf "$venv"
  ver=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing python$ver-venv with apt-get (the stock Python has no venv module)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "python$ver-venv" >/dev/null \
      || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    "$python" -m venv "$venv" || exit 1
  else
    echo "Python's venv module is missing. Install it, then run make again:" >&2
    echo "  sudo apt-get install python$ver-venv      (Debian/Ubuntu)" >&2
    exit 1
  fi
fi

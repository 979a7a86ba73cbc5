#!/usr/bin/env bash
# Programs cudamagic uses that do not come from PyPI: Graphviz's `dot` (autograd graphs) and Chromium (the
# browser tests). Installed with apt-get when missing and we are root; otherwise the command is printed.
set -u
missing=()
command -v dot >/dev/null 2>&1 || missing+=(graphviz)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]} with apt-get"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null || {
    echo "apt-get install ${missing[*]} failed" >&2; exit 1; }
else
  echo "cudamagic needs: ${missing[*]}. Install with one of:"
  echo "  sudo apt-get install ${missing[*]}     (Debian/Ubuntu)"
  echo "  sudo dnf install graphviz chromium     (Fedora)"
  echo "  brew install graphviz                  (macOS)"
  echo "  conda install -c conda-forge python-graphviz"
  echo "Without dot, %%autograd_graph shows a text outline and the DOT source; without chromium the browser tests skip."
fi

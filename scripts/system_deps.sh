#!/usr/bin/env bash
# Programs cudamagic uses that do not come from PyPI: Graphviz's `dot` (autograd graphs), Chromium (the
# browser tests) and Prometheus (the `%gpuwatch --source prometheus://` tests and the cluster demo start their
# own server on 127.0.0.1; the Debian service is stopped and disabled right after the install).
# Installed with apt-get when missing and we are root; otherwise the command is printed.
set -u
missing=()
command -v dot >/dev/null 2>&1 || missing+=(graphviz)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]} with apt-get"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null || { echo "apt-get install ${missing[*]} failed" >&2; exit 1; }
  if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null 2>&1; then
    # the tests run their own server; the package's system service must not keep running on port 9090
    systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
else
  echo "cudamagic needs: ${missing[*]}. Install with one of:"
  echo "  sudo apt-get install ${missing[*]}     (Debian/Ubuntu)"
  echo "  sudo dnf install graphviz chromium     (Fedora; Prometheus: its release tarball)"
  echo "  brew install graphviz prometheus       (macOS)"
  echo "  conda install -c conda-forge python-graphviz"
  echo "Without dot, %%autograd_graph shows a text outline and the DOT source; without chromium the browser tests skip; without prometheus the cluster tests skip (and fail when CI is set)."
fi

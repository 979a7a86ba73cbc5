#!/usr/bin/env bash
# Programs cudamagic uses that do not come from PyPI: Graphviz's `dot` (autograd graphs), Chromium (the
# browser tests), Prometheus (the `%gpuwatch --source prometheus://` tests and the cluster demo start their
# own server on 127.0.0.1; the Debian service is stopped and disabled right after the install) and a C compiler
# (gcc: the tests' stand-in NVML library). Installed with apt-get when missing and we are root; otherwise the
# command is printed.
# Debian ships Chromium as the `chromium` package; Ubuntu ships it only as a snap (`chromium-browser` is a
# transitional package that installs the snap, which needs snapd): there the browser tests use
# $CUDAMAGIC_CHROMIUM, /usr/bin/chromium, or chromium/chromium-browser on PATH (/snap/bin).
set -u
. /etc/os-release 2>/dev/null || ID=unknown
missing=()
command -v dot >/dev/null 2>&1 || missing+=(graphviz)
# gcc builds the tests' stand-in NVML library (tests/nvml_stub/nvml_stub.c) that the real pynvml loads
{ command -v gcc >/dev/null 2>&1 || command -v cc >/dev/null 2>&1; } || missing+=(gcc)
if ! { [ -n "${CUDAMAGIC_CHROMIUM:-}" ] || command -v chromium >/dev/null 2>&1 \
       || command -v chromium-browser >/dev/null 2>&1 || [ -x /snap/bin/chromium ]; }; then
  if [ "${ID:-}" = ubuntu ]; then missing+=(chromium-browser); else missing+=(chromium); fi
fi
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
# openssl makes the throw-away certificate of the Prometheus client's TLS test
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]} with apt-get"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null || {
    echo "apt-get install ${missing[*]} failed" >&2
    [ "${ID:-}" = ubuntu ] && echo "On Ubuntu, Chromium is a snap: sudo snap install chromium" >&2
    exit 1; }
  if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null 2>&1; then
    # the tests run their own server; the package's system service must not keep running on port 9090
    systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
else
  echo "cudamagic needs: ${missing[*]}. Install with one of:"
  echo "  sudo apt-get install graphviz chromium prometheus openssl   (Debian)"
  echo "  sudo apt-get install graphviz && sudo snap install chromium   (Ubuntu: Chromium is a snap)"
  echo "  sudo dnf install graphviz chromium              (Fedora)"
  echo "  brew install graphviz                           (macOS)"
  echo "  conda install -c conda-forge python-graphviz"
  echo "Without dot, %%autograd_graph shows a text outline and the DOT source; the browser tests need Chromium"
  echo "(or set CUDAMAGIC_CHROMIUM to its path); the cluster tests need prometheus (they skip, or fail when CI is set)."
  echo "  sudo apt-get install prometheus                  (Debian/Ubuntu: the %gpuwatch --source tests)"
fi

#!/usr/bin/env bash
# Programs cudamagic uses that do not come from PyPI, for one purpose:
#   system_deps.sh demo   what `make demo` (and `make lab`, `make bench`) need: Graphviz's `dot` (autograd graphs)
#                         and Prometheus (the cluster demo starts its own server on 127.0.0.1; without it the
#                         notebook replays a recording). No browser.
#   system_deps.sh test   the same plus what `make test` needs: a C compiler (gcc: the tests' stand-in NVML
#                         library), openssl (the throw-away certificate of the Prometheus client's TLS test) and
#                         Chromium (the browser tests).
# Installed with apt-get when missing and we are root; otherwise the command is printed. The Debian Prometheus
# service is stopped and disabled right after the install (the tests and the demo run their own server).
# Debian ships Chromium as the `chromium` package; Ubuntu ships it only as a snap (`chromium-browser` is a
# transitional package that installs the snap, which needs snapd): there the browser tests use
# $CUDAMAGIC_CHROMIUM, /usr/bin/chromium, or chromium/chromium-browser on PATH (/snap/bin).
set -u
purpose=${1:-test}
case "$purpose" in demo|test) ;; *) echo "usage: $0 demo|test" >&2; exit 2;; esac
. /etc/os-release 2>/dev/null || ID=unknown
missing=()
command -v dot >/dev/null 2>&1 || missing+=(graphviz)
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
if [ "$purpose" = test ]; then
  # gcc builds the tests' stand-in NVML library (tests/nvml_stub/nvml_stub.c) that the real pynvml loads
  { command -v gcc >/dev/null 2>&1 || command -v cc >/dev/null 2>&1; } || missing+=(gcc)
  command -v openssl >/dev/null 2>&1 || missing+=(openssl)
  if ! { [ -n "${CUDAMAGIC_CHROMIUM:-}" ] || command -v chromium >/dev/null 2>&1 \
         || command -v chromium-browser >/dev/null 2>&1 || [ -x /snap/bin/chromium ]; }; then
    if [ "${ID:-}" = ubuntu ]; then missing+=(chromium-browser); else missing+=(chromium); fi
  fi
fi
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]} with apt-get"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null || {
    echo "apt-get install ${missing[*]} failed" >&2
    [ "${ID:-}" = ubuntu ] && [ "$purpose" = test ] && echo "On Ubuntu, Chromium is a snap: sudo snap install chromium" >&2
    exit 1; }
  if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null 2>&1; then
    # the tests and the demo run their own server; the package's system service must not keep running on 9090
    systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
else
  echo "cudamagic ($purpose) needs: ${missing[*]}. Install with one of:"
  if [ "$purpose" = test ]; then
    echo "  sudo apt-get install graphviz prometheus gcc openssl chromium   (Debian)"
    echo "  sudo apt-get install graphviz prometheus gcc openssl && sudo snap install chromium   (Ubuntu)"
    echo "The browser tests need Chromium (or set CUDAMAGIC_CHROMIUM to its path); the cluster tests need"
    echo "prometheus (they skip, or fail when CI is set)."
  else
    echo "  sudo apt-get install graphviz prometheus     (Debian/Ubuntu)"
    echo "  sudo dnf install graphviz                    (Fedora)"
    echo "  brew install graphviz                        (macOS)"
    echo "  conda install -c conda-forge python-graphviz"
    echo "Without dot, %%autograd_graph shows a text outline and the DOT source; without prometheus the"
    echo "cluster notebook replays a recording."
  fi
fi

#!/usr/bin/env bash
# Makes sure the Vision page has images to show: Fashion-MNIST from Debian's package
# `dataset-fashion-mnist` (/usr/share/datasets/fashion-mnist), unless $ATTNSCOPE_FASHION_MNIST_DIR
# names another folder. Installs the package with apt-get (as root, or through password-less sudo)
# when it is missing. Never fatal: without it the text models serve as usual and /api/vision/samples
# answers 503 saying how to install it.
set -uo pipefail

dir=${ATTNSCOPE_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
if compgen -G "$dir/t10k-images-idx3-ubyte*" >/dev/null; then
  exit 0
fi
if [ -n "${ATTNSCOPE_FASHION_MNIST_DIR:-}" ]; then
  echo "warning: ATTNSCOPE_FASHION_MNIST_DIR=$dir holds no Fashion-MNIST IDX files: the Vision page will have no samples" >&2
  exit 0
fi

as_root=()
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    as_root=(sudo -n)
  else
    as_root=(none)
  fi
fi
if ! command -v apt-get >/dev/null 2>&1 || [ "${as_root[*]}" = none ]; then
  echo "warning: Fashion-MNIST is not installed, so the Vision page has no samples:" >&2
  echo "         'sudo apt-get install dataset-fashion-mnist', or set ATTNSCOPE_FASHION_MNIST_DIR" >&2
  exit 0
fi

echo "Installing Debian's dataset-fashion-mnist for the Vision page (apt-get, ~30 MB)..."
if ! { "${as_root[@]}" apt-get update -qq \
      && DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq dataset-fashion-mnist >/dev/null; }; then
  echo "warning: apt-get could not install dataset-fashion-mnist: the Vision page will have no samples" >&2
fi
exit 0

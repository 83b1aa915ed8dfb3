#!/usr/bin/env bash
# Makes sure a Chromium for the browser tests is there (Debian's package; Playwright drives it
# through executable_path, so `playwright install` and its downloads are never needed).
# Order: $ATTNSCOPE_CHROMIUM, /usr/bin/chromium, /usr/bin/chromium-browser; else install
# Debian's `chromium` with apt-get (as root, or through password-less sudo); else fail clearly.
set -euo pipefail

find_chromium() {
  local candidate
  for candidate in "${ATTNSCOPE_CHROMIUM:-}" /usr/bin/chromium /usr/bin/chromium-browser; do
    if [ -n "$candidate" ] && [ -x "$candidate" ]; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

if [ -n "${ATTNSCOPE_CHROMIUM:-}" ] && [ ! -x "$ATTNSCOPE_CHROMIUM" ]; then
  echo "error: ATTNSCOPE_CHROMIUM=$ATTNSCOPE_CHROMIUM is not an executable file" >&2
  exit 1
fi

if found=$(find_chromium); then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: the browser tests need Chromium and this system has no apt-get:" >&2
  echo "       install Chromium and set ATTNSCOPE_CHROMIUM to its binary" >&2
  exit 1
fi

if [ "$(id -u)" = 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  echo "error: the browser tests need Chromium: run 'sudo apt-get install chromium'" >&2
  echo "       (or set ATTNSCOPE_CHROMIUM to a Chromium binary), then 'make test' again" >&2
  exit 1
fi

echo "Installing Debian's chromium for the browser tests (apt-get)..."
if ! { "${as_root[@]}" apt-get update -qq \
      && DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq chromium >/dev/null; }; then
  echo "error: apt-get could not install chromium (offline? no such package?);" >&2
  echo "       install it yourself or set ATTNSCOPE_CHROMIUM to a Chromium binary" >&2
  exit 1
fi

if ! found=$(find_chromium); then
  echo "error: chromium was installed but no binary is at /usr/bin/chromium; set ATTNSCOPE_CHROMIUM" >&2
  exit 1
fi
echo "Chromium ready: $found"

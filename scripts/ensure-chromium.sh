#!/usr/bin/env bash
# Makes sure a Chromium for the browser tests is installed (Debian's package; Playwright drives it).
set -euo pipefail
for candidate in "${ATTNSCOPE_CHROMIUM:-}" /usr/bin/chromium /usr/bin/chromium-browser; do
  if [ -n "$candidate" ] && [ -x "$candidate" ]; then exit 0; fi
done
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "Installing Debian's chromium for the browser tests..."
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || {
    echo "error: could not install chromium with apt-get; install it yourself or set ATTNSCOPE_CHROMIUM to a Chromium binary" >&2
    exit 1
  }
  exit 0
fi
echo "error: the browser tests need Chromium: run 'sudo apt-get install chromium' or set ATTNSCOPE_CHROMIUM to a Chromium binary" >&2
exit 1

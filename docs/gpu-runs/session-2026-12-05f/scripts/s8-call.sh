#!/usr/bin/env bash
# Second driver on the same machine: the fixed BULK wheel (the loader raises the dynamic shared limit
# whenever a kernel takes any). Smoke, bench with the BULK chains, one-token ncu, the MoE gpu tests.
R=/tmp/run8; t0=$(date +%s)
if [ ! -d "$R" ]; then
  pkill -f s7-driver.sh; pkill -f gpu-session; sleep 1
  mkdir -p "$R/tree" "$R/house-bulk" && cp -a . "$R/tree/" && cp .gpu/house-bulk/*.whl "$R/house-bulk/"
  setsid nohup bash "$R/tree/.gpu/s8-driver.sh" > "$R/driver.log" 2>&1 < /dev/null &
fi
while [ $(( $(date +%s) - t0 )) -lt "${1:-560}" ] && ! grep -q '^done' "$R/progress" 2>/dev/null; do sleep 5; done
cp "$R"/*.tar.gz "$OUT/" 2>/dev/null; cat "$R/progress"
for f in "$R"/smoke/session.log "$R"/prof/session.log "$R"/tests/session.log; do [ -f "$f" ] && { echo "== $f"; tail -c 2500 "$f"; }; done

#!/usr/bin/env bash
# One device call: start .gpu/driver.sh once (the tree and .gpu/house copied to /tmp/run), then wait up to
# $1 seconds and bring back each finished step's archive, the progress and the live logs' tails. Issue it
# again within 30 s of each return until the progress ends in "done".
R=/tmp/run; t0=$(date +%s)
if [ ! -d "$R" ]; then
  mkdir -p "$R/tree" "$R/house" && cp -a . "$R/tree/" && cp .gpu/house/*.whl "$R/house/"
  nvidia-smi --query-gpu=name --format=csv,noheader > "$R/which"
  setsid nohup bash "$R/tree/.gpu/driver.sh" > "$R/driver.log" 2>&1 < /dev/null &
fi
while [ $(( $(date +%s) - t0 )) -lt "${1:-540}" ] && ! grep -q '^done' "$R/progress" 2>/dev/null; do
  sleep 5; cp -u "$R"/*.tar.gz "$OUT/" 2>/dev/null; cat "$R/progress" > "$OUT/progress.txt" 2>/dev/null
done
cp "$R"/*.tar.gz "$OUT/" 2>/dev/null; cat "$R/which" "$R/progress"
for f in "$R"/*/session.log; do [ -f "$f" ] && { echo "== $f"; tail -c 1500 "$f"; }; done

#!/usr/bin/env bash
# One device call: start .gpu/w-driver.sh once (the tree and .gpu/house copied to /tmp/run), then wait up
# to $1 seconds and bring back what has finished, the progress and the live logs' tails. Issue it again
# within 30 s of each return until the progress ends in "done".
R=/tmp/run; t0=$(date +%s)
if [ ! -d "$R" ]; then
  mkdir -p "$R/tree" "$R/house" && cp -a . "$R/tree/" && cp .gpu/house/*.whl "$R/house/"
  echo "$(nvidia-smi --query-gpu=name --format=csv,noheader)" > "$R/which"
  setsid nohup bash "$R/tree/.gpu/w-driver.sh" > "$R/driver.log" 2>&1 < /dev/null &
fi
# the finished steps' archives go to $OUT as they appear: a call cut short by the device's limit keeps them
while [ $(( $(date +%s) - t0 )) -lt "${1:-560}" ] && ! grep -q '^done' "$R/progress" 2>/dev/null; do
  sleep 5; cp -u "$R"/*.tar.gz "$R"/bench/*.log "$OUT/" 2>/dev/null; cat "$R/progress" > "$OUT/progress.txt" 2>/dev/null
done
cp "$R"/*.tar.gz "$OUT/" 2>/dev/null; cat "$R/which" "$R/progress"
for f in "$R"/*/session.log "$R"/bench/*.log; do [ -f "$f" ] && { echo "== $f"; tail -c 1500 "$f"; }; done

#!/usr/bin/env bash
# One device call: start the driver once (a copy of the tree and wheelhouse in /tmp/run), then wait up to
# $1 seconds for it, and bring back what has finished plus the progress and live logs.
R=/tmp/run
wait_s="${1:-560}"
t0=$(date +%s)
if [ ! -d "$R" ]; then
  mkdir -p "$R/tree" "$R/house"
  cp -a . "$R/tree/" && cp .gpu/house/*.whl "$R/house/"
  setsid nohup bash "$R/tree/.gpu/driver.sh" > "$R/driver.log" 2>&1 < /dev/null &
fi
if [ -f .gpu/vllm.tar.gz ] && [ ! -f "$R/vllm-ready" ]; then
  mkdir -p "$R/vllm" "$R/house-bench" && tar -xzf .gpu/vllm.tar.gz -C "$R/vllm" \
    && cp "$R"/house/*.whl "$R"/vllm/wheels/*.whl "$R/house-bench/" && touch "$R/vllm-ready"
fi
while [ $(( $(date +%s) - t0 )) -lt "$wait_s" ] && ! grep -q '^done' "$R/progress" 2>/dev/null; do sleep 5; done
cp "$R"/*.tar.gz "$OUT/" 2>/dev/null
cat "$R/progress" 2>/dev/null
for f in "$R"/*/session.log; do echo "== $f"; tail -c 2500 "$f"; done
tar -czf "$OUT/live.tar.gz" -C "$R" progress driver.log $(cd "$R" && ls -d */session.log 2>/dev/null) 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,utilization.gpu,memory.used --format=csv

#!/usr/bin/env bash
# One device call: start .gpu/driver.sh once (the tree and .gpu/house copied to /tmp/run), then wait up to
# $1 seconds and bring back each finished step's archive, the progress and the live logs' tails. Issue it
# again within 30 s of each return until the progress ends in "done". A call brings back at most 8 files:
# each archive comes back in one call only (the oldest first, 7 a call beside progress.txt), so a run of
# more steps than that needs the calls that follow.
R=/tmp/run; t0=$(date +%s)
if [ ! -d "$R" ]; then
  mkdir -p "$R/tree" "$R/house" "$R/sent" && cp -a . "$R/tree/" && cp .gpu/house/*.whl "$R/house/"
  nvidia-smi --query-gpu=name --format=csv,noheader > "$R/which"
  setsid nohup bash "$R/tree/.gpu/driver.sh" > "$R/driver.log" 2>&1 < /dev/null &
fi
send() {  # the finished archives not sent by an earlier call, up to 7 in all in this call's $OUT
  for a in $(ls -tr "$R"/*.tar.gz 2>/dev/null); do
    n=$(basename "$a"); [ -e "$R/sent/$n" ] && [ ! -e "$OUT/$n" ] && continue
    [ -e "$OUT/$n" ] || [ "$(ls "$OUT"/*.tar.gz 2>/dev/null | wc -l)" -lt 7 ] || break
    cp -u "$a" "$OUT/" && touch "$R/sent/$n"
  done
  cat "$R/progress" > "$OUT/progress.txt" 2>/dev/null
}
while [ $(( $(date +%s) - t0 )) -lt "${1:-540}" ] && ! grep -q '^done' "$R/progress" 2>/dev/null; do
  sleep 5; send
done
send; cat "$R/which" "$R/progress"; ls "$OUT"
for f in "$R"/*/session.log; do [ -f "$f" ] && { echo "== $f"; tail -c 1500 "$f"; }; done

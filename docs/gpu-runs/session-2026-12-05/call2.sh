#!/usr/bin/env bash
R=/tmp/run
t0=$(date +%s)
if [ ! -f "$R/c2-started" ]; then
  touch "$R/c2-started"
  pkill -f driver.sh; pkill -f gpu-session; pkill -f bench_moe; sleep 2
  rm -rf "$R/house2" && mkdir -p "$R/house2" "$R/certify2" && cp .gpu/house2/*.whl "$R/house2/"
  cp -a .gpu "$R/tree/" 
  setsid nohup bash -c "cd $R/tree && PYTHONUNBUFFERED=1 timeout 1500 tools/gpu-session certify $R/house2 $R/certify2 --tool-timeout 240 > $R/certify2/session.log 2>&1; echo certify2 rc \$? >> $R/progress; tar -czf $R/certify2.tar.gz -C $R certify2; echo done2 >> $R/progress" > /dev/null 2>&1 < /dev/null &
fi
while [ $(( $(date +%s) - t0 )) -lt "${1:-500}" ] && ! grep -q '^done2' "$R/progress" 2>/dev/null; do sleep 5; done
cp "$R"/certify2.tar.gz "$OUT/" 2>/dev/null
cat "$R/progress"; tail -c 3000 "$R/certify2/session.log"

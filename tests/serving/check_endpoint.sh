#!/usr/bin/env bash
# The stats endpoint as an operator meets it: while 4 threads launch
# kernels (examples/03_stats_endpoint), scrape it with curl, check /metrics
# with `promtool check metrics` (Debian's prometheus package), /stats as
# JSON, /healthz, a 404, and answer a short wrk load (when wrk is there).
# Usage: check_endpoint.sh <03_stats_endpoint binary> <scratch dir>
set -euo pipefail
demo=$1 scratch=$2
rm -rf "$scratch" && mkdir -p "$scratch"
export TAILOR_CACHE_DIR=$scratch/cache
"$demo" --seconds 6 --threads 4 > "$scratch/demo.out" 2> "$scratch/demo.err" &
demo_pid=$!
trap 'kill $demo_pid 2> /dev/null || true' EXIT
for _ in $(seq 100); do
  grep -q "^stats endpoint:" "$scratch/demo.out" && break
  sleep 0.1
done
addr=$(sed -n 's|^stats endpoint: http://\([^/]*\)/metrics$|\1|p' "$scratch/demo.out")
[ -n "$addr" ] || { cat "$scratch/demo.out" "$scratch/demo.err"; exit 1; }
echo "endpoint: $addr"

curl -fsS "http://$addr/healthz" | grep -qx ok
curl -fsS "http://$addr/stats" | python3 -c '
import json, sys
runtimes = json.load(sys.stdin)["runtimes"]
assert list(runtimes) == ["cpu"], runtimes
print("/stats: json, runtimes", list(runtimes))'
code=$(curl -s -o /dev/null -w '%{http_code}' "http://$addr/nope")
[ "$code" = 404 ] || { echo "/nope answered $code"; exit 1; }

sleep 1  # launches under way
curl -fsS -D "$scratch/headers" "http://$addr/metrics" > "$scratch/metrics1"
grep -qi '^content-type: text/plain; version=0.0.4' "$scratch/headers"
promtool check metrics < "$scratch/metrics1"
echo "/metrics: promtool check metrics ok ($(wc -l < "$scratch/metrics1") lines)"
launches() { sed -n 's/^tailor_launches_total{runtime="cpu",op="moe.pack"} //p' "$1"; }
sleep 0.5
curl -fsS "http://$addr/metrics" > "$scratch/metrics2"
[ "$(launches "$scratch/metrics2")" -gt "$(launches "$scratch/metrics1")" ]
echo "/metrics: moe.pack launches $(launches "$scratch/metrics1") -> $(launches "$scratch/metrics2")"

if command -v wrk > /dev/null; then
  wrk -t1 -c4 -d2s "http://$addr/metrics" > "$scratch/wrk.out"
  grep -E "Requests/sec|Non-2xx|Socket errors" "$scratch/wrk.out" || true
  ! grep -q "Non-2xx" "$scratch/wrk.out"
fi
wait $demo_pid
trap - EXIT
cat "$scratch/demo.out"
echo "endpoint check: ok"

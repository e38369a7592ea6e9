#!/usr/bin/env bash
# Dispatch overhead with and without the stats endpoint, and the endpoint
# under a bounded loopback load (wrk), while 4 threads launch warm kernels
# (examples/03_stats_endpoint: moe::Pack of 4 x 64 f32, mostly dispatch).
# Three rounds of three 10-second runs, alternating:
#   off      no endpoint
#   idle     endpoint up, nobody scraping
#   polled   curl /metrics every 0.1 s (100x a 10 s Prometheus interval)
#   scraped  wrk -t1 -c2 on /metrics flat out for the whole run (a stress
#            test: on 2 cores wrk and the server take CPU from the launchers)
# Usage: bench/stats_endpoint_load.sh [build dir] [seconds per run]
set -euo pipefail
build=${1:-build} seconds=${2:-10}
demo=$build/examples/03_stats_endpoint
export TAILOR_CACHE_DIR=${TAILOR_CACHE_DIR:-$(mktemp -d)}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run() {  # run <mode> <round>
  local mode=$1 log=$out/$1.$2
  local args=(--seconds "$seconds" --threads 4)
  [ "$mode" = off ] && args+=(--no-endpoint)
  "$demo" "${args[@]}" > "$log" &
  local pid=$!
  until grep -q "^stats endpoint:" "$log" 2> /dev/null; do sleep 0.05; done
  local addr
  addr=$(sed -n 's|^stats endpoint: http://\([^/]*\)/metrics$|\1|p' "$log")
  if [ "$mode" = scraped ]; then
    wrk -t1 -c2 -d"${seconds}s" --latency "http://$addr/metrics" > "$log.wrk"
  elif [ "$mode" = polled ]; then
    while kill -0 $pid 2> /dev/null; do
      curl -fsS -o /dev/null "http://$addr/metrics" || true
      sleep 0.1
    done
  fi
  wait $pid
  sed -n 's/^launch: \([0-9]*\) ns per call.*/\1/p' "$log"
}

declare -A ns
for round in 1 2 3; do
  for mode in off idle polled scraped; do
    ns[$mode]+="$(run $mode $round) "
  done
done
median() { tr ' ' '\n' | grep . | sort -n | sed -n 2p; }
echo "# command: bench/stats_endpoint_load.sh $build $seconds"
echo "# date: $(date -u +%Y-%m-%dT%H:%MZ)"
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "# launch = thread-seconds per moe::Pack call, 4 threads (> cores: oversubscribed)"
for mode in off idle polled scraped; do
  printf "%-8s launch ns/call: %s(median %s)\n" "$mode" "${ns[$mode]}" \
    "$(echo "${ns[$mode]}" | median)"
done
for f in "$out"/scraped.*.wrk; do
  req=$(sed -n 's/^Requests\/sec: *//p' "$f")
  p50=$(awk '$1=="50%"{print $2}' "$f") p99=$(awk '$1=="99%"{print $2}' "$f")
  errors=$(grep -E "Non-2xx|Socket errors" "$f" || echo "no errors")
  echo "scraped  /metrics: $req req/s, latency p50 $p50 p99 $p99, $errors"
done

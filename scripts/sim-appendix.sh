#!/usr/bin/env bash
# Reproduces the cache-miss experiments of the JOADER appendix (Table 1,
# Figures 4 and 5) with joaderfs-sim, which runs the daemon's own planner and
# eviction policies.
#
#   scripts/sim-appendix.sh [OUTDIR]      (default: docs/sim)
#
# Writes OUTDIR/misses.csv (one row per case, sampler, policy and cache size)
# and PNG plots drawn with gnuplot. The simulator is $SIM if set, else the
# first joaderfs-sim found in build/ or build-*/ of the repository. Takes
# about 20 seconds.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/docs/sim}"
seed="${SEED:-1}"

sim="${SIM:-}"
if [[ -z "$sim" ]]; then
  for candidate in "$root"/build/joaderfs-sim "$root"/build-*/joaderfs-sim; do
    if [[ -x "$candidate" ]]; then sim="$candidate"; break; fi
  done
fi
if [[ -z "$sim" || ! -x "$sim" ]]; then
  echo "sim-appendix: joaderfs-sim not found; build it or set SIM=path" >&2
  exit 1
fi
if ! command -v gnuplot >/dev/null; then
  echo "sim-appendix: gnuplot is missing (apt-get install gnuplot-nox)" >&2
  exit 1
fi
mkdir -p "$out"

# Table 1. Datasets of 10000 ids are 0-9999 (the paper's [0, 1e4]);
# sample(13333, 10000) draws 10000 of the ids 0-13332.
random4="$(printf 'sample:0-13332:10000:%d;' 1 2 3 4)"
random4="${random4%;}"
declare -A jobs=(
  [overlap-100]="0-9999;0-9999"
  [overlap-75]="0-9999;2500-12499"
  [overlap-50]="0-9999;5000-14999"
  [overlap-25]="0-9999;7500-17499"
  [size-75]="0-9999;0-7499"
  [size-50]="0-9999;0-4999"
  [size-25]="0-9999;0-2499"
  [random4]="$random4"
  [nested4]="0-9999;0-7499;0-4999;0-2499"
)
two_job_cases="overlap-100 overlap-75 overlap-50 overlap-25 size-75 size-50 size-25"
four_job_cases="random4 nested4"
sizes="1 2 5 10 20 50 100 200 500 1000 1500 2000 2500 3000 4000 5000 6000
       7000 8000 9000 10000"

csv="$out/misses.csv"
echo "case,jobs,sampler,policy,cache,misses,requests,union" > "$csv"
run_case() {  # case policies...
  local case="$1"; shift
  for sampler in dsa isa; do
    for policy in "$@"; do
      for cache in $sizes; do
        line="$("$sim" misses --jobs "${jobs[$case]}" --sampler "$sampler" \
                --policy "$policy" --cache "$cache" --seed "$seed")"
        [[ "$line" =~ ^misses=([0-9]+)\ requests=([0-9]+)\ union=([0-9]+)$ ]] ||
          { echo "sim-appendix: unexpected output: $line" >&2; exit 1; }
        printf '%s,"%s",%s,%s,%s,%s,%s,%s\n' "$case" "${jobs[$case]}" \
          "$sampler" "$policy" "$cache" "${BASH_REMATCH[@]:1}" >> "$csv"
      done
    done
  done
}
for case in $two_job_cases; do run_case "$case" lru refcnt; done
for case in $four_job_cases; do run_case "$case" refcnt lru fifo random; done

# One data file per plotted series: cache misses.
data="$(mktemp -d)"
trap 'rm -rf "$data"' EXIT
series() {  # case sampler policy -> file
  local file="$data/$1-$2-$3.dat"
  # Job specs hold no commas, so the columns are fixed.
  awk -F, -v c="$1" -v s="$2" -v p="$3" \
    '$1 == c && $3 == s && $4 == p { print $5, $6 }' "$csv" > "$file"
  echo "$file"
}
plot() {  # png title "file|label" ...
  local png="$1" title="$2"; shift 2
  local cmds="" sep=""
  for item in "$@"; do
    cmds+="$sep'${item%%|*}' using 1:2 with linespoints title '${item#*|}'"
    sep=", "
  done
  gnuplot <<EOF
set terminal pngcairo size 900,600 font ",11"
set output '$png'
set title '$title'
set xlabel 'cache size (samples)'
set ylabel 'cache misses'
set key outside right
set grid
set offsets 0, 0, graph 0.05, graph 0.05
plot $cmds
EOF
}

args=()
for case in overlap-100 overlap-75 overlap-50 overlap-25; do
  args+=("$(series "$case" dsa lru)|DSA $case" "$(series "$case" isa lru)|ISA $case")
done
plot "$out/fig4a-overlap.png" \
  "Two jobs of 10000 ids, overlapping partially (LRU): DSA vs ISA" "${args[@]}"

args=()
for case in overlap-100 size-75 size-50 size-25; do
  args+=("$(series "$case" dsa lru)|DSA $case" "$(series "$case" isa lru)|ISA $case")
done
plot "$out/fig4b-sizes.png" \
  "Two jobs, 10000 ids and a nested subset (LRU): DSA vs ISA" "${args[@]}"

for case in random4 nested4; do
  args=()
  for policy in refcnt lru fifo random; do
    args+=("$(series "$case" dsa "$policy")|DSA + $policy")
  done
  plot "$out/fig5-$case-policies.png" \
    "Four jobs ($case) under DSA: eviction policies" "${args[@]}"
  plot "$out/fig6-$case-samplers.png" \
    "Four jobs ($case): DSA vs ISA" \
    "$(series "$case" dsa lru)|DSA + LRU" "$(series "$case" isa lru)|ISA + LRU" \
    "$(series "$case" dsa refcnt)|DSA + RefCnt" "$(series "$case" isa refcnt)|ISA + RefCnt"
done

echo "sim-appendix: wrote $csv and $(ls "$out"/*.png | wc -l) plots to $out"

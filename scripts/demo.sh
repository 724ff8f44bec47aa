#!/bin/bash
# demo.sh - three training jobs read one joaderfs mount at the same time and
# share the decoding: prints each job's samples/s and the mount's /stats.
#
# usage: scripts/demo.sh [--no-setup]
#   --no-setup  skip `scripts/setup.sh --demo` (the daemon's packages, and
#               joaderfs and joaderfs-gendata built into build-demo/)
# With --no-setup, BUILD_DIR may name another build folder than build-demo/
# (build/ of scripts/setup.sh, say).
#
# The data set (1000 synthetic JPEGs in 10 classes, plus 4 corrupt files that
# the daemon skips) is made once under ${XDG_CACHE_HOME:-~/.cache}/joaderfs-demo.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
if [[ ${1:-} != --no-setup ]]; then
  "$repo/scripts/setup.sh" --demo
fi

build=${BUILD_DIR:-$repo/build-demo}
# The jobs use the client of this checkout, installed or not.
export PYTHONPATH=$repo/python${PYTHONPATH:+:$PYTHONPATH}
joaderfs=$build/joaderfs
gendata=$build/joaderfs-gendata
for binary in "$joaderfs" "$gendata"; do
  if [[ ! -x $binary ]]; then
    echo "demo.sh: $binary is not built (run scripts/setup.sh --demo)" >&2
    exit 1
  fi
done

cache=${XDG_CACHE_HOME:-$HOME/.cache}/joaderfs-demo
images=1000
data=$cache/images-$images
mkdir -p "$cache"
if [[ ! -e $data.complete ]]; then
  rm -rf "$data"
  "$gendata" "$data" --images "$images" --classes 10 --seed 1 --corrupt 4
  touch "$data.complete"
fi

work=$(mktemp -d /tmp/joaderfs-demo.XXXXXX)
mnt=$work/mnt
mkdir "$mnt"
cleanup() {
  if grep -qs " $mnt fuse" /proc/mounts; then
    fusermount3 -u "$mnt" || fusermount3 -u -z "$mnt"
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# No disk tier, so that every run shows the sharing from a cold start.
"$joaderfs" -o "ram_cache=1G,cache_dir=none,log=$cache/daemon.log" "$data" "$mnt"
for _ in $(seq 100); do
  [[ -r $mnt/stats ]] && break
  sleep 0.1
done
echo "mounted $data at $mnt (log: $cache/daemon.log)"

jobs=(sweep-lr0.1 sweep-lr0.01 half-classes)
specs=(subset=all subset=all subset=classes:0-4)
pids=()
for i in "${!jobs[@]}"; do
  /usr/bin/python3 "$repo/scripts/demo_job.py" run "$mnt" "${jobs[i]}" \
    --spec "${specs[i]}" --workers 2 >"$work/${jobs[i]}.json" &
  pids+=($!)
done
echo "running ${#jobs[@]} jobs, one epoch each, 2 DataLoader workers each..."
for pid in "${pids[@]}"; do
  wait "$pid"
done
echo
/usr/bin/python3 "$repo/scripts/demo_job.py" report "$mnt" "$work"/*.json

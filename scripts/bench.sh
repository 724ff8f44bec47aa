#!/usr/bin/env bash
# bench.sh - joaderfs against the PyTorch DataLoader: the JOADER paper's
# evaluation scenarios (S1-S6, see docs/benchmarks.md), each run once with
# every job reading through joaderfs and once with every job using its own
# torch DataLoader over torchvision's ImageFolder; prints a Markdown table and
# writes CSV files and plots.
#
# usage: scripts/bench.sh [--quick] [--scale] [--no-setup] [--out DIR] [DATASET] [-- DRIVER-OPTIONS]
#   --quick     a ~3-minute smoke run: 200 images, fewer cases and repetitions
#   --scale     instead, the decode-once suite at scale (bench/scale_bench.py):
#               10000 images, RAM at 5/10/20% of the decoded set with and
#               without a disk tier, S3/S4/S5 schedules, DSA and ISA, the
#               simulator's prediction beside the daemon's figures (~30 min)
#   --no-setup  skip scripts/setup.sh (packages and build already there)
#   --out DIR   where table.md, runs.csv, jobs.csv, s3.png, s6.png go
#               (default build/bench-out/full or build/bench-out/quick)
#   DATASET     an ImageFolder tree to use instead of a generated one
#   after --, options for bench/driver.py (see its --help), e.g.
#               -- --scenarios S1,S3 --reps 5
#
# The generated dataset (build/joaderfs-gendata, ImageNet-like JPEG sizes) is
# cached under build/bench-data. Every joaderfs daemon is mounted daemonized,
# as users run it (its own session, hence process group), one per run,
# through the daemon harness tests/integration/mountlib.py; on exit, error or
# Ctrl-C everything this script started is ended and every mount under its
# work folder is unmounted.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
quick=0
scale=0
setup=1
out=
dataset=
driver_args=()
while (($#)); do
  case $1 in
    --quick) quick=1 ;;
    --scale) scale=1 ;;
    --no-setup) setup=0 ;;
    --out) out=$2; shift ;;
    --out=*) out=${1#--out=} ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; driver_args=("$@"); break ;;
    -*) echo "bench.sh: unknown option $1" >&2; exit 2 ;;
    *) dataset=$1 ;;
  esac
  shift
done

if ((setup)); then
  "$repo/scripts/setup.sh"
fi
build=${BUILD_DIR:-$repo/build}
for binary in "$build/joaderfs" "$build/joaderfs-gendata"; do
  if [[ ! -x $binary ]]; then
    echo "bench.sh: $binary is not built (run scripts/setup.sh)" >&2
    exit 1
  fi
done
python=/usr/bin/python3
if ! "$python" -c 'import torch, torchvision, PIL, numpy' 2>/dev/null; then
  echo "bench.sh: $python lacks torch/torchvision/PIL/numpy (scripts/setup.sh installs them)" >&2
  exit 1
fi

if ((scale)); then
  out=${out:-$build/bench-out/scale}
  mkdir -p "$out"
  exec "$python" "$repo/bench/scale_bench.py" --images 10000 \
    --data "$build/bench-data/scale-10000" --out "$out" "${driver_args[@]}" | tee "$out/table.md"
fi

if ((quick)); then
  images=200 classes=10
  mode_args=(--reps 1 --reps-other 1 --no-w0 --s3-jobs "1,4" --s4-samples 128
             --s6-overlaps "50,100")
  : "${out:=$repo/build/bench-out/quick}"
else
  images=1500 classes=20
  mode_args=(--reps 3 --reps-other 1)
  : "${out:=$repo/build/bench-out/full}"
fi

if [[ -z $dataset ]]; then
  dataset=$repo/build/bench-data/images-$images-s1
  if [[ ! -e $dataset.complete ]]; then
    rm -rf "$dataset"
    mkdir -p "$(dirname "$dataset")"
    "$build/joaderfs-gendata" "$dataset" --images "$images" --classes "$classes" --seed 1
    touch "$dataset.complete"
  fi
fi
if [[ ! -d $dataset ]]; then
  echo "bench.sh: $dataset is not a folder" >&2
  exit 1
fi

work=$(mktemp -d /tmp/joaderfs-bench.XXXXXX)
pidfile=$work/pids
: >"$pidfile"
driver_pid=
cleanup() {
  local status=$?
  trap - EXIT INT TERM HUP
  if [[ -n $driver_pid ]] && kill -0 "$driver_pid" 2>/dev/null; then
    kill -TERM "$driver_pid" 2>/dev/null || true
    for _ in $(seq 100); do
      kill -0 "$driver_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$driver_pid" 2>/dev/null || true
  fi
  # Process groups the driver started (daemons, jobs and their DataLoader
  # workers), by their recorded ids, in case the driver could not end them.
  local pgid
  while read -r pgid; do
    [[ -n $pgid ]] || continue
    if ps -o pid= -g "$pgid" >/dev/null 2>&1; then
      kill -TERM -- "-$pgid" 2>/dev/null || true
      sleep 0.5
      kill -KILL -- "-$pgid" 2>/dev/null || true
    fi
  done <"$pidfile"
  local mnt
  while read -r _ mnt _; do
    case $mnt in
      "$work"/*) fusermount3 -u "$mnt" 2>/dev/null || fusermount3 -u -z "$mnt" 2>/dev/null || true ;;
    esac
  done < <(grep fuse /proc/mounts || true)
  if ((status == 0)); then
    rm -rf "$work"
  else
    echo "bench.sh: logs kept in $work" >&2
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

echo "bench.sh: dataset $dataset, results in $out, work folder $work"
"$python" "$repo/bench/driver.py" --data "$dataset" --joaderfs "$build/joaderfs" \
  --workdir "$work" --pidfile "$pidfile" --out "$out" "${mode_args[@]}" \
  ${driver_args[@]+"${driver_args[@]}"} &
driver_pid=$!
wait "$driver_pid"

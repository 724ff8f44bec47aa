#!/usr/bin/env bash
# bench.sh - the one entry point of joaderfs's benchmarks (bench/, listed with
# what each proves in docs/benchmarks.md).
#
# usage: scripts/bench.sh [--no-setup] [COMMAND] [ARGS...]
#        scripts/bench.sh --list       one line per command: what it proves
#        scripts/bench.sh COMMAND --help
#
# COMMAND is one of --list's; without one it is `scenarios`. The Python
# benchmarks are modules of the bench package (bench/GROUP/MODULE.py, run as
# python3 -m bench.GROUP.MODULE with PYTHONPATH set to this checkout's repo,
# tests/ and python/ folders: they mount through the harness package,
# tests/harness); the micro ones are programs of the build
# (bench/CMakeLists.txt). A command that needs an ImageFolder and is given no
# --data (no SOURCE for sample-cost) gets a generated one of 200 images in
# 10 classes (512 for tf), cached under build/bench-data. tf runs in the test
# venv ($JOADERFS_TEST_VENV, default .venv-test), which has TensorFlow.
#
# scenarios [--quick] [--out DIR] [DATASET] [-- DRIVER-OPTIONS]
#   joaderfs against the PyTorch DataLoader: the JOADER paper's evaluation
#   scenarios (S1-S6), each run once with every job reading through joaderfs
#   and once with every job using its own torch DataLoader over torchvision's
#   ImageFolder; prints a Markdown table and writes CSV files and plots.
#   --quick     a ~3-minute smoke run: 200 images, fewer cases and repetitions
#   --scale     instead, the `scale` command at its full size (kept for old
#               command lines)
#   --out DIR   where table.md, runs.csv, jobs.csv, s3.png, s6.png go
#               (default build/bench-out/full or build/bench-out/quick)
#   DATASET     an ImageFolder tree to use instead of a generated one
#   after --, options for bench/throughput/driver.py (see its --help), e.g.
#               -- --scenarios S1,S3 --reps 5
#   The generated dataset (build/joaderfs-gendata, ImageNet-like JPEG sizes)
#   is cached under build/bench-data. Every joaderfs daemon is mounted
#   daemonized, as users run it (its own session, hence process group), one
#   per run, through the harness package; on exit, error or Ctrl-C
#   everything this script started is ended and every mount under its work
#   folder is unmounted.
#
# peers [--reps N] [--loaders a,b] [--data NAME=DIR ...]
#   joaderfs against the other loaders (bench/client/peers.py). The peers
#   (bench/requirements-peers.txt) are installed once into build/venv-peers,
#   a venv layered over the test venv (torch, TensorFlow), so that the test
#   venv stays lean; --loaders without dali-cpu and spdl runs without it.
#   Without --data: the photos (1000 generated, 10 classes) and `large`,
#   the same with every 25th upscaled past 2000 px.
#
# --no-setup  skip scripts/setup.sh (packages and build already there); only
#             scenarios and scale run it, the other commands need the build.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$repo/build}
python=/usr/bin/python3

# command|how it runs|what it proves (the --list line)
commands=(
  "scenarios|driver|joaderfs vs one DataLoader per job, S1-S6 of the JOADER paper: throughput, CPU, decodes and memory as jobs share data"
  "scale|python bench.scale.decode_once|decode-once at scale: 4 jobs with RAM at 5-20% of the decoded set decode each image about once, as the simulator predicts"
  "contention|python bench.scale.contention|sharing on a busy machine: N identical and N overlapping jobs at 5% and 10% RAM beside K busy processes (K = 0, 2, 4), decodes per distinct sample (medians of 3)"
  "drift|python bench.scale.drift|GPU-paced jobs that drift apart on a shared (fake) GPU: decodes per distinct (epoch, id) and aggregate vs the ceiling, fifo vs lock GPU"
  "cluster|python bench.scale.cluster|2 daemons x 2 jobs sharing decodes through the remote tier (3 memcached on loopback): decodes per distinct, aggregate samples/s vs one daemon, bytes moved per sample; get latency from memcached and from redis-server (installs it)"
  "tiers|python bench.tiers.tier_costs|the cache tiers: a disk hit costs a fraction of a decode, a second epoch from RAM is faster, FUSE throughput of RAM hits"
  "job-store|python bench.tiers.job_store_cost|what keeping jobs across restarts (the job store's writes) costs each read reply"
  "client-cost|python bench.client.client_cost|the Python client's CPU per sample of RAM hits: raw reads, per-sample and batch paths"
  "tf|python bench.client.tf_native|TensorFlow pipelines, 1 and 4 jobs: the native TFRecordDataset pipeline vs tf_dataset vs tf.data decoding the JPEGs itself (CPU per sample, daemon included)"
  "train|python bench.client.train|end-to-end ResNet-18 training of concurrent jobs through joaderfs vs DataLoaders (GPU when present)"
  "parity|python bench.parity.convergence|training on joaderfs's random crops and flips converges like torchvision's own augmentation"
  "planner|micro joaderfs-planner-bench|the dependent planner's insert time, planning rate and memory against issue 3's targets"
  "sample-cost|micro joaderfs-sample-cost-bench|CPU per sample of a decode vs a disk-tier hit vs a crop of a cached base image"
  "disk-index|micro joaderfs-disk-index-bench|a remount over a disk tier of 128k samples: Open() time, RSS per cached sample and a burst's write drops against issue 44's targets"
  "rank-stall|micro joaderfs-rank-stall-bench|a ranked job's epoch start does not stall the other jobs' reads"
  "remote-get|micro joaderfs-remote-get-bench|the remote tier's fetch: one memcached get per value against a multi-get of a batch (3 memcached on loopback), values/s by value size and batch"
  "tar-scan|micro joaderfs-tar-scan-bench|scanning a folder of WebDataset tar shards: index bytes per sample and scan time against a plain walk of the tar headers (needs a SOURCE of shards)"
  "source|python bench.scale.source|SOURCE in an S3 bucket (rclone serve s3 behind HAProxy on loopback, and 20 ms added per request; installs both) vs a local tree: 4 jobs, RAM at 10%, samples/s and decodes per distinct, plan-driven reads beside one read per decode thread, and beside joaderfs over an s3fs mount of the bucket (installs Debian's s3fs)"
  "peers|python bench.client.peers|joaderfs against the loaders a user would pick (DataLoader + PIL or decode_jpeg, tf.data, DALI CPU, SPDL): 1 job x 2 epochs and 4 jobs, samples/s and samples per CPU-second, daemon included"
  "scale-catalog|python bench.scale.catalog|the catalog at ImageNet scale (128k, 1.28M, 5M with --big tiny JPEGs in 1000 classes): fresh mount, remount and full-disk-tier restart time and RSS per sample, manifest read, a random-subset job's creation, against ImageFolder and find (issue 44's targets)"
  "memory|python bench.memory.rss|the daemon's RSS before, at peak and after the loads of issue 20 (a second uid's 200 ranks=4096 jobs, 300 readers of a huge sample, 6 jobs, job churn): freed memory goes back"
)

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

list() {
  local entry name what
  for entry in "${commands[@]}"; do
    name=${entry%%|*}
    what=${entry##*|}
    printf '%-12s %s\n' "$name" "$what"
  done
}

# ImageFolder of N generated JPEGs in C classes, made once, cached.
dataset() {
  local images=$1 classes=$2 dir
  dir=$build/bench-data/images-$images-s1
  if [[ ! -e $dir.complete ]]; then
    rm -rf "$dir"
    mkdir -p "$(dirname "$dir")"
    "$build/joaderfs-gendata" "$dir" --images "$images" --classes "$classes" --seed 1 >&2
    touch "$dir.complete"
  fi
  echo "$dir"
}

need_built() {
  local binary
  for binary in "$@"; do
    if [[ ! -x $build/$binary ]]; then
      echo "bench.sh: $build/$binary is not built (run scripts/setup.sh)" >&2
      exit 1
    fi
  done
}

# build/venv-peers: bench/requirements-peers.txt over the test venv (a .pth
# file puts the test venv's site-packages after its own), remade when the
# requirements change.
peers_venv() {
  local venv=$build/venv-peers req=$repo/bench/requirements-peers.txt test_venv site
  test_venv=${JOADERFS_TEST_VENV:-$repo/.venv-test}
  [[ -x $test_venv/bin/python ]] || { echo "bench.sh: no $test_venv (scripts/setup.sh makes it)" >&2; exit 1; }
  # SPDL's FFmpeg libraries and perf: for this benchmark alone, so not in
  # scripts/setup.sh (CI would install them for nothing).
  local p missing=()
  for p in linux-perf libavdevice59 libavfilter8; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if ((${#missing[@]})); then
    $([[ $(id -u) == 0 ]] || echo sudo) apt-get install -y --no-install-recommends "${missing[@]}" >&2
  fi
  if [[ -e $venv/.complete ]] && cmp -s "$req" "$venv/.complete"; then return; fi
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  site=$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')
  "$test_venv/bin/python" -c 'import site; print(site.getsitepackages()[0])' >"$site/zz-test-venv.pth"
  "$venv/bin/pip" install --no-deps -r "$req" >&2
  cp "$req" "$venv/.complete"
}

# Whether peers' --loaders (all of them when not given) names one that only
# build/venv-peers has: DALI or SPDL.
needs_peers_venv() {
  local loaders=all
  while (($#)); do
    case $1 in
      --loaders) loaders=${2:-}; shift ;;
      --loaders=*) loaders=${1#--loaders=} ;;
    esac
    shift
  done
  [[ $loaders == all || ,$loaders, == *,dali-cpu,* || ,$loaders, == *,spdl,* ]]
}

# --no-setup may come anywhere before a `--`.
setup=1
args=()
while (($#)); do
  case $1 in
    --no-setup) setup=0 ;;
    --) args+=("$@"); break ;;
    *) args+=("$1") ;;
  esac
  shift
done
set -- ${args[@]+"${args[@]}"}

command=scenarios
case ${1:-} in
  --list) list; exit 0 ;;
  -h|--help) usage; exit 0 ;;
  --scale) command=scale; shift; set -- --images 10000 \
             --data "$build/bench-data/scale-10000" --out "$build/bench-out/scale" "$@" ;;
  ""|-*|/*|.*) ;;
  *)
    for entry in "${commands[@]}"; do
      if [[ ${entry%%|*} == "$1" ]]; then command=$1; break; fi
    done
    if [[ $command == "$1" ]]; then
      shift
    elif [[ ! -d $1 ]]; then
      echo "bench.sh: no command or dataset folder '$1' (scripts/bench.sh --list)" >&2
      exit 2
    fi
    ;;
esac

how=
for entry in "${commands[@]}"; do
  if [[ ${entry%%|*} == "$command" ]]; then how=${entry#*|}; how=${how%%|*}; fi
done

export PYTHONPATH=$repo:$repo/tests:$repo/python${PYTHONPATH:+:$PYTHONPATH}
export JOADERFS_BIN=$build/joaderfs JOADERFS_BUILD=$build

has_arg() { local want=$1 a; shift; for a in "$@"; do [[ $a == "$want" || $a == "$want"=* ]] && return 0; done; return 1; }

if [[ $command == scale ]] && ((setup)); then
  "$repo/scripts/setup.sh"
fi
case $how in
  python\ *)
    module=${how#python }
    need_built joaderfs
    if [[ $command == tf ]]; then
      # TensorFlow lives in the test venv (scripts/setup.sh makes it).
      python=${JOADERFS_TEST_VENV:-$repo/.venv-test}/bin/python
      [[ -x $python ]] || { echo "bench.sh: no $python (scripts/setup.sh makes it)" >&2; exit 1; }
    fi
    if [[ $command == peers ]]; then
      if needs_peers_venv "$@"; then
        peers_venv
        python=$build/venv-peers/bin/python
      else  # joaderfs, TensorFlow and torch run on the test venv or Debian's python
        python=${JOADERFS_TEST_VENV:-$repo/.venv-test}/bin/python
        [[ -x $python ]] || { echo "bench.sh: no $python (scripts/setup.sh makes it)" >&2; exit 1; }
      fi
      export JOADERFS_PEERS_PYTHON=$python
    fi
    if ! "$python" -c 'import PIL, numpy' 2>/dev/null; then
      echo "bench.sh: $python lacks PIL/numpy (scripts/setup.sh installs them)" >&2
      exit 1
    fi
    extra=()
    case $command in
      tiers) has_arg --bin "$@" || extra+=(--bin "$build/joaderfs") ;;
      client-cost|train|drift|tf|peers|scale-catalog) has_arg --joaderfs "$@" || extra+=(--joaderfs "$build/joaderfs") ;;
    esac
    case $command in
      tiers|client-cost|train|source)
        if ! has_arg --data "$@" && ! has_arg --help "$@"; then
          need_built joaderfs-gendata
          extra+=(--data "$(dataset 200 10)")
        fi ;;
      tf)  # 4 batches of 128 an epoch: a few minutes on 2 cores
        if ! has_arg --data "$@" && ! has_arg --help "$@"; then
          need_built joaderfs-gendata
          extra+=(--data "$(dataset 512 10)")
        fi ;;
      peers)
        if ! has_arg --data "$@" && ! has_arg --help "$@"; then
          need_built joaderfs-gendata
          extra+=(--photos "$(dataset 1000 10)" --large-dir "$build/bench-data/large-1000")
        fi ;;
    esac
    # s3fs for the comparison with an S3 FUSE client under SOURCE, HAProxy
    # and rclone for the store (bench/scale/fast_store.py): for this
    # benchmark alone, so not in scripts/setup.sh.
    if [[ $command == source ]] && ! has_arg --help "$@"; then
      missing=()
      command -v haproxy >/dev/null || missing+=(haproxy)
      has_arg --no-s3fs "$@" || command -v s3fs >/dev/null || missing+=(s3fs)
      if ((${#missing[@]})); then
        $([[ $(id -u) == 0 ]] || echo sudo) apt-get install -y --no-install-recommends "${missing[@]}" >&2
      fi
      req=$repo/bench/requirements-source.txt
      if ! cmp -s "$req" "$build/bench-tools/.complete"; then
        rm -rf "$build/bench-tools"
        python3 -m pip install --quiet --no-deps --target "$build/bench-tools" -r "$req" >&2
        cp "$req" "$build/bench-tools/.complete"
      fi
    fi
    # redis-server, for the cluster bench's comparison of the engines' get
    # latency (docs/design.md 3.2): for this benchmark alone.
    if [[ $command == cluster ]] && ! has_arg --help "$@" && ! command -v redis-server >/dev/null; then
      $([[ $(id -u) == 0 ]] || echo sudo) apt-get install -y --no-install-recommends redis-server >&2
    fi
    if [[ $command == drift || $command == cluster ]] && ! has_arg --data "$@"; then
      need_built joaderfs-gendata  # it generates and caches its --images
    fi
    if [[ $command == scale ]] && ! has_arg --help "$@"; then
      # Its table is also kept as OUT/table.md (the last --out wins).
      need_built joaderfs-gendata
      out=$build/bench-out/scale
      prev=
      for a in "$@"; do
        [[ $prev == --out ]] && out=$a
        [[ $a == --out=* ]] && out=${a#--out=}
        prev=$a
      done
      mkdir -p "$out"
      "$python" -m "$module" "$@" --out "$out" | tee "$out/table.md"
      exit "${PIPESTATUS[0]}"
    fi
    exec "$python" -m "$module" "$@" ${extra[@]+"${extra[@]}"}
    ;;
  micro\ *)
    program=${how#micro }
    need_built "$program"
    if [[ $command == sample-cost ]] && [[ -z ${1:-} || ${1:-} == -* ]]; then
      need_built joaderfs-gendata
      mkdir -p "$build/bench-out/sample-cost-cache"
      set -- "$(dataset 200 10)" "$build/bench-out/sample-cost-cache" "$@"
    fi
    if [[ $command == disk-index ]] && [[ -z ${1:-} || ${1:-} == -* ]]; then
      mkdir -p "$build/bench-out/disk-index"
      set -- "$build/bench-data/placeholders-131072" "$build/bench-out/disk-index" "$@"
    fi
    exec "$build/$program" "$@"
    ;;
esac

# scenarios: the driver, its dataset and the cleanup of everything it started.
quick=0
out=
dataset=
driver_args=()
while (($#)); do
  case $1 in
    --quick) quick=1 ;;
    --out) out=$2; shift ;;
    --out=*) out=${1#--out=} ;;
    -h|--help) usage; exit 0 ;;
    --) shift; driver_args=("$@"); break ;;
    -*) echo "bench.sh: unknown option $1" >&2; exit 2 ;;
    *) dataset=$1 ;;
  esac
  shift
done

if ((setup)); then
  "$repo/scripts/setup.sh"
fi
need_built joaderfs joaderfs-gendata
if ! "$python" -c 'import torch, torchvision, PIL, numpy' 2>/dev/null; then
  echo "bench.sh: $python lacks torch/torchvision/PIL/numpy (scripts/setup.sh installs them)" >&2
  exit 1
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
  dataset=$(dataset "$images" "$classes")
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
"$python" -m bench.throughput.driver --data "$dataset" --joaderfs "$build/joaderfs" \
  --workdir "$work" --pidfile "$pidfile" --out "$out" "${mode_args[@]}" \
  ${driver_args[@]+"${driver_args[@]}"} &
driver_pid=$!
wait "$driver_pid"

#!/bin/bash
# Slurm prolog for joaderfs: makes the job's folder on this node's mount,
# $JOADERFS_MOUNT/jobs/slurm-$SLURM_JOB_ID, owned by the job's user, and
# writes $JOADERFS_SPEC to its spec when set. The job then reads
# $JOADERFS_MOUNT/jobs/slurm-$SLURM_JOB_ID/next (or next.R per rank).
#
# Two ways to run it (deploy/README.md):
#
#   slurm.conf: Prolog=/etc/slurm/joaderfs-prolog.sh   (slurmd, as root)
#               Epilog=/etc/slurm/joaderfs-epilog.sh
#               PrologFlags=Alloc   (run it at allocation, before any step)
#     A job belongs to the uid that made it (the daemon takes the uid the
#     kernel reports for the mkdir, and a job cannot be chowned), so as
#     root this makes the folder as $SLURM_JOB_USER through setpriv(1).
#     slurmd passes only Slurm's variables: JOADERFS_SPEC here is a site
#     default (set below or in the environment of slurmd); jobs with a spec
#     of their own write it themselves (echo ... > .../spec) before reading.
#
#   slurm.conf: TaskProlog=/etc/slurm/joaderfs-prolog.sh   (as the user)
#     Runs in each task's environment, so `sbatch --export=ALL,JOADERFS_SPEC=...`
#     reaches it; every task of a node runs it, and a second mkdir or the
#     same spec again is accepted. Its `export` line below sets
#     JOADERFS_JOB in the tasks' environment. Keep the Epilog as root: a
#     TaskEpilog would remove the job while other tasks still read it.
#
# Exit status: 0 when the folder is there (made now or before, by this
# user). Otherwise 1, and Slurm drains the node with "Prolog error": a
# node whose dataset mount is gone should not get jobs. Where only some
# jobs use joaderfs, set JOADERFS_OPTIONAL=1 to warn and go on instead.
set -uo pipefail
# slurmd gives prologs no search path.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export LC_ALL=C

: "${JOADERFS_MOUNT:=/mnt/imagenet}"
: "${JOADERFS_SPEC:=}"
: "${JOADERFS_OPTIONAL:=0}"

fail() {
  echo "joaderfs prolog: $*" >&2
  [ "$JOADERFS_OPTIONAL" = 1 ] && exit 0
  exit 1
}

[ -n "${SLURM_JOB_ID:-}" ] || fail "SLURM_JOB_ID is not set"
user=${SLURM_JOB_USER:-$(id -un)}
uid=${SLURM_JOB_UID:-$(id -u "$user" 2>/dev/null)} || fail "no user $user"
gid=${SLURM_JOB_GID:-$(id -g "$user" 2>/dev/null)} || fail "no user $user"
[ -f "$JOADERFS_MOUNT/stats" ] || fail "$JOADERFS_MOUNT is not a joaderfs mount (no stats file)"

job="$JOADERFS_MOUNT/jobs/slurm-$SLURM_JOB_ID"

# As the job's user: directly when this runs as that user (TaskProlog),
# through setpriv when root runs it for another user (Prolog).
as_user() {
  if [ "$(id -u)" = "$uid" ]; then
    "$@"
  else
    setpriv --reuid="$uid" --regid="$gid" --clear-groups -- "$@"
  fi
}

if ! err=$(as_user mkdir "$job" 2>&1); then
  # Made before (another task, a second run of the prolog): fine if it is
  # this user's.
  owner=$(stat -c %u "$job" 2>/dev/null) || fail "mkdir $job: $err"
  [ "$owner" = "$uid" ] || fail "$job exists and belongs to uid $owner, not $uid ($user)"
fi

if [ -n "$JOADERFS_SPEC" ]; then
  # One write, as the daemon reads a spec (a refusal's reason is in the
  # job's error file).
  if ! as_user sh -c 'printf "%s\n" "$1" > "$2/spec"' sh "$JOADERFS_SPEC" "$job" 2>/dev/null; then
    reason=$(cat "$job/error" 2>/dev/null)
    fail "spec \"$JOADERFS_SPEC\" refused for $job: ${reason:-see the log of the daemon}"
  fi
fi

# TaskProlog: "export NAME=VALUE" lines on stdout set the task's variables
# (the Prolog's stdout is discarded).
echo "export JOADERFS_JOB=$job"
exit 0

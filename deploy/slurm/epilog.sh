#!/bin/bash
# Slurm epilog for joaderfs: removes the job's folder that prolog.sh made,
# $JOADERFS_MOUNT/jobs/slurm-$SLURM_JOB_ID. slurm.conf:
#
#   Epilog=/etc/slurm/joaderfs-epilog.sh   (slurmd, as root, at job end)
#
# Root may remove any user's job. A job that is not there (never made, or
# removed already: a second run, the job's own rmdir) is fine, and so is a
# node without the mount (nothing to remove). Any other failure exits 1,
# which drains the node ("Epilog error"): the job would otherwise stay in
# the daemon's job store, counting against its user's max_jobs_per_user.
set -uo pipefail
# slurmd gives epilogs no search path; C messages to match below.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export LC_ALL=C

: "${JOADERFS_MOUNT:=/mnt/imagenet}"

if [ -z "${SLURM_JOB_ID:-}" ]; then
  echo "joaderfs epilog: SLURM_JOB_ID is not set" >&2
  exit 1
fi
if [ ! -f "$JOADERFS_MOUNT/stats" ]; then
  echo "joaderfs epilog: $JOADERFS_MOUNT is not a joaderfs mount; nothing removed" >&2
  exit 0
fi

job="$JOADERFS_MOUNT/jobs/slurm-$SLURM_JOB_ID"
if ! err=$(rmdir "$job" 2>&1); then
  case "$err" in
    *"No such file or directory"*) ;;  # ENOENT: gone already
    *)
      echo "joaderfs epilog: $err" >&2
      exit 1
      ;;
  esac
fi
exit 0

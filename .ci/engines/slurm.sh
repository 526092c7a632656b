#!/usr/bin/env bash
# Installs what the Slurm tests and benchmark need (Debian 12, root): the Slurm daemons and client commands
# (slurm-wlm: slurmctld, slurmd, sbatch, squeue, sacct, scancel, sinfo) and munge (Slurm's authentication),
# plus slurmdbd and MariaDB so that `sacct` works (the tests check the launcher's sacct path with them).
# Idempotent: installs only what is missing, starts nothing. The lab itself (private munged, slurmctld,
# slurmd, optional slurmdbd, on free ports with a config of its own, never /etc/slurm) is started and stopped
# by the tests (nnix.testing.slurm.SlurmLab); a temporary policy-rc.d keeps the packages from starting their
# own daemons while they install.
set -euo pipefail
if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
  echo "slurm.sh: needs root and apt-get (Debian/Ubuntu); the Slurm tests will skip loudly without Slurm" >&2
  exit 0
fi
want="slurm-wlm munge"
[ "${NNIX_SLURM_ACCOUNTING:-1}" = 1 ] && want="$want slurmdbd mariadb-server"
missing=""
for pkg in $want; do dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"; done
if [ -n "$missing" ]; then
  apt-get update -qq
  # policy-rc.d 101: no daemon is started by the packages' install scripts (the lab starts its own)
  restore=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && restore=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
  if [ -n "$restore" ]; then rm -f /usr/sbin/policy-rc.d; fi
fi
echo "slurm.sh: $(dpkg-query -W -f 'slurm-wlm ${Version}' slurm-wlm) ready (the tests start their own daemons)"

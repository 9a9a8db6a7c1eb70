# The partition check's `parse` container: Slurm's own parser on the configuration an
# upgrade would apply ($SLURM_CONF). Slurm gives a line number for some errors only (a
# partition's or node's option), so for each key it names the lines setting it are printed.
# slurmd reads cgroup.conf before anything else, so a refusal of it is its first fatal
# line; a cgroup.conf it accepts lets it go on to fail later for want of a key here, which
# says nothing about the file and is ignored.
cgroup=$(slurmd -G 2>&1 >/dev/null | grep -i -B5 'fatal:.*cgroup\.conf')
if [ -n "$cgroup" ]; then
  printf '%s\n' "$cgroup" >&2
  echo "the new cgroup.conf (slurm.cgroupConf) is refused by Slurm's parser (above); fix the values and upgrade again" >&2
  exit 1
fi
if said=$(scontrol show hostnames localhost 2>&1 >/dev/null); then
  echo "Slurm's parser accepts the new slurm.conf and cgroup.conf"
  exit 0
fi
printf '%s\n' "$said" >&2
keys=$(printf '%s\n' "$said" | sed -n -E \
  -e 's/.*unrecognized key: ([A-Za-z0-9_]+).*/\1/p' \
  -e 's/.*[Bb]ad value "[^"]*" for ([A-Za-z0-9_]+).*/\1/p' | sort -u)
for key in $keys; do
  grep -n -i -E "(^|[[:space:]])${key}=" "$SLURM_CONF" \
    | sed -E "s/^([0-9]+):/$(basename "$SLURM_CONF") line \1: ${key} is set here: /" >&2
done
echo "the new slurm.conf is refused by Slurm's parser (above); fix the values and upgrade again" >&2
exit 1

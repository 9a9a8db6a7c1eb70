# sunk: tells a person at login when their home will not follow them (sourced by login
# shells from /etc/profile.d on the login Pods; the chart's ConfigMap <release>-login-homes).
#
# Their home is missing (and why, when the login Pod's homes service said so), is not
# theirs, or is not on the shared volume mounted at /home, so that their jobs on the
# compute nodes would not find it: Slurm would start those jobs in /tmp, and a container
# step started from the home would fail. Said on stderr, once per login; says nothing
# when all is well, to root, or to system accounts.
sunk_home_conf="${SUNK_HOMES_CONF:-/etc/sunk/homes}"
sunk_home_status="${SUNK_HOMES_STATUS:-/run/sunk-homes}"
sunk_home_uid="$(id -u 2>/dev/null)"
sunk_home_why=""
if [ "${sunk_home_uid:-0}" -ge 1000 ] 2>/dev/null && [ -n "${HOME:-}" ]; then
    sunk_home_root="$(cat "$sunk_home_conf/shared-root" 2>/dev/null)"
    sunk_home_name="$(id -un 2>/dev/null)"
    if [ ! -d "$HOME" ]; then
        sunk_home_why="your home $HOME does not exist"
        if [ -s "$sunk_home_status/$sunk_home_name" ]; then
            sunk_home_why="$sunk_home_why: $(cat "$sunk_home_status/$sunk_home_name")"
        fi
    elif [ "$(stat -c %u "$HOME" 2>/dev/null)" != "$sunk_home_uid" ]; then
        sunk_home_why="your home $HOME is not yours: it belongs to uid $(stat -c %u "$HOME" 2>/dev/null)"
    elif [ -z "$sunk_home_root" ]; then
        sunk_home_why="your home $HOME is on this login Pod's own disk, not on a shared volume (none is mounted at /home): your jobs on the compute nodes will not find it"
    elif [ "${HOME%/*}" != "$sunk_home_root" ]; then
        sunk_home_why="your home $HOME is not on the shared volume mounted at $sunk_home_root: your jobs on the compute nodes will not find it"
    fi
    if [ -n "$sunk_home_why" ]; then
        printf 'sunk: %s.\n' "$sunk_home_why" >&2
        printf '%s\n' "sunk: Slurm starts jobs submitted from such a home in /tmp, and a container step started from it fails." \
            "sunk: Ask your cluster's administrators to fix it (they can read why in the login Pod's log: kubectl logs <login Pod> -c sshd)." >&2
    fi
fi
unset sunk_home_conf sunk_home_status sunk_home_uid sunk_home_why sunk_home_root sunk_home_name

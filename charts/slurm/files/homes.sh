#!/bin/sh
# sunk-homes ROOT PASSWD STATUS [--once]
#
# Makes each person's home, once, on the shared volume mounted at ROOT (/home), and keeps
# that volume's root closed to people. The chart runs it as root in the login Pod's sshd
# container, under s6, when a writable sharedVolumes entry is mounted at /home and the
# people come from a directory; the slurmd Pods mount the same volume and make nothing.
#
#   ROOT    where the shared volume that holds the homes is mounted (/home)
#   PASSWD  the people's passwd lines (the operator's people ConfigMap, as the login Pod
#           mounts it: /var/lib/extrausers/passwd)
#   STATUS  a directory with one file per person whose home is not right, saying why; the
#           login notice (home-notice.sh, in /etc/profile.d) shows it to them at login
#
# Each pass:
# - ROOT is made root:root, mode 0755 (many provisioners, the dev cluster's too, make a
#   volume's root writable by everyone): nobody but root may then make, rename or remove a
#   home in it, so nobody can make another person's home before them or move it away.
# - A person whose home is ROOT/<one name> and does not exist gets it: made by root with
#   mode 0700, /etc/skel's files copied in (as pam_mkhomedir would), then handed to them
#   (their uid and primary gid), still 0700. A home that exists is never touched, nor is
#   anything in it: a person's files stay as they left them, and so does a removed
#   person's home.
# - A home that could not be made, is not a directory, or is not its person's is said in
#   the container's log (once, when that changes) and in STATUS/<name>.
# A pass runs at start, whenever PASSWD changes (the kubelet brings the operator's
# changes within about a minute) and every SUNK_HOMES_FULL_S seconds (300); pam_mkhomedir
# still makes the home of a person who logs in before the pass that would have.
set -u

if [ "$#" -lt 3 ]; then
    echo "usage: homes.sh ROOT PASSWD STATUS [--once]" >&2
    exit 2
fi
root="$1"
passwd="$2"
status="$3"
once="${4:-}"
skel="${SUNK_HOMES_SKEL:-/etc/skel}"
tick="${SUNK_HOMES_TICK_S:-10}"
full="${SUNK_HOMES_FULL_S:-300}"

say() { printf 'sunk-homes: %s\n' "$*" >&2; }

# ROOT root's and not writable by others. Says what it changed, or that it could not.
close_root() {
    if [ ! -d "$root" ] || [ -L "$root" ]; then
        say "$root is not a directory: no homes are made"
        return 1
    fi
    was="$(stat -c '%u:%g %a' "$root")"
    [ "$was" = "0:0 755" ] && return 0
    if chown 0:0 "$root" 2>/dev/null && chmod 0755 "$root" 2>/dev/null; then
        say "$root was owned by $was (uid:gid mode); now 0:0 755, so only root makes homes in it"
    else
        say "could not make $root root's with mode 0755 (it is $was): people may make or rename homes in it"
    fi
    return 0
}

# What is wrong with the home of NAME (UID:GID, HOME), made first if it is missing; nothing
# when it is right (or not on ROOT, which the login notice tells its person about).
problem_of() {
    name="$1" uid="$2" gid="$3" home="$4"
    case "$home" in
    "$root"/*) rest="${home#"$root"/}" ;;
    *) return 0 ;;
    esac
    case "$rest" in
    "" | . | .. | */*)
        echo "$home is not one directory directly under $root: it is not made"
        return 0
        ;;
    esac
    if [ ! -e "$home" ] && [ ! -L "$home" ]; then
        if ! said="$(mkdir -m 0700 -- "$home" 2>&1)"; then
            # Made by pam_mkhomedir meanwhile (a login), or not makeable at all.
            if [ ! -d "$home" ]; then
                echo "$home could not be made: ${said#mkdir: }"
                return 0
            fi
        else
            if [ -d "$skel" ]; then
                cp -R -p -- "$skel"/. "$home"/ 2>/dev/null || :
            fi
            if ! said="$(chown -R -P -- "$uid:$gid" "$home" 2>&1 && chmod 0700 -- "$home" 2>&1)"; then
                echo "$home was made but could not be given to $uid:$gid: $said"
                return 0
            fi
            say "made $home for $name ($uid:$gid, mode 0700)"
            return 0
        fi
    fi
    if [ -L "$home" ] || [ ! -d "$home" ]; then
        echo "$home is in the way: it is not a directory"
        return 0
    fi
    owner="$(stat -c %u "$home")"
    if [ "$owner" != "$uid" ]; then
        echo "$home belongs to uid $owner, not to $name (uid $uid)"
    fi
    return 0
}

# One pass over the people: their homes, and STATUS as it is now.
pass() {
    close_root || return 0
    mkdir -p -m 0755 "$status"
    wrong=" "
    if [ -r "$passwd" ]; then
        while IFS=: read -r name _ uid gid _ home _ || [ -n "$name" ]; do
            case "$name" in "" | *[!A-Za-z0-9._-]* | -*) continue ;; esac
            case "$uid$gid" in "" | *[!0-9]*) continue ;; esac
            # The operator writes no system IDs; a line that has one is not a person's.
            [ "$uid" -ge 1000 ] && [ "$gid" -ge 1000 ] || continue
            why="$(problem_of "$name" "$uid" "$gid" "$home")"
            [ -n "$why" ] || continue
            wrong="$wrong$name "
            if [ "$(cat "$status/$name" 2>/dev/null)" != "$why" ]; then
                say "$name: $why"
                printf '%s\n' "$why" >"$status/$name.new" && mv -f "$status/$name.new" "$status/$name"
            fi
        done <"$passwd"
    fi
    for file in "$status"/*; do
        [ -f "$file" ] || continue
        name="${file##*/}"
        case "$wrong" in
        *" $name "*) ;;
        *)
            rm -f -- "$file"
            case "$name" in *.new) ;; *) say "$name: nothing is wrong with their home now (or they are gone)" ;; esac
            ;;
        esac
    done
}

last=""
since=0
while :; do
    sum=none
    if [ -r "$passwd" ]; then sum="$(cksum <"$passwd")"; fi
    if [ "$sum" != "$last" ] || [ "$since" -ge "$full" ]; then
        pass
        last="$sum"
        since=0
    fi
    [ "$once" = "--once" ] && exit 0
    sleep "$tick"
    since=$((since + tick))
done

#!/bin/bash
# The compose healthcheck: exit 0 iff GET /_gym_compose/ready on 127.0.0.1:PORT answers 200.
#
#   healthcheck.sh [--wait SECONDS] [--steady SECONDS] [--root] PORT
#
# Docker runs this in every container for the stack's whole life, so it starts no interpreter:
# bash's own /dev/tcp speaks the one HTTP/1.0 request (healthcheck.py, the same probe in Python,
# costs ~15 ms of CPU per run; this costs ~1 ms; the engine's exec around either costs more).
# --wait: keep asking every 50 ms for up to SECONDS (whole seconds), so the container turns
#   healthy the moment the server is ready rather than at Docker's next `interval`. The pauses
#   are bash's own `read -t` on a pipe nobody writes, not /bin/sleep: a `sleep` process every
#   50 ms cost ~3 ms of CPU each (~60 ms a second per waiting container) while the servers start.
# --steady: once a check has passed, each later check first sleeps SECONDS. Docker starts the
#   next check `interval` after the last one ended, so a short interval (a fast start) turns into
#   a long one (almost no idle CPU) once healthy, on every engine: Engine < 25 has no
#   `start_interval`. A sleeping check costs no CPU; a server that exits ends its container anyway.
# --root: servers on the NeMo Gym runtime have no gym-compose route; any HTTP answer on `/` counts
#   (NeMo Gym's own readiness step 1).
set -u
wait_s=0 steady_s=0 path=/_gym_compose/ready any_status=
while [ $# -gt 1 ]; do
    case $1 in
        --wait) wait_s=$2; shift 2 ;;
        --steady) steady_s=$2; shift 2 ;;
        --root) path=/ any_status=1; shift ;;
        *) break ;;
    esac
done
case ${1:-} in
    '' | *[!0-9]*) echo "usage: healthcheck.sh [--wait SECONDS] [--steady SECONDS] [--root] PORT" >&2; exit 2 ;;
esac
port=$1
passed_marker=/tmp/.gym-compose-healthy-$port

nap_fd=
nap() {  # sleep $1 seconds without starting a process (one subshell for the pipe, the first time)
    [ -n "$nap_fd" ] || exec {nap_fd}<> <(:)
    read -r -t "$1" -u "$nap_fd" _ || :
}

answer="no answer (connection refused)"
ready() {  # one GET of the readiness route; on failure $answer says what came back
    local status= line
    { printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$path" >&3 &&
        read -r -t 3 _ status _ <&3 || return 1
        { [ "$status" = 200 ] || [ -n "$any_status" ]; } && [ -n "$status" ] && return 0
        answer="status $status"
        while read -r -t 1 line <&3 || [ -n "$line" ]; do  # the body's last line: the reason
            line=${line%$'\r'}
            [ -z "$line" ] || answer="status $status: $line"
            line=
        done
        return 1
    } 2>/dev/null 3<>"/dev/tcp/127.0.0.1/$port"
}

if [ "$steady_s" != 0 ] && [ -e "$passed_marker" ]; then
    nap "$steady_s"
fi
polls_left=$((wait_s * 20))
until ready; do
    if [ "$polls_left" -le 0 ]; then
        echo "not ready: GET $path on port $port: $answer"
        exit 1
    fi
    polls_left=$((polls_left - 1))
    nap 0.05
done
[ "$steady_s" = 0 ] || : 2>/dev/null >"$passed_marker"
exit 0

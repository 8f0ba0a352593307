# ascend-fleet npu-sim: one data-parallel instance over several hosts, sourced by `vllm` when
# --data-parallel-size exceeds --data-parallel-size-local (some of its engines run on other hosts).
#
# As vLLM v0.20.2 does it (file and function named at each step):
#   - the leader (no --headless) binds the handshake on --data-parallel-address:--data-parallel-rpc-port
#     before it starts an engine (vllm/v1/engine/utils.py `launch_core_engines`), runs its local ranks,
#     waits until every remote rank said HELLO and READY (`wait_for_engine_startup`, no timeout of its
#     own; its API servers give up after VLLM_ENGINE_READY_TIMEOUT_S, v1/engine/core_client.py), closes
#     the handshake and serves;
#   - a follower (--headless) starts one engine per local rank, from --data-parallel-start-rank
#     (entrypoints/cli/serve.py `run_headless`); each connects to the leader, says HELLO and waits
#     HANDSHAKE_TIMEOUT_MINS for the answer (v1/engine/core.py `startup_handshake`) before it loads
#     anything, and says READY once loaded. An engine that fails ends the follower
#     (`CoreEngineProcManager.monitor_engine_liveness`), which then returns normally: exit 0.
# The wire is one text line each way (sim/npu-sim/dp-session), not ZMQ; the words printed are vLLM's.
# What the source leaves open (a member vanishing after the group serves) is sim/README.md's
# "Multi-host groups".

DP_STATE=/tmp/npu-sim-dp
ENGINES=""
LISTENER=""
# vLLM's HANDSHAKE_TIMEOUT_MINS (v1/engine/core.py) is a constant, 5; a test shortens it here.
HANDSHAKE_MINS=${NPU_SIM_HANDSHAKE_TIMEOUT_MINS:-5}

now() { date +%s; }

# The checks vLLM makes of the flags before it starts anything.
dp_check() {
    for v in "$DP_SIZE" "$DP_LOCAL" "${DP_START:-0}" "$DP_RPC_PORT"; do
        case $v in '' | *[!0-9]*) die arg_utils.py "argument: invalid int value: '$v'" ;; esac
    done
    # vllm/config/parallel.py `ParallelConfig.__post_init__`
    [ "$DP_LOCAL" -le "$DP_SIZE" ] ||
        die parallel.py "ValueError: data_parallel_size_local ($DP_LOCAL) must be <= data_parallel_size ($DP_SIZE)"
    DP_RANK=${DP_START:-0}
    [ "$DP_RANK" -lt "$DP_SIZE" ] ||
        die parallel.py "ValueError: data_parallel_rank ($DP_RANK) must be in the range [0, $DP_SIZE)"
    if [ -n "$HEADLESS" ]; then
        # entrypoints/cli/serve.py `run_headless`
        [ "$DP_LOCAL" -gt 0 ] || die serve.py "ValueError: data_parallel_size_local must be > 0 in headless mode"
    elif [ "$DP_RANK" -gt 0 ]; then
        die npu-sim "--data-parallel-start-rank without --headless is vLLM's hybrid load balancing (a front-end per host): not simulated"
    fi
    rm -rf "$DP_STATE"
    mkdir -p "$DP_STATE"
}

# ---- the leader ---------------------------------------------------------------------------------

# The handshake socket: pyzmq's words for a failed bind (zmq/sugar/socket.py `bind` adds the address).
dp_listen() {
    addr="tcp://$DP_ADDRESS:$DP_RPC_PORT"
    is_host_address "$DP_ADDRESS" || die utils.py "zmq.error.ZMQError: Cannot assign requested address (addr='$addr')"
    export NPU_SIM_DP_STATE=$DP_STATE NPU_SIM_DP_SIZE=$DP_SIZE NPU_SIM_DP_LOCAL=$DP_LOCAL
    hold_port "$DP_ADDRESS" "$DP_RPC_PORT" /usr/local/lib/npu-sim/dp-session ||
        die utils.py "zmq.error.ZMQError: Address already in use (addr='$addr')"
    LISTENER=$HOLD_PID
    info utils.py "data parallel handshake on $addr: waiting for ranks $DP_LOCAL..$((DP_SIZE - 1)) of $DP_SIZE"
}

# wait_for_engine_startup: every remote rank READY, or the RuntimeError a session wrote, or the API
# servers' timeout (which the stand-in ends on; sim/README.md).
dp_wait_for_engines() {
    remote=$((DP_SIZE - DP_LOCAL))
    limit=${VLLM_ENGINE_READY_TIMEOUT_S:-600}
    deadline=$(($(now) + limit))
    while :; do
        [ ! -f "$DP_STATE/fatal" ] || die utils.py "$(cat "$DP_STATE/fatal")"
        ready=$(cat "$DP_STATE"/state-* 2>/dev/null | grep -c '^READY$')
        [ "$ready" -lt "$remote" ] || break
        if [ "$(now)" -ge "$deadline" ]; then
            die core_client.py "TimeoutError: Timed out waiting for engine core processes to start. This is often caused by slow weight loading for large models. Waited ${limit}s (configured by VLLM_ENGINE_READY_TIMEOUT_S). To increase the timeout, set the environment variable: VLLM_ENGINE_READY_TIMEOUT_S=<seconds>"
        fi
        sleep 0.2 &
        wait $!
    done
    # launch_core_engines' zmq_socket_ctx closes the handshake socket once startup is over: a rank
    # that starts again later finds no one to answer it.
    kill "$LISTENER" 2>/dev/null
    info utils.py "$((DP_LOCAL + ready)) of $DP_SIZE data parallel ranks ready"
}

# A rank whose connection closed after it was READY, if any.
dp_dropped() {
    for f in "$DP_STATE"/dropped-*; do
        [ -e "$f" ] || continue
        echo "${f##*-}"
        return 0
    done
    return 1
}

# ---- a follower ---------------------------------------------------------------------------------

engine_log() { echo "(EngineCore_DP$1 pid=$$) $2 $(ts) [$3] $4" >&2; }

# dp_engine RANK: one engine core's handshake with the leader, in a process of its own as vLLM's
# EngineCore_DP<rank>: HELLO until INIT comes or HANDSHAKE_TIMEOUT_MINS end (the connection is retried
# as a ZMQ DEALER reconnects), READY once the member is loaded, then hold the connection until the
# leader's end closes.
dp_engine() {
    r=$1
    d=$DP_STATE/engine-$r
    mkdir -p "$d"
    trap 'kill $(cat "$d/nc.pid" 2>/dev/null) 2>/dev/null; exit 0' TERM INT
    trap - EXIT
    trap '' PIPE # a HELLO to an nc that could not connect fails here, not the engine
    deadline=$(awk -v m="$HANDSHAKE_MINS" -v t="$(now)" 'BEGIN { printf "%d", t + m * 60 }')
    while :; do
        rm -f "$d/to" "$d/from"
        mkfifo "$d/to" "$d/from"
        nc "$DP_ADDRESS" "$DP_RPC_PORT" < "$d/to" > "$d/from" 2>/dev/null &
        echo $! > "$d/nc.pid"
        exec 3> "$d/to" 4< "$d/from"
        echo "HELLO $r remote headless" >&3 2>/dev/null
        left=$((deadline - $(now)))
        [ "$left" -gt 0 ] || left=1
        if read -r -t "$left" reply <&4 && [ "$reply" = INIT ]; then
            break
        fi
        exec 3>&- 4<&-
        kill "$(cat "$d/nc.pid")" 2>/dev/null
        if [ "$(now)" -ge "$deadline" ]; then
            engine_log "$r" ERROR core.py:1136 "EngineCore failed to start."
            engine_log "$r" ERROR core.py:1136 "RuntimeError: Did not receive response from front-end process within $HANDSHAKE_MINS minutes"
            exit 1
        fi
        sleep 1
    done
    : > "$d/init"
    until [ -e "$DP_STATE/ready" ]; do
        sleep 0.2
    done
    echo "READY $r" >&3 2>/dev/null
    cat <&4 > /dev/null
    engine_log "$r" ERROR npu-sim "the leader's end of the data parallel connection closed"
    exit 1
}

# run_headless returns once an engine is gone: the follower exits 0.
dp_shutdown() {
    info serve.py "Shutting down."
    release
    exit 0
}

dp_engines_alive() {
    for e in $ENGINES; do
        kill -0 "$e" 2>/dev/null || return 1
    done
}

# Every local engine handshaken (INIT received), or the follower shut down when one failed.
dp_join() {
    info serve.py "Launching $DP_LOCAL data parallel engine(s) in headless mode, with head node address tcp://$DP_ADDRESS:$DP_RPC_PORT."
    r=$DP_RANK
    while [ "$r" -lt $((DP_RANK + DP_LOCAL)) ]; do
        dp_engine "$r" &
        ENGINES="$ENGINES $!"
        r=$((r + 1))
    done
    r=$DP_RANK
    while [ "$r" -lt $((DP_RANK + DP_LOCAL)) ]; do
        until [ -e "$DP_STATE/engine-$r/init" ]; do
            dp_engines_alive || dp_shutdown
            sleep 0.2 &
            wait $!
        done
        r=$((r + 1))
    done
}

# Loaded: every engine says READY, then the follower lives until one of them is gone.
dp_serve_headless() {
    : > "$DP_STATE/ready"
    info serve.py "data parallel ranks $DP_RANK..$((DP_RANK + DP_LOCAL - 1)) ready; no API server in headless mode"
    while dp_engines_alive; do
        sleep 0.5 &
        wait $!
    done
    dp_shutdown
}

# ascend-fleet npu-sim: a decoder's pull of one request's KV blocks from its prefiller, sourced by `api`.
#
# kv_pull: every TP rank of this decoder pulls from the prefiller's handshake ports that
# `_get_remote_ranks_for_req` names (mooncake_connector.py at v0.20.2rc1): rank r from remote_port + r
# when both roles have the same TP, from its group of remote_ptp_size / TP ranks when the prefiller's
# is larger. Per port, as KVCacheRecvingThread `_handle_request` and `_transfer_kv_cache` do: the
# metadata (GET_META), the read (READ), and always the done signal (DONE_RECVING). Sets PULLED to the
# tokens read, or logs the connector's exception and returns 1.
#
# What a pull meets, each from its source:
#   - the remote engine id equal to its own: `_get_remote_metadata` asserts
#     "Conflict engine id X with local engine id X.";
#   - a handshake port in AscendDirectTransport's random range [20000, 20000 + NPUs x 1000) (vllm-ascend
#     PR 6455; the multi-node tutorial's "kv_port Configuration Guide"): the transport's port, taken at
#     random in that range, is one the prefiller's kv_port block holds, and the read fails
#     (`batch_transfer_sync_read` < 0: "Mooncake transfer failed, ret: ..."). The real clash is
#     intermittent; the stand-in makes every such read fail, naming a port of the block taken at random;
#   - no /etc/hccn.conf in this container (vllm-ascend issue 7711): the transport cannot find the NPU's
#     device IP, HCCL's plog says "[RanktablCheck] 'device ip' is not set correctly", vLLM logs nothing,
#     and the blocks read are wrong: the first token is wrong and repeats.
# Not the connector's: the wire (a text line over busybox `nc` to the port, sim/npu-sim/kv-session).

NPUS=${NPU_SIM_CARDS:-8}
RANDOM_PORTS_END=$((20000 + NPUS * 1000))
PLOG=/root/ascend/log/debug/plog/plog-$$.log

# kv_ask HOST PORT LINE: the prefiller's one-line answer, empty when no one answers (a ZMQ REQ would
# time out: ensure_zmq_recv's "Failed to receive data after 3 retries: Receive timeout").
kv_ask() {
    printf '%s\n' "$3" | timeout 5 nc "$1" "$2" 2>/dev/null | head -n 1
}

# kv_failed CLASS MESSAGE: the connector's logger.exception for a failed transfer (`_handle_request`),
# its traceback's last line; the request then fails.
kv_failed() {
    echo "ERROR $(ts) [mooncake_connector.py:495] Failed to transfer KV cache for request $remote_request: $2" >&2
    echo "$1: $2" >&2
}

kv_pull_port() {
    port=$1
    meta=$(kv_ask "$remote_host" "$port" GET_META)
    set -- $meta
    if [ "${1:-}" != META ]; then
        kv_failed RuntimeError "Failed to receive data after 3 retries: Receive timeout"
        return 1
    fi
    engine=$2
    te_port=$3
    if [ "$engine" = "$NPU_SIM_ENGINE_ID" ]; then
        kv_failed AssertionError "Conflict engine id $engine with local engine id $NPU_SIM_ENGINE_ID."
        kv_ask "$remote_host" "$port" "DONE_RECVING $remote_request" > /dev/null
        return 1
    fi
    if [ "$port" -ge 20000 ] && [ "$port" -lt "$RANDOM_PORTS_END" ]; then
        taken=$(awk -v lo="$remote_port" -v n="$remote_tp" -v end="$RANDOM_PORTS_END" -v seed="$$" \
            'BEGIN { srand(seed); c = 0; for (p = lo; p < lo + n; p++) if (p >= 20000 && p < end) ports[c++] = p; print ports[int(rand() * c)] }')
        error mooncake_connector.py "Mooncake transfer failed for request $remote_request"
        error npu-sim "AscendDirectTransport took port $taken at random in [20000, $RANDOM_PORTS_END) for this read, and the kv_port block of $engine holds it ($remote_host:$remote_port-$((remote_port + remote_tp - 1))): move kv_port out of that range (>= $RANDOM_PORTS_END)"
        kv_failed RuntimeError "Mooncake transfer failed, ret: -1"
        kv_ask "$remote_host" "$port" "DONE_RECVING $remote_request" > /dev/null
        return 1
    fi
    read_back=$(kv_ask "$remote_host" "$port" "READ $remote_request")
    kv_ask "$remote_host" "$port" "DONE_RECVING $remote_request" > /dev/null
    PULLED=${read_back#KV }
    if [ ! -f /etc/hccn.conf ]; then
        mkdir -p "${PLOG%/*}"
        echo "[ERROR] HCCL($$,python):$(date '+%Y-%m-%d-%H:%M:%S.000.000') [RanktablCheck] 'device ip' is not set correctly, must be set when multi Server or HCCL INTRA ROCE ENABLE enabled" >> "$PLOG"
        PULLED="!"
    fi
    info mooncake_connector.py "KV cache transfer for request $remote_request took 1.00 ms (1 groups, $blocks blocks). local_ip $NPU_SIM_KV_HOST local_device_id $rank remote_session_id $remote_host:$te_port" >&2
}

kv_pull() {
    PULLED=""
    group=$((remote_tp / NPU_SIM_TP))
    [ "$group" -ge 1 ] || group=1
    rank=0
    while [ "$rank" -lt "$NPU_SIM_TP" ]; do
        i=0
        while [ "$i" -lt "$group" ]; do
            kv_pull_port $((remote_port + rank * group + i)) || return 1
            i=$((i + 1))
        done
        rank=$((rank + 1))
    done
}

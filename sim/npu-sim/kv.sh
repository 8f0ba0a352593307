# ascend-fleet npu-sim: vllm-ascend v0.20.2rc1's Mooncake connector (MooncakeConnectorV1), sourced by
# `vllm` (an instance given --kv-transfer-config) and by `api` (its API server's handler of one request).
#
# What it does as the connector does (vllm_ascend/distributed/kv_transfer/kv_p2p/mooncake_connector.py
# at v0.20.2rc1, function named at each step; sim/README.md "Prefill and decode"):
#   - a kv_producer's workers each bind a ZMQ ROUTER on get_ip():kv_port + device_index, device_index
#     being the TP rank with data parallel rank 0 and PP = PCP = 1 (KVCacheSendingThread.run); a port
#     taken fails the thread and the worker (register_kv_caches);
#   - a kv_consumer binds no handshake port: its KVCacheRecvingThread connects to the prefiller's
#     (_get_remote_metadata, _send_done_recv_signal) and reads the KV blocks through the transfer engine.
# The wire is one text line each way over busybox `nc` (sim/npu-sim/kv-session), not ZMQ and RDMA:
#   GET_META -> META <engine_id> <te_rpc_port>   READ <request id> -> KV <tokens>   DONE_RECVING <id> -> ACK

# A top-level string or number of the JSON config $KV_CONFIG (the plan writes flat keys once each).
kv_value() {
    printf '%s' "$KV_CONFIG" | sed -n "s/.*\"$1\"[[:space:]]*:[[:space:]]*\"\{0,1\}\([^\",}]*\)\"\{0,1\}.*/\1/p" | head -n 1
}

# SIZE of kv_connector_extra_config's ROLE object ("prefill" or "decode"), empty when absent.
kv_extra() {
    printf '%s' "$KV_CONFIG" | sed -n "s/.*\"$1\"[[:space:]]*:[[:space:]]*{\([^}]*\)}.*/\1/p" |
        sed -n "s/.*\"$2\"[[:space:]]*:[[:space:]]*\([0-9]*\).*/\1/p"
}

# The address the connector binds and hands out: vLLM's get_ip() (vllm/utils/network_utils.py) takes
# VLLM_HOST_IP, else the host's own address (here the simulated host's, host-net.sh).
kv_host() {
    if [ -n "${VLLM_HOST_IP:-}" ]; then
        echo "$VLLM_HOST_IP"
    else
        set -- $(host_addresses)
        echo "$1"
    fi
}

# kv_parse: the settings of --kv-transfer-config, checked as vLLM's KVTransferConfig checks them at start
# (vllm/config/kv_transfer.py `__post_init__`: the role; engine_id a fresh uuid4 when none is given;
# kv_port 14579 by default).
kv_parse() {
    KV_CONNECTOR=$(kv_value kv_connector)
    KV_ROLE=$(kv_value kv_role)
    KV_PORT=$(kv_value kv_port)
    ENGINE_ID=$(kv_value engine_id)
    [ -n "$KV_PORT" ] || KV_PORT=14579
    [ -n "$ENGINE_ID" ] || ENGINE_ID=$(cat /proc/sys/kernel/random/uuid)
    case $KV_ROLE in
        kv_producer | kv_consumer) ;;
        kv_both) die npu-sim "kv_role kv_both is not simulated (a prefiller is kv_producer, a decoder kv_consumer)" ;;
        *) die kv_transfer.py "ValueError: Unsupported kv_role: $KV_ROLE. Supported roles are ['kv_producer', 'kv_consumer', 'kv_both']" ;;
    esac
    [ "$KV_CONNECTOR" = MooncakeConnectorV1 ] || die npu-sim "kv_connector $KV_CONNECTOR is not simulated (only MooncakeConnectorV1)"
    case $KV_PORT in *[!0-9]*) die kv_transfer.py "kv_port: Input should be a valid integer, got '$KV_PORT'" ;; esac
    KV_HOST=$(kv_host)
    KV_DIR=/tmp/npu-sim-kv
    export NPU_SIM_KV_ROLE=$KV_ROLE NPU_SIM_ENGINE_ID=$ENGINE_ID NPU_SIM_KV_HOST=$KV_HOST NPU_SIM_KV_PORT=$KV_PORT \
        NPU_SIM_KV_DIR=$KV_DIR NPU_SIM_TP=$TP NPU_SIM_SERVED=$SERVED NPU_SIM_MODEL=$MODEL \
        NPU_SIM_MAX_MODEL_LEN=${MAX_MODEL_LEN:-null} NPU_SIM_CLAIMS=$CLAIMS
}

# kv_start: the connector's worker side once the KV cache is allocated (MooncakeConnectorWorker
# `__init__`, `_get_prefill_decode_size`, `register_kv_caches`); exits the way the connector fails.
kv_start() {
    P_TP=$(kv_extra prefill tp_size)
    D_TP=$(kv_extra decode tp_size)
    # `_get_prefill_decode_size` asserts each key (a bare AssertionError).
    for v in "$P_TP" "$(kv_extra prefill dp_size)" "$D_TP" "$(kv_extra decode dp_size)"; do
        [ -n "$v" ] || die mooncake_connector.py "AssertionError"
    done
    [ "$P_TP" -ge "$D_TP" ] ||
        die mooncake_connector.py "ValueError: prefill_tp_size: $P_TP must be greater than or equal to the decode_tp_size: $D_TP"
    # The transfer engine's RPC port (MooncakeAgentMetadata.te_rpc_port), which AscendDirectTransport
    # takes at random in its range: only named in the metadata here, nothing listens on it.
    export NPU_SIM_PREFILL_TP=$P_TP NPU_SIM_DECODE_TP=$D_TP NPU_SIM_TE_RPC_PORT=$((20000 + RANDOM % (${NPU_SIM_CARDS:-8} * 1000)))
    info mooncake_connector.py "Initializing Mooncake Scheduler $ENGINE_ID"
    [ "$KV_ROLE" = kv_producer ] || return 0
    mkdir -p "$KV_DIR"
    r=0
    while [ "$r" -lt "$TP" ]; do
        port=$((KV_PORT + r))
        path="tcp://$KV_HOST:$port"
        logged "$(process "$r")" mooncake_connector.py:241 "Starting listening on path: $path"
        mkdir -p "$KV_DIR/$port"
        # The session serves this rank's port: its KV blocks are its own folder's.
        export NPU_SIM_KV_RANK_DIR=$KV_DIR/$port
        if ! hold_port "$KV_HOST" "$port" /usr/local/lib/npu-sim/kv-session; then
            # pyzmq's words for the failed bind (zmq/sugar/socket.py `bind` adds the address), logged by
            # the thread's `logger.exception`; register_kv_caches then finds the thread dead.
            echo "($(process "$r")) ERROR $(ts) [mooncake_connector.py:246] Mooncake KVCacheSendingThread exception: Address already in use (addr='$path')" >&2
            echo "zmq.error.ZMQError: Address already in use (addr='$path')" >&2
            die mooncake_connector.py "RuntimeError: KV Cache sending/receiving thread failed to start."
        fi
        r=$((r + 1))
    done
}

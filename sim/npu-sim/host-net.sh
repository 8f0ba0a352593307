# ascend-fleet npu-sim: what a rank binds on the host network, sourced by `vllm`: the simulated host's
# own address, a port held on it, and HCCL's host-side listening port.
#
# With HCCL_IF_IP set (a multi-host member on the host network; vllm-ascend's multi-node recipes set
# it to the host's own address), every rank listens on HCCL_IF_IP for its communicators' root-info
# exchange. Which port (hicann/hccl docs/zh/user_guide/hccl_env/):
#   - HCCL_HOST_SOCKET_PORT_RANGE, when set, wins over HCCL_IF_BASE_PORT (HCCL_HOST_SOCKET_PORT_RANGE.md);
#     each process takes the first port of the range it can listen on (hcomm
#     `PreemptPortManager::PreemptPortInRange`), so a range holds one process per port;
#   - else HCCL_IF_BASE_PORT (default 60000, 32 ports from it, HCCL_IF_BASE_PORT.md), the rank on
#     physical card N on base + N (vllm-ascend PR 12303: the ports HCCL computes from the base pass
#     65535 with non-zero-based physical device ids).
# The port is held for the life of the rank by a busybox `nc` listening on HCCL_IF_IP only, so on the
# simulated hosts (one kernel, one 127.0.1.K per host, sim/fleet.py) a port taken on one host's
# address clashes there and not on another's. Without HCCL_IF_IP, HCCL picks the NIC itself; in a
# bridged single-host container that is the container's own network, where nothing else binds: not
# simulated (single-host services are unchanged).

HELD=""

# The simulated host's own addresses: the `address` file SimFleet writes next to the host's card state
# (sim/fleet.py ADDRESS_FILE); without one this is the SimHost itself, whose sshd listens on 127.0.0.1.
host_addresses() {
    if [ -f "$CLAIMS/address" ]; then
        echo $(cat "$CLAIMS/address")
    else
        echo 127.0.0.1
    fi
}

is_host_address() {
    case " $(host_addresses) " in *" $1 "*) return 0 ;; esac
    return 1
}

# /proc/net/tcp's local_address of ADDR:PORT (little-endian hex IPv4, as x86 and arm64 Linux print it).
proc_net_address() {
    echo "$1" | awk -F. -v p="$2" '{ printf "%02X%02X%02X%02X:%04X", $4, $3, $2, $1, p }'
}

# hold_port ADDR PORT PROG: listen on ADDR:PORT for as long as this rank lives (PROG answers each
# connection); 0 and HOLD_PID set when it listens, 1 when the bind fails. It waits for the one of two
# outcomes that comes: `nc` exits (bind failed: "nc: bind: Address in use") or a listening socket of
# its own appears in /proc/net/tcp (this container shares the host's network namespace).
hold_port() {
    nc -ll -p "$2" "$1" -e "$3" 2>/dev/null &
    HOLD_PID=$!
    want=$(proc_net_address "$1" "$2")
    while kill -0 "$HOLD_PID" 2>/dev/null; do
        inodes=$(ls -l "/proc/$HOLD_PID/fd" 2>/dev/null | sed -n 's/.*socket:\[\([0-9]*\)\].*/\1/p' | tr '\n' ' ')
        if [ -n "$inodes" ] && awk -v a="$want" -v i=" $inodes" \
            '$2 == a && $4 == "0A" && index(i, " " $10 " ") { found = 1 } END { exit !found }' /proc/net/tcp; then
            HELD="$HELD $HOLD_PID"
            return 0
        fi
        sleep 0.05
    done
    wait "$HOLD_PID" 2>/dev/null
    return 1
}

release_held() {
    for h in $HELD; do
        kill "$h" 2>/dev/null
    done
    HELD=""
}

hccl_log() { echo "[ERROR] HCCL($$,python):$(date '+%Y-%m-%d-%H:%M:%S.000.000') $1" >&2; }

# EI0019 as HCCL reports it (hicann/hccl docs/zh/user_guide/fault_diagnosis/cluster_info_nego.md;
# hcomm docs/en/error_codes/EI0019-Communication_Error_Bind_IP_Port.md; vllm-ascend PR 16205).
ei0019() {
    echo "[PID: $$] $(date '+%Y-%m-%d-%H:%M:%S.000.000') Communication_Error_Bind_IP_Port(EI0019): Failed to enable listening for the host network adapter socket.Reason: The IP address $1 and port $2 have already been bound." >&2
}

# check_hccl_if_ip: HCCL_IF_IP is "ip[%ifname]" (hcomm EI0001's text, as HCCL printed it for
# HCCL_IF_IP=localhost) and must be an address of this host.
check_hccl_if_ip() {
    HCCL_IP=${HCCL_IF_IP%%%*}
    if ! echo "$HCCL_IP" | awk -F. 'NF == 4 { for (i = 1; i <= 4; i++) if ($i !~ /^[0-9]+$/ || $i > 255) exit 1; exit 0 } { exit 1 }'; then
        echo "[PID: $$] $(date '+%Y-%m-%d-%H:%M:%S.000.000') Config_Error_Invalid_Environment_Variable(EI0001): Value $HCCL_IF_IP for environment variable HCCL_IF_IP is invalid. Expected value: \"ip[%ifname]\"." >&2
        die worker.py "RuntimeError: HCCL init failed: HCCL_IF_IP=$HCCL_IF_IP is not an IP address."
    fi
}

# bind_hccl_host RANK CARD: the rank's host-side HCCL listening port on HCCL_IF_IP; exits on failure.
bind_hccl_host() {
    if [ -n "${HCCL_HOST_SOCKET_PORT_RANGE:-}" ]; then
        HOST_PORTS=$(expand_ports "$HCCL_HOST_SOCKET_PORT_RANGE") ||
            die hccl "[ERROR] HCCL: HCCL_HOST_SOCKET_PORT_RANGE=$HCCL_HOST_SOCKET_PORT_RANGE is not a port, a range a-b, a list of them, or auto."
    else
        HOST_PORTS=$((${HCCL_IF_BASE_PORT:-60000} + $2))
    fi
    if ! is_host_address "$HCCL_IP"; then
        # The listen line is hcomm's (hccl_socket.cc `HcclSocket::Listen`, printed for any failed listen);
        # how HCCL words an address the host does not have is not in the sources we read: the
        # [npu-sim] line is ours.
        hccl_log "[hccl_socket.cc:110] [$$][InitChannelStage][RanktableDetect] socket type[2], listen on ip[$HCCL_IF_IP] and specific port[${HOST_PORTS%%[!0-9]*}] fail. Please check the port status and whether the port is being used by other process."
        error npu-sim "HCCL_IF_IP=$HCCL_IF_IP is not an address of this host (its addresses: $(host_addresses)): bind() fails with EADDRNOTAVAIL (Cannot assign requested address). Set HCCL_IF_IP to the host's own address."
        die worker.py "RuntimeError: HCCL init failed: rank $1 (physical card $2) cannot listen on HCCL_IF_IP=$HCCL_IF_IP."
    fi
    for p in $HOST_PORTS; do
        if hold_port "$HCCL_IP" "$p" /bin/true; then
            info hccl "rank $1: physical card $2 listens on HCCL host socket $HCCL_IP:$p"
            return 0
        fi
    done
    # hcomm prints its usePort out-parameter in EI0019, whose value the source does not settle for a
    # range: the last port tried stands for it.
    ei0019 "$HCCL_IP" "$p"
    if [ -n "${HCCL_HOST_SOCKET_PORT_RANGE:-}" ]; then
        hccl_log "[preempt_port_manager.cc] [PreemptPortManager::PreemptPortInRange] Complete polling of socket port range: [$HCCL_HOST_SOCKET_PORT_RANGE]"
        hccl_log "[preempt_port_manager.cc] [PreemptPortManager::PreemptPortInRange] All ports in socket port range are bound already. no available port to listen. Please check the ports status, or change the port range to listen on."
    else
        hccl_log "[hccl_socket.cc:110] [$$][InitChannelStage][RanktableDetect] socket type[2], listen on ip[$HCCL_IP] and specific port[$p] fail. Please check the port status and whether the port is being used by other process."
    fi
    die worker.py "RuntimeError: HCCL init failed: rank $1 (physical card $2) found no free HCCL host port on $HCCL_IP."
}

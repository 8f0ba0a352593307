# ascend-fleet npu-sim: vLLM's log line, `LEVEL mm-dd HH:MM:SS [file] message`, sourced by `vllm` and `api`.
ts() { date '+%m-%d %H:%M:%S'; }
info() { echo "INFO $(ts) [$1] $2"; }
error() { echo "ERROR $(ts) [$1] $2" >&2; }

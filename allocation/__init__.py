"""ascend-fleet's planner: stack config in, conflict-free NPU and port plan out.

Pure by design: nothing here imports Pulumi or touches the network; the
command line (`python -m allocation`) is the only part that reads files.
"""

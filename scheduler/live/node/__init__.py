"""The node agent (`corral node start`): what runs on each GPU server of a Corral cluster.

`nvml` is the one boundary to NVIDIA's management library; `hardware` turns what it reports into a Corral preset (or
a description when none fits); `mps` runs the CUDA MPS control daemon while fractional jobs need it; `health` writes
the GPUs' state for the controller; `agent` joins Ray with the node's resources and ties the rest together. Nothing
here imports Ray: the agent runs `ray start` as a child process.
"""

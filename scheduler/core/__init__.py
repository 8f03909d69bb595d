"""The simulation core: the cluster model, workloads and their profiles, the contention model, allocation state, the
decisions a policy returns, the event-driven simulator, trace loaders, the contention fit, and where Corral keeps its
files (`paths`). It imports nothing above it (no policies, agents, web, Ray or Flask): the simulator, the RL
environment and the live controller all build on it."""

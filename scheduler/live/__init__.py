"""The live service: the controller and its run backends (Ray), the job store, explanations, what-if, the store as
a trace (history), Prometheus series, and `corral serve`, the composition root that wires them to a policy and the
web app. It builds on `scheduler.core`."""

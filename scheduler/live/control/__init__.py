"""The live controller's rooms, each one concern of the scheduling pass (`scheduler.live.controller` runs them):

workers.py    the backend as a pass sees it: stops wait for the pass's commit
memory.py     what the controller knows between passes: the queue, the runs, the jobs held back, pending reasons
intake.py     what users asked: submissions, cancels, changes, holds, dependencies, requeues
health.py     the nodes: Ray's node table, joins and moves, drains and GPU faults, suspects and start strikes
reports.py    what the workers did: starts, ends, retries, losses, time limits, start deadlines
placing.py    the policy: loading it, asking it when its scene changed, applying its decisions, explaining waits
"""

"""Which heuristic teaches the agent in which regime: tiresias, gittins and tiresias with other queues on TRAINING
windows only (first three quarters of each dev trace, model seeds 0-3; synthetic seeds training draws), 4 windows of
300 jobs per workload and load. Prints each policy's geometric-mean avg JCT ratio to tiresias; `agents.imitation.BEST`
was read off its output.

    python benchmarks/teachers.py
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from agents.scenarios import draw
from policies import make_policy
from scheduler.simulator import Simulator

W = {'alibaba': '../shared/traces/alibaba_openb_before_day130.csv', 'philly': '../shared/traces/philly_day60.csv', 'synthetic': 'synthetic'}
P = {'alibaba': 'pcie-t4', 'philly': 'pcie-v100', 'synthetic': 'dgx-a100'}
pols = ['tiresias', 'gittins', 'tiresias:thresholds=60,600,3600', 'tiresias:thresholds=300,3600,36000', 'tiresias:thresholds=600,3600,36000']
for w, path in W.items():
    for load in (0.8, 1.3, 2.2):
        rng = np.random.default_rng(7)
        res = {p: [] for p in pols}
        for k in range(4):
            sc = draw(rng, [path], [P[w]], (3, 6), 300, (load, load), 'train')
            c, jobs = sc.build()
            for p in pols:
                res[p].append(Simulator(c, jobs, make_policy(p)).run().metrics['avg_jct_s'])
        base = np.array(res['tiresias'])
        print(w, load, {p: round(float(np.exp(np.mean(np.log(np.array(v) / base)))), 3) for p, v in res.items()}, flush=True)

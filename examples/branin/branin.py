"""An NNI trial, unchanged: minimise the Branin function (optimum 0.397887).

It reports a few intermediate results (the value "converging" over 5 steps) and a final result.
"""

import math
import time

import nni


def branin(x1: float, x2: float) -> float:
    a, b, c = 1.0, 5.1 / (4 * math.pi**2), 5 / math.pi
    r, s, t = 6.0, 10.0, 1 / (8 * math.pi)
    return a * (x2 - b * x1**2 + c * x1 - r) ** 2 + s * (1 - t) * math.cos(x1) + s


params = {"x1": 0.0, "x2": 0.0}
params.update(nni.get_next_parameter())
value = branin(params["x1"], params["x2"])
for step in range(5):
    time.sleep(0.02)
    nni.report_intermediate_result(value * (1 + 0.5 ** (step + 1)))
nni.report_final_result(value)

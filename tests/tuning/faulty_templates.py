"""A template whose candidates misbehave on purpose (imported into measurement workers
by the tests): ``behavior`` picks a correct matmul, a wrong one, a crash of the process
or a hang."""

from __future__ import annotations

import os
import signal
import time

from heterocc import te
from heterocc.targets.llvm.tuning import MATMUL
from heterocc.tuning.space import ConfigSpace, Knob
from heterocc.tuning.templates import Template, register_template


def _instantiate(args, config):
    behavior = config["behavior"]
    if behavior == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if behavior == "hang":
        time.sleep(3600)
    m, n, k, dtype = args
    A = te.placeholder((m, k), dtype, "A")
    B = te.placeholder((k, n), dtype, "B")
    r = te.reduce_axis(k, "k")
    offset = 1.0 if behavior == "wrong" else 0.0
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j] + offset / k, axis=r),
                   name="C")
    return te.create_schedule(C), [A, B, C]


FAULTY = register_template(Template(
    "faulty_matmul", "llvm",
    lambda args: ConfigSpace((Knob("behavior", "order", ("ok", "wrong", "crash", "hang")),)),
    lambda args: {"behavior": "ok"}, _instantiate, MATMUL.inputs, MATMUL.reference,
    MATMUL.flops))

"""Plan values: what to compute, never how; the runtime above them runs them.

Everything a user builds before a terminal lives here, as frozen values with
descriptions and signatures:

* :mod:`~dataio.plan.ops`: the :class:`~dataio.plan.ops.Op` node of every slot op and
  its parameter checks; :mod:`~dataio.plan.registry` declares each op once;
* :mod:`~dataio.plan.pipeline`: slots, shape stages, pipelines and bound pipelines;
* :mod:`~dataio.plan.predicates`: conditions (``dataio.cond``);
* :mod:`~dataio.plan.expr` and :mod:`~dataio.plan.frame`: column expressions and
  the nodes of frame plans;
* :mod:`~dataio.plan.custom` (``custom_op``) and :mod:`~dataio.plan.naming` (how plans
  name Python callables);
* :mod:`~dataio.plan.runtime`: where terminals find the loader and the frame engine.

Nothing here imports the runtime (:mod:`dataio.loader`, :mod:`dataio.engine`), the
record sources, I/O or a kernel; ``make lint`` checks it (import-linter).
"""

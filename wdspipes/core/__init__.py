"""The model of a stage and the engine that runs it, without torch: the bottom of the package.

- :mod:`~wdspipes.core.stage`: ``Stage``, the base of every stage: its arguments, and the epochs
  it opens; the pipeline that ends in a stage is iterated, saved and restored through it;
- :mod:`~wdspipes.core.protocol`: what a stage declares (how it resumes, its epochs), and the
  one table of functional names from which the front ends are made;
- :mod:`~wdspipes.core.context`: what an epoch hands each stage as it opens (the epoch's numbers,
  the split among readers, the seeds, the links the read path shares), and the clock that
  numbers a pipeline's epochs;
- :mod:`~wdspipes.core.engine`: opening an epoch of a pipeline, and assembling and restoring its
  state; the one traversal of the graph;
- :mod:`~wdspipes.core.elastic`: the states of all the readers of a job merged, for a job split
  another way;
- :mod:`~wdspipes.core.distributed`: ranks and workers, and the check of the split;
- :mod:`~wdspipes.core.curried`: curried stages for ``DataPipeline``;
- :mod:`~wdspipes.core.names`, :mod:`~wdspipes.core.arguments`,
  :mod:`~wdspipes.core.processes`: the rules of member names that reading and writing share,
  argument checks, the liveness of processes.

No module here imports torch at its top, and none imports anything of the package but
:mod:`wdspipes.errors` (and :mod:`wdspipes.redaction`); the DataPipe front end is in
:mod:`wdspipes.pipes`, torchdata's loaders and their mends in :mod:`wdspipes.loaders`.
"""

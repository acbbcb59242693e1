"""The state of a pipeline, for resuming mid-epoch: the protocol each stage follows to give its
part and take it back (:mod:`~wdspipes.state.protocol`), torch's own stages in it
(:mod:`~wdspipes.state.torch_stages`), the traversal of a graph of stages without pickling it
(:mod:`~wdspipes.state.graph`), the state of a whole pipeline assembled and handed back
(:mod:`~wdspipes.state.checkpoint`), and the states of a job's readers merged to resume with
another number of readers (:mod:`~wdspipes.state.elastic`).

Nothing here imports another folder of wdspipes: only :mod:`wdspipes.errors`.
"""

"""webdataset's vocabulary, one layer on top of wdspipes' stages.

Everything that is webdataset's way of saying what wdspipes' stages do lives here, and nowhere
below: the stages' modules (``read``, ``samples``) and their front ends (``pipes``,
``pipeline``) know nothing of it. The layer is made of:

- :mod:`~wdspipes.webdataset.stages`: the curried names of ``DataPipeline(...)``. Those with a
  stage's functional name and arguments (``decode``, ``to_tuple``, ``batched``, ...) are made
  from the one table of stages; those webdataset names otherwise (``shuffle``, ``map``,
  ``slice``, ``repeat``, ...) are written there;
- :mod:`~wdspipes.webdataset.torch_names`: webdataset's calls of the names torch owns
  (``.shuffle(n)``, ``.map(f, handler=h)``, ...) on wdspipes' stages;
- the constructors that are not stages of their own: :mod:`~wdspipes.webdataset.shardlists`
  (``SimpleShardList``, ``ResampledShards``, ``split_by_node``, ``split_by_worker``,
  ``DirectoryShardList``), :mod:`~wdspipes.webdataset.mix` (``RoundRobin``, ``RandomMix``),
  :mod:`~wdspipes.webdataset.compat` (``WebLoader``);
- the implementations behind webdataset's module paths: :mod:`~wdspipes.webdataset.tariterators`,
  :mod:`~wdspipes.webdataset.filters`, :mod:`~wdspipes.webdataset.utils`,
  :mod:`~wdspipes.webdataset.autodecode`, :mod:`~wdspipes.webdataset.handlers`,
  :mod:`~wdspipes.webdataset.gopen` (and ``shardlists``). The modules at those paths,
  ``wdspipes.tariterators``, ``wdspipes.filters``, ..., are thin facades over these.

:mod:`wdspipes.api` takes webdataset's names from here; nothing here imports the api or the
facades, so there is no ring. ``DataPipeline``, ``WebDataset`` and ``PipelineStage`` are not
here: they are wdspipes' own ways to build a pipeline (:mod:`wdspipes.pipeline`), which this
layer's names are the vocabulary of.
"""

# webdataset's calls of torch's names on wdspipes' stages, set up with the layer
from wdspipes.webdataset import torch_names as torch_names

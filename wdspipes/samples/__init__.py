"""Stages on samples, after the reader: decoding (:mod:`~wdspipes.samples.decoders`), fields
(:mod:`~wdspipes.samples.fields`), the shuffle buffer (:mod:`~wdspipes.samples.shuffle`),
batches (:mod:`~wdspipes.samples.batch`, handed from worker processes through shared memory by
:mod:`~wdspipes.samples.handover`), and epoch lengths (:mod:`~wdspipes.samples.epochs`).
"""

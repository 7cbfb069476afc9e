"""DistDGLv2's asynchronous minibatch pipeline: `pipeline`, its bounded stages (stages) and
its feature cache (feature_cache)."""

"""The ways a run is carried out: in memory, streamed in blocks, or map-reduced on Dask."""

"""segcli: segment reductions with TensorFlow's semantics, from Python or the shell.

>>> import segcli
>>> segcli.segment_reduce([1.0, 2.0, 3.0, 4.0], [0, 0, 2, 2], 4, op="mean")
array([1.5, 0. , 3.5, 0. ])
"""

from segcli.core import Reduction, reduce_arrays, segment_reduce
from segcli.errors import SegcliError
from segcli.ops import OPS

__version__ = "0.1.0"

__all__ = ["OPS", "Reduction", "SegcliError", "__version__", "reduce_arrays", "segment_reduce"]

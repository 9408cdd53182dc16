"""Constants shared by the torch glue and the Warp kernels (plain Python: importing it does no work).

Kernel files wrap them as ``wp.constant(...)`` of the type they need; op modules read them as they are. A
number that both sides must agree on lives here, once.
"""

#: "No index": padding of index outputs, and what an out-of-range index is treated as in a kernel.
SENTINEL_INDEX = -1
#: Warp arrays hold int32 shapes and int32 *byte* strides: no dimension and no byte stride may reach this.
INT32_LIMIT = 2**31
#: Points (of one cloud / feature row) the kernels can index: point indices are int32.
MAX_POINTS = INT32_LIMIT - 1
#: Rows (threads) of one launch when a launch too large for Warp is split into several.
MAX_LAUNCH_ROWS = 2**30

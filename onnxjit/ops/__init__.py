"""Host-side operator implementations, one module per family.

The modules are imported by this explicit list (not discovered), so the registry's contents
do not depend on the file system.
"""

from onnxjit.ops import (  # noqa: F401
    attention,
    control,
    elementwise,
    fused_attention,
    fused_conv,
    fused_elementwise,
    fused_gemm,
    fused_norm,
    image,
    misc,
    ml,
    nn,
    quant,
    reduce,
    resize,
    rnn,
    roi_pool,
    sequence,
    signal,
    strings,
    svm,
    tensor,
    vision,
)
